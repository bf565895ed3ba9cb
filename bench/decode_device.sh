#!/usr/bin/env bash
# The decode family on the GPU machine, in one call: build (if needed), the
# decode GPU tests, compute-sanitizer memcheck + racecheck on a small grid,
# and the decode benchmark. Full results under $OUT; a short table last.
#
#   (here, once)  cp -r /usr/src/googletest build-decode-gtest   # no GTest there
#   run tool:     bash bench/decode_device.sh   (carry: build-decode-gtest, build-decode-device)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/decode-out}
mkdir -p "$OUT"
BUILD=build-decode-device
GTEST_SRC=build-decode-gtest
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

if [ ! -f "$BUILD/gtest/lib/libgmock.a" ]; then
  cmake -S "$GTEST_SRC" -B "$BUILD/gtest-build" -G Ninja -DBUILD_GMOCK=ON \
    -DCMAKE_INSTALL_PREFIX="$PWD/$BUILD/gtest" >"$OUT/gtest.log" 2>&1 &&
    ninja -C "$BUILD/gtest-build" install >>"$OUT/gtest.log" 2>&1 || { log "gtest build failed"; tail -20 "$OUT/gtest.log"; }
fi
start=$(date +%s)
cmake -S . -B "$BUILD" -G Ninja -DFSDPA_BUILD_BENCH=OFF -DFSDPA_BUILD_TOOLS=OFF -DFSDPA_REQUIRE_PYTHON_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="$PWD/$BUILD/gtest" -DGTEST_ROOT="$PWD/$BUILD/gtest" >"$OUT/cmake.log" 2>&1 ||
  { log "cmake failed"; tail -30 "$OUT/cmake.log"; exit 1; }
ninja -C "$BUILD" -j16 fsdpa gpu_test_decode >"$OUT/build.log" 2>&1 ||
  { log "build failed"; grep -E "error|Error" "$OUT/build.log" | head -30; exit 1; }
log "build ok in $(( $(date +%s) - start )) s"

CUBLAS=$(python3 -c "import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH="${CUBLAS}:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv >"$OUT/gpu.txt" 2>&1

"$BUILD/bin/gpu_test_decode" --gtest_output=json:"$OUT/test_decode.json" >"$OUT/test_decode.log" 2>&1
log "gpu_test_decode rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_decode.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|error" "$OUT/test_decode.log" | head -20

python3 -X faulthandler bench/decode_bench.py --lib "$BUILD/libfsdpa.so" --out "$OUT/h200-decode.json" \
  --md "$OUT/h200-decode.md" >"$OUT/bench.log" 2>&1
log "bench rc=$?"
SMALL=${DECODE_SANITIZER_FILTER:-'Decode.SplitsForced:Decode.FullyMaskedRowsAndSinks:Decode.EmptyKeys'}
for tool in ${DECODE_SANITIZERS:-memcheck racecheck}; do
  compute-sanitizer --tool "$tool" --error-exitcode 9 "$BUILD/bin/gpu_test_decode" \
    --gtest_filter="$SMALL" >"$OUT/sanitizer-$tool.log" 2>&1
  log "compute-sanitizer $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer-$tool.log" | tail -1)"
done

tail -5 "$OUT/bench.log" | grep -v '^|' || true
cat "$OUT/summary.txt"
cat "$OUT/h200-decode.md" 2>/dev/null
