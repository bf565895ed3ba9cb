#!/usr/bin/env bash
# The CPU library, its tests and the C ABI fuzzer under AddressSanitizer and
# UndefinedBehaviorSanitizer (clang, CUDA off, in ./build-asan): the CPU test
# suites (all but the Python and install tests, whose host processes are not
# instrumented), then the fuzzer for FSDPA_FUZZ_SECONDS (default 60) from an
# empty corpus. Any sanitizer report or fuzzer finding fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
mkdir -p build-asan
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DFSDPA_CUDA=OFF -DFSDPA_BUILD_BENCH=OFF -DFSDPA_FUZZ=ON \
  -DFSDPA_REQUIRE_PYTHON_TESTS=OFF -DFSDPA_TORCH_EXTENSION=OFF \
  "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags -fsanitize=fuzzer-no-link" \
  >build-asan/configure.log || { cat build-asan/configure.log; exit 1; }
cmake --build build-asan -j "$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan -LE gpu -E '^(python|package_)' --output-on-failure -j "$(nproc)"
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
log=build-asan/fuzz.log
if ! build-asan/bin/fsdpa_fuzz_c_api "$corpus" -max_total_time="${FSDPA_FUZZ_SECONDS:-60}" \
  -timeout=20 -max_len=256 -print_final_stats=1 -artifact_prefix=build-asan/fuzz- >"$log" 2>&1; then
  grep -E "runtime error|ERROR|finding|SUMMARY|Test unit written" "$log" || true
  tail -20 "$log"
  exit 1
fi
grep -E "^stat::|DONE" "$log"
