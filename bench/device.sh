#!/usr/bin/env bash
# The one command for the GPU machine: builds fsdpa (CUDA, ninja -j16, in
# .devbuild/build), runs the GPU tests, compute-sanitizer memcheck and
# racecheck on a small grid, and the side-by-side benchmark. Prints a short
# table last; full logs and results go under $OUT.
#
#   bash bench/device.sh [all|tests|bench]      (FSDPA_HEAD_DIMS=all by default)
#
# Needs GoogleTest: installed, or its source in .devbuild/deps/googletest
# (cp -r /usr/src/googletest .devbuild/deps/ here, then carry .devbuild/deps).
set -uo pipefail
STAGES=${1:-all}
OUT=${OUT:-/tmp/fsdpa-device}
mkdir -p "$OUT"
BUILD=.devbuild/build
HEAD_DIMS=${FSDPA_HEAD_DIMS:-all}
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

export PATH=/usr/local/cuda/bin:$PATH
CUBLAS_DIR=$(python3 -c "import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], 'lib'))" 2>/dev/null || true)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${CUBLAS_DIR}:${LD_LIBRARY_PATH:-}
say "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>&1 | head -1); nvcc: $(nvcc --version | tail -1)"

# ------------------------------------------------------------------ tune
# Tile variants of the prefill kernel (bench/prefill_tune.cu), built here
# beforehand into .devbuild/tune/prefill_tune and carried. With APPLY_TUNE=1
# the winners replace the rows of this machine's copy of config.h before the
# build (copy them into the repository's table with their numbers).
if [ -x .devbuild/tune/prefill_tune ] && [ "$STAGES" != bench ]; then
  timeout 120 .devbuild/tune/prefill_tune >/tmp/tune.txt 2>&1
  grep -v '^BEST' /tmp/tune.txt | tee -a "$SUMMARY"
  if [ "${APPLY_TUNE:-0}" = 1 ]; then
    while read -r _ d tile; do
      case $d in
        64) sed -i "s/  if (d <= 64) return {[0-9, ]*};/  if (d <= 64) return {$tile};/" src/cuda/prefill/config.h ;;
        128) sed -i "s/  if (d <= 128) return {[0-9, ]*};/  if (d <= 128) return {$tile};/" src/cuda/prefill/config.h ;;
        256) sed -i "s/^  return {[0-9, ]*};/  return {$tile};/" src/cuda/prefill/config.h ;;
      esac
    done < <(grep '^BEST' /tmp/tune.txt)
    say "tile table used: $(grep -E 'return \{[0-9]' src/cuda/prefill/config.h | tr -s ' ' | tr '\n' ' ')"
  fi
fi

# ------------------------------------------------------------------ build
cmake_extra=()
if [ ! -e /usr/local/cuda/lib64/libcublas.so ] && [ -n "$CUBLAS_DIR" ]; then
  lib=$(ls "$CUBLAS_DIR"/libcublas.so* | head -1)
  inc=$(dirname "$CUBLAS_DIR")/include
  say "cuBLAS from the torch wheel: $lib"
  cmake_extra+=("-DCUDA_cublas_LIBRARY=$lib" "-DCMAKE_CUDA_FLAGS=-I$inc" "-DCMAKE_CXX_FLAGS=-I$inc")
fi
if ! ls /usr/lib/x86_64-linux-gnu/cmake/GTest /usr/local/lib/cmake/GTest /usr/lib/cmake/GTest >/dev/null 2>&1; then
  if [ ! -d /tmp/gtest/include/gmock ]; then
    cmake -S .devbuild/deps/googletest -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX=/tmp/gtest -DBUILD_GMOCK=ON >/tmp/gtest.log 2>&1 &&
      ninja -C /tmp/gtest-build install >>/tmp/gtest.log 2>&1 || { tail -20 /tmp/gtest.log; exit 1; }
  fi
  cmake_extra+=("-DCMAKE_PREFIX_PATH=/tmp/gtest")
fi
t0=$(date +%s)
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DFSDPA_BUILD_TOOLS=OFF \
  -DFSDPA_BUILD_BENCH=OFF -DFSDPA_REQUIRE_PYTHON_TESTS=OFF -DFSDPA_HEAD_DIMS="$HEAD_DIMS" "${cmake_extra[@]}" >"$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
ninja -C $BUILD -j16 fsdpa gpu_test_prefill gpu_test_unfused >>"$OUT/build.log" 2>&1 ||
  { grep -E -A12 "error|Error" "$OUT/build.log" | head -80; exit 1; }
say "build: $(($(date +%s) - t0)) s (FSDPA_HEAD_DIMS=$HEAD_DIMS)"
# Compile time per prefill instance (ninja log: start end mtime output).
awk '$4 ~ /instances\/prefill_.*\.o$/ {t=($2-$1)/1000; n++; s+=t; if (t>m) m=t} END {if (n) printf "prefill instances: %d, %.1f s mean, %.1f s max each (16 parallel jobs)\n", n, s/n, m}' \
  $BUILD/.ninja_log | tee -a "$SUMMARY"

# ------------------------------------------------------------------ tests
if [ "$STAGES" = all ] || [ "$STAGES" = tests ]; then
  t0=$(date +%s)
  : >"$OUT/tests.log"
  pids=()
  for i in $(seq 0 11); do
    GTEST_TOTAL_SHARDS=12 GTEST_SHARD_INDEX=$i timeout 300 $BUILD/bin/gpu_test_prefill --gtest_brief=1 \
      >"$OUT/prefill_shard_$i.txt" 2>&1 &
    pids+=($!)
  done
  timeout 300 $BUILD/bin/gpu_test_unfused --gtest_brief=1 >"$OUT/unfused_tests.txt" 2>&1 &
  pids+=($!)
  for p in "${pids[@]}"; do wait "$p"; done
  cat "$OUT"/prefill_shard_*.txt "$OUT/unfused_tests.txt" >>"$OUT/tests.log"
  rm -f "$OUT"/prefill_shard_*.txt "$OUT/unfused_tests.txt"
  say "tests: $(grep -c '^\[       OK \]' "$OUT/tests.log") ok lines, $(grep -E -c '^\[  (PASSED|FAILED)' "$OUT/tests.log") summary lines, $(($(date +%s) - t0)) s"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/tests.log" | sort | uniq -c | tee -a "$SUMMARY"
  grep -E '^\[  FAILED  \] .*\.' "$OUT/tests.log" | head -40 | tee -a "$SUMMARY"

  t0=$(date +%s)
  small='*PrefillSemantics*L131x211_D64x64*causalBR_fused:*PrefillSemantics*D128x128*boolEmpty_fused:*PrefillAwkward*L37x1_*_fused:*PrefillAwkward*D72x72_f16*'
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $BUILD/bin/gpu_test_prefill \
    --gtest_filter="$small" --gtest_brief=1 >"$OUT/sanitizer.log" 2>&1
  say "memcheck prefill: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)"
  timeout 45 compute-sanitizer --tool memcheck --error-exitcode 9 $BUILD/bin/gpu_test_unfused \
    --gtest_filter='*boolEmpty*:*L97x0*:*interleaved*' --gtest_brief=1 >>"$OUT/sanitizer.log" 2>&1
  say "memcheck unfused: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)"
  timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $BUILD/bin/gpu_test_prefill \
    --gtest_filter='*PrefillSemantics*L131x211_D64x64*causalBR_fused:*PrefillAwkward*D64x64_f32*' \
    --gtest_brief=1 >>"$OUT/sanitizer.log" 2>&1
  say "racecheck prefill: rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1) ($(($(date +%s) - t0)) s sanitizers)"
fi

# ------------------------------------------------------------------ bench
if [ "$STAGES" = all ] || [ "$STAGES" = bench ]; then
  mkdir -p "$OUT/bench"
  FSDPA_LIBRARY=$PWD/$BUILD/libfsdpa.so PYTHONUNBUFFERED=1 timeout ${BENCH_TIMEOUT:-330} \
    python3 bench/compare_torch.py --out "$OUT/bench" ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
  say "bench: rc=$?"
  tail -4 "$OUT/bench.log" | grep -v '^|' | head -3
fi
echo "=================== summary"
cat "$SUMMARY"
[ -f "$OUT/bench/h200-prefill.md" ] && cat "$OUT/bench/h200-prefill.md"
exit 0
