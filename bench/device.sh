#!/usr/bin/env bash
# The one command for the GPU machine (the `device` tool's `run`): builds
# fsdpa with every head-dim bucket (ninja -j16, in .devbuild/build, which
# survives between calls while the machine stays warm), runs the GPU tests
# of every family, compute-sanitizer memcheck and racecheck on a small grid,
# the side-by-side benchmarks (prefill and decode) and the `fsdpa` command's
# default run. Full logs and results go into $OUT/results.tgz (the tool
# brings back at most 8 files); a short summary is printed last.
#
#   here, once:  mkdir -p .devbuild/deps/include && cp -r /usr/src/googletest .devbuild/deps/ &&
#                cp -r /usr/include/CLI /usr/include/nlohmann /usr/include/fmt .devbuild/deps/include/
#                (the command's CLI11, nlohmann/json and {fmt} headers, in case the machine lacks them)
#   run:         bash bench/device.sh [all|tests|bench|prefill|decode|route|coverage|ecosystem|verify|variants|paged|mla|profile|durations|runs|trace]   (carry: .devbuild/deps,
#                and .devbuild/variants for AB=1; AB_ONLY=1 skips the decode stage's
#                side-by-side bench of the tree, leaving its tests and the A/B;
#                DECODE_TESTS=0 skips the tree's decode tests and sanitizers;
#                DECODE_ROW_PROCESSES=1 runs each decode bench row in its own process,
#                as `all` and `bench` always do for the decode table;
#                for `coverage`: COVERAGE_TESTS=0 runs its benches alone,
#                COVERAGE_TESTS=large the head dims above 256 only (the prefill suite
#                filtered, the NaN suite, decode-vs-prefill: a fresh machine's one call
#                holds them with the build and the bench),
#                FULL_PREFILL_TABLE=1 adds the main prefill table, AB_BASE=1 the
#                A/B against .devbuild/base.tgz, COVERAGE_DECODE_SANITIZE=0 skips
#                the decode sanitizers, COVERAGE_DECODE_BENCH=0 the unaligned decode rows,
#                LARGE_SANITIZE_FILTER replaces the sanitizers' prefill filter,
#                MMA_LARGE=1 times the mma.sync row forced on the large head dims;
#                BENCH_ARGS="--only-dqk 576" keeps the bench's 576 rows,
#                AB_PREFILL=0 leaves the prefill table out of the A/B, AB_DECODE=0 the
#                decode rows, AB_ARGS="--only-dqk 64,128" are the A/B prefill bench's arguments;
#                for `ecosystem`: ECOSYSTEM_SUITES=0 skips the C++ GPU suites,
#                ECOSYSTEM_SPLITS=0 the small-decode splits bench, ECOSYSTEM_PIP=0 pip install;
#                any stage: RACECHECK_REPORT=hazard lists each hazard's shared address and
#                threads, SASS_KERNELS=<regex> brings those kernels' SASS back)
#
# `prefill` is the short loop for prefill kernel work: the prefill GPU tests
# and the NaN policy's, memcheck/racecheck on a small prefill grid
# (PREFILL_SANITIZE_FILTER replaces its filter) and on the NaN repair,
# compare_torch.py --quick (or BENCH_ARGS), and with AB_BASE=1 the A/B
# against .devbuild/base.tgz (ab_base_tables).
# `variants` is the kernel-variant A/B (.devbuild/variants) on the soft cap row.
# `paged` is the loop for paged and ragged KV caches: every GPU suite (the
# decode kernels and the key rule under them changed), the paged suite,
# memcheck/racecheck on a small paged grid (PAGED_SANITIZE_FILTER replaces
# its filter) and on the decode suite's PAGED_DECODE_SANITIZE filter,
# paged_bench.py (PAGED_ARGS: its arguments), and with
# AB_BASE=1 the decode rows DECODE_ROWS (and paged_bench.py's rows
# PAGED_AB_ROWS) against .devbuild/base.tgz (PAGED_SUITES=all: the prefill
# and unfused suites too).
# `coverage` is the loop for the head dims above 256 and the soft cap: the
# prefill, unfused and decode GPU tests, decode-vs-prefill, memcheck and
# racecheck on the column-slice kernels, and compare_torch.py --large.
set -uo pipefail
cd "$(dirname "$0")/.."
STAGES=${1:-all}
FINAL_OUT=${OUT:-/tmp/fsdpa-device}
OUT=/tmp/fsdpa-results
rm -rf "$OUT"
mkdir -p "$OUT" "$FINAL_OUT"
BUILD=.devbuild/build
HEAD_DIMS=${FSDPA_HEAD_DIMS:-all}
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
case "$STAGES" in
  all | tests | bench | prefill | decode | route | coverage | ecosystem | verify | variants | paged | mla | profile | durations | runs | trace) ;;
  *) say "stage '$STAGES': not one of all, tests, bench, prefill, decode, route, coverage, ecosystem, verify, variants, paged, mla, profile, durations, runs, trace"; exit 2 ;;
esac
case "$STAGES:${COVERAGE_TESTS:-1}" in
  coverage:1 | coverage:large | coverage:0) ;;
  coverage:*) say "COVERAGE_TESTS=${COVERAGE_TESTS}: not one of 1, large, 0"; exit 2 ;;
esac
# Every step's time limit is cut to what is left of BUDGET_S (the call's own
# limit, minus a margin for packing the results).
DEADLINE=$(($(date +%s) + ${BUDGET_S:-540} - 15))
limit() {
  local left=$((DEADLINE - $(date +%s)))
  [ "$left" -lt "$1" ] && echo $((left > 1 ? left : 1)) || echo "$1"
}

# The decode table with each row (indices $1, comma-separated) in its own
# decode_bench.py process, the GPU idle DECODE_COOLDOWN s before each, the
# rows' documents merged into $OUT/bench/h200-decode.*: no row inherits what
# an earlier row left in the process (the MLA row measured 0.7-1.7 us slower
# right after row 14 in one process, even after a 20 s cooldown:
# bench/NOTES.md, sessions 9-10).
decode_table_by_rows() {
  local rows=$1 r jsons=()
  mkdir -p "$OUT/bench/rows"
  for r in ${rows//,/ }; do
    sleep "${DECODE_COOLDOWN:-5}"
    FSDPA_LIBRARY=$PWD/$BUILD/libfsdpa.so PYTHONUNBUFFERED=1 timeout "$(limit ${DECODE_BENCH_TIMEOUT:-90})" \
      python3 -X faulthandler bench/decode_bench.py --rows "$r" --profile \
      --out "$OUT/bench/rows/$r.json" --md "$OUT/bench/rows/$r.md" --png "$OUT/bench/rows/$r.png" \
      >>"$OUT/bench-decode.log" 2>&1 && jsons+=("$OUT/bench/rows/$r.json") || say "decode bench row $r: failed"
  done
  python3 bench/decode_report.py "${jsons[@]}" --out "$OUT/bench/h200-decode.json" \
    --md "$OUT/bench/h200-decode.md" --png "$OUT/bench/h200-decode.png" \
    --made-by "FSDPA_HEAD_DIMS=$HEAD_DIMS DECODE_ROW_PROCESSES=1 DECODE_ROWS=$rows DECODE_COOLDOWN=${DECODE_COOLDOWN:-5} bash bench/device.sh $STAGES" \
    >/dev/null 2>>"$OUT/bench-decode.log"
  say "decode bench (one process per row): rc=$? ${#jsons[@]} rows"
}

export PATH=/usr/local/cuda/bin:$PATH
# cuBLAS comes from the torch wheel on the GPU machine.
CUBLAS_DIR=$(python3 -c "import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], 'lib'))" 2>/dev/null || true)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${CUBLAS_DIR}:${LD_LIBRARY_PATH:-}
say "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>&1 | head -1); nvcc: $(nvcc --version | tail -1)"

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
if [ -d .devbuild/deps/include ]; then
  cmake_extra+=("-DCMAKE_INCLUDE_PATH=$PWD/.devbuild/deps/include")
fi
# `trace` builds apart: its kernels carry the phase stamps, and may spill a
# few bytes for them (the capped 256/256 consumer: 4), which its summary
# shows rather than failing the build on.
if [ "$STAGES" = trace ]; then
  BUILD=.devbuild/trace
  cmake_extra+=(-DFSDPA_PREFILL_TRACE=ON -DFSDPA_BUILD_BENCH=ON -DFSDPA_BUILD_TESTS=OFF
    -DFSDPA_WERROR=OFF)
fi
t0=$(date +%s)
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DFSDPA_BUILD_BENCH=OFF \
  -DFSDPA_REQUIRE_PYTHON_TESTS=OFF -DFSDPA_HEAD_DIMS="$HEAD_DIMS" "${cmake_extra[@]}" \
  -DFSDPA_TORCH_PYTHON="$(command -v python3)" >"$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
# The compiled torch binding, where CMake found the machine's torch: built
# with the library, and then required by the Python GPU tests.
TORCH_NATIVE=0
grep -q "fsdpa: torch binding for torch" "$OUT/build.log" && TORCH_NATIVE=1
say "torch binding: $(grep -E -o 'fsdpa: (torch binding for torch|no torch binding).*' "$OUT/build.log" | head -1)"
if [ "$STAGES" = runs ]; then
  build_targets=(fsdpa_cli)  # the `runs` stage needs the command alone
elif [ "$STAGES" = trace ]; then
  build_targets=(fsdpa_cli)  # fsdpa run --trace
else
  build_targets=(fsdpa fsdpa_cli gpu_test_prefill gpu_test_unfused gpu_test_decode gpu_test_decode_vs_prefill
    gpu_test_paged gpu_test_nan_policy gpu_test_tma gpu_test_stream_order)
fi
ninja -C $BUILD -j16 "${build_targets[@]}" >>"$OUT/build.log" 2>&1 ||
  { grep -E -A12 "error|Error" "$OUT/build.log" | head -80; exit 1; }
say "build: $(($(date +%s) - t0)) s (FSDPA_HEAD_DIMS=$HEAD_DIMS)"
# The binding on its own, so that a failure of it (a torch header this
# machine's torch changed) costs the call only the binding's tests.
case $STAGES in runs | trace | profile | durations) TORCH_NATIVE=0 ;; esac  # stages that use no torch binding
if [ "$TORCH_NATIVE" = 1 ]; then
  ninja -C $BUILD fsdpa_torch_native >"$OUT/torch-binding-build.log" 2>&1 ||
    { TORCH_NATIVE=0; say "torch binding build failed:"; grep -E -m3 -A6 "error" "$OUT/torch-binding-build.log" | cut -c1-240 | tee -a "$SUMMARY"; }
fi
awk '$4 ~ /instances\/.*\.o$/ {t=($2-$1)/1000; n++; s+=t; if (t>m) m=t} END {if (n) printf "instances: %d, %.1f s mean, %.1f s max each (16 parallel jobs)\n", n, s/n, m}' \
  $BUILD/.ninja_log | tee -a "$SUMMARY"

# What the compiler made of the kernels: tensor-core instructions per kernel
# kind (wgmma shows as HGMMA, mma.sync as HMMA) and local-memory traffic.
if command -v cuobjdump >/dev/null; then
  cuobjdump -sass $BUILD/libfsdpa.so >"$OUT/sass.txt" 2>/dev/null
  awk '/Function :/ {k = $3 ~ /prefill_hopper/ ? "prefill_hopper" : $3 ~ /prefill_kernel/ ? "prefill_mma" : $3 ~ /decode_mla/ ? "decode_mla" : $3 ~ /decode/ ? "decode" : "other"}
       /HGMMA/ {g[k]++} /HMMA/ {h[k]++} /LDL|STL/ {l[k]++} /Function :/ {f[k]++}
       END {for (k in f) printf "sass %s: %d kernels, HGMMA %d, HMMA %d, LDL/STL %d\n", k, f[k], g[k], h[k], l[k]}' \
    "$OUT/sass.txt" | sort | tee -a "$SUMMARY"
  # SASS_KERNELS (a regex of mangled names): those kernels' SASS comes back
  # in sass-kernels.txt, to read a sanitizer's or a profile's offsets against.
  if [ -n "${SASS_KERNELS:-}" ]; then
    awk -v re="$SASS_KERNELS" '/Function :/ {keep = $3 ~ re} keep' "$OUT/sass.txt" >"$OUT/sass-kernels.txt"
    say "sass of $SASS_KERNELS: $(grep -c 'Function :' "$OUT/sass-kernels.txt") kernels in sass-kernels.txt"
  fi
  gzip -f "$OUT/sass.txt"
fi

# ------------------------------------------------------------------ prefill loop
# The prefill suite in 12 shards in the background (their pids in `pids`),
# each writing $OUT/prefill_shard_<i>.txt.
pids=()
start_prefill_shards() {
  for i in $(seq 0 11); do
    : >"$OUT/prefill_shard_$i.txt"
    GTEST_TOTAL_SHARDS=12 GTEST_SHARD_INDEX=$i run_test "$OUT/prefill_shard_$i.txt" "$1" \
      gpu_test_prefill "shard $i" &
    pids+=($!)
  done
}

# Test binary $3 (in $BUILD/bin; $4: a label such as its shard) with limit
# $2 s, appending to log $1, then its exit status as "[  EXIT    ] <binary>
# <label>: <status>": a process that dies (a crash, an abort, the time limit)
# prints no gtest summary, and report_tests names it by that line. Returns
# that status.
run_test() {
  local log=$1 seconds=$2 binary=$3 label=${4:-} status
  timeout "$(limit "$seconds")" "$BUILD/bin/$binary" --gtest_brief=1 >>"$log" 2>&1
  status=$?
  echo "[  EXIT    ] $binary${label:+ $label}: $status" >>"$log"
  return "$status"
}

# The short loops' report of $OUT/tests.log (counts, failures, and every test
# process that did not exit 0), and memcheck + racecheck of test binary $1 on
# gtest filter $2 (limit $3 s each), named $4.
report_tests() {
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/tests.log" | sort | uniq -c | tee -a "$SUMMARY"
  grep -E '^\[  EXIT    \] .*: [1-9][0-9]*$' "$OUT/tests.log" | sed 's/$/ (exit status: 124 the time limit, 134 abort, 139 segfault)/' |
    tee -a "$SUMMARY"
  grep -E '^\[  FAILED  \] .*\.' "$OUT/tests.log" | head -20 | tee -a "$SUMMARY"
  grep -E -B2 -A12 'Failure' "$OUT/tests.log" | head -60
}
# Every GPU suite into $OUT/tests.log, reported: prefill (12 shards) beside
# unfused with limit $1 s, then decode alone ($2 s: its big-Lk cases time the
# GPU memory system) and decode-vs-prefill ($3 s).
run_gpu_suites() {
  local t0
  t0=$(date +%s)
  start_prefill_shards "$1"
  : >"$OUT/unfused_tests.txt"
  : >"$OUT/decode_tests.txt"
  run_test "$OUT/unfused_tests.txt" "$1" gpu_test_unfused &
  pids+=($!)
  for p in "${pids[@]}"; do wait "$p"; done
  run_test "$OUT/decode_tests.txt" "$2" gpu_test_decode
  run_test "$OUT/decode_tests.txt" "$3" gpu_test_decode_vs_prefill
  run_test "$OUT/decode_tests.txt" "$3" gpu_test_paged
  run_test "$OUT/decode_tests.txt" "$3" gpu_test_nan_policy
  run_test "$OUT/decode_tests.txt" "$3" gpu_test_tma
  run_test "$OUT/decode_tests.txt" "$3" gpu_test_stream_order
  cat "$OUT"/prefill_shard_*.txt "$OUT/unfused_tests.txt" "$OUT/decode_tests.txt" >"$OUT/tests.log"
  rm -f "$OUT"/prefill_shard_*.txt "$OUT/unfused_tests.txt" "$OUT/decode_tests.txt"
  say "gpu tests: $(($(date +%s) - t0)) s"
  report_tests
}
# The suites of the head dims above 256 into $OUT/tests.log, reported: the
# prefill suite (12 shards) filtered to them and the selection tests, limit
# $1 s, then the NaN suite and decode-vs-prefill ($2 s each).
run_large_suites() {
  local t0
  t0=$(date +%s)
  export GTEST_FILTER='PrefillSelection.*:*D288x*:*D300x*:*D320x*:*D330x*:*D384x*:*D440x*:*D511x*:*D512x*:*D520x*:*D576x*:*D64x512*:*D200x300*'
  start_prefill_shards "$1"
  for p in "${pids[@]}"; do wait "$p"; done
  unset GTEST_FILTER
  : >"$OUT/decode_tests.txt"
  run_test "$OUT/decode_tests.txt" "$2" gpu_test_nan_policy
  run_test "$OUT/decode_tests.txt" "$2" gpu_test_decode_vs_prefill
  cat "$OUT"/prefill_shard_*.txt "$OUT/decode_tests.txt" >"$OUT/tests.log"
  rm -f "$OUT"/prefill_shard_*.txt "$OUT/decode_tests.txt"
  say "gpu tests (head dims above 256): $(($(date +%s) - t0)) s"
  report_tests
}
sanitize_small() {
  local log="$OUT/sanitizer-$4.log"
  timeout $(limit "$3") compute-sanitizer --tool memcheck --error-exitcode 9 $BUILD/bin/$1 \
    --gtest_filter="$2" --gtest_brief=1 >"$log" 2>&1
  say "memcheck $4: rc=$? $(grep -E 'ERROR SUMMARY' "$log" | tail -1)"
  grep -E -m3 -A8 '^========= (Invalid|Program hit|Misaligned|Out-of-range)' "$log" | head -30 | tee -a "$SUMMARY"
  # A hazard inside cuBLAS's nvjet_* kernels (the unfused run a prefill case
  # compares with) is cuBLAS's own: racecheck reports one on the f16 576/512
  # top-left window case (bench/NOTES.md, session 15); excluding the cuBLAS
  # kernels (--kernel-name-exclude) made the sanitizer fail in them.
  # RACECHECK_REPORT=hazard: each hazard with its shared address and threads
  # (the default, analysis, names the two instructions only).
  timeout $(limit "$3") compute-sanitizer --tool racecheck --error-exitcode 9 \
    --racecheck-report "${RACECHECK_REPORT:-analysis}" $BUILD/bin/$1 \
    --gtest_filter="$2" --gtest_brief=1 >>"$log" 2>&1
  say "racecheck $4: rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$log" | tail -1)"
  grep -E -m2 -A14 '^========= (Error|Warning): Race' "$log" | head -40 | tee -a "$SUMMARY"
}

# The A/B base (AB_BASE=1): the library of .devbuild/base.tgz (`git archive`
# of the commit to compare with) built in /tmp/base, with the tree's bench
# scripts copied in; ab_root / ab_lib of a variant (base or tree), whose
# runs use that tree's own Python wrapper (the C ABI may differ).
build_ab_base() {
  rm -rf /tmp/base && mkdir -p /tmp/base "$OUT/ab" && tar xzf .devbuild/base.tgz -C /tmp/base
  cp bench/compare_torch.py bench/decode_bench.py bench/decode_report.py bench/paged_bench.py \
    bench/paged_report.py bench/report_plot.py bench/timing.py \
    /tmp/base/bench/
  local t0
  t0=$(date +%s)
  cmake -S /tmp/base -B /tmp/base/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFSDPA_BUILD_BENCH=OFF \
    -DFSDPA_BUILD_TESTS=OFF -DFSDPA_HEAD_DIMS="$HEAD_DIMS" "${cmake_extra[@]}" >"$OUT/ab/build.log" 2>&1 &&
    ninja -C /tmp/base/build -j16 fsdpa >>"$OUT/ab/build.log" 2>&1
  say "ab base build: rc=$? $(($(date +%s) - t0)) s"
}
ab_root() { [ "$1" = base ] && echo /tmp/base || echo "$PWD"; }
ab_lib() { [ "$1" = base ] && echo /tmp/base/build/libfsdpa.so || echo "$PWD/$BUILD/libfsdpa.so"; }
# decode_bench.py --fsdpa-only of variant $1, repetition $2, on rows $3.
ab_decode_run() {
  FSDPA_LIBRARY=$(ab_lib "$1") PYTHONUNBUFFERED=1 timeout "$(limit ${AB_TIMEOUT:-90})" \
    python3 "$(ab_root "$1")/bench/decode_bench.py" --rows "$3" --fsdpa-only \
    --out "$OUT/ab/decode-$1-$2.json" --md "$OUT/ab/decode-$1-$2.md" \
    --png "$OUT/ab/decode-$1-$2.png" >"$OUT/ab/decode-$1-$2.log" 2>&1
  grep -E "^\('" "$OUT/ab/decode-$1-$2.log" | sed "s/^/ab decode $1 #$2: /" |
    cut -c1-200 | tee -a "$SUMMARY"
}

# paged_bench.py --fsdpa-only (its fsdpa columns: dense, dense + lengths,
# dense BSHD + lengths, pages of 16 and 64, page 16 in order) of variant $1,
# repetition $2, on rows $3.
ab_paged_run() {
  FSDPA_LIBRARY=$(ab_lib "$1") PYTHONUNBUFFERED=1 timeout "$(limit ${AB_TIMEOUT:-90})" \
    python3 "$(ab_root "$1")/bench/paged_bench.py" --rows "$3" --fsdpa-only \
    --out "$OUT/ab/paged-$1-$2.json" --md "$OUT/ab/paged-$1-$2.md" >"$OUT/ab/paged-$1-$2.log" 2>&1
  grep -E "paged16 [0-9]" "$OUT/ab/paged-$1-$2.log" | sed "s/^/ab paged $1 #$2: /" |
    cut -c1-200 | tee -a "$SUMMARY"
}

# AB_BASE=1 (coverage and prefill stages): an A/B of the tree's library
# against the one built from .devbuild/base.tgz (`git archive` of the commit
# to compare with), on the main prefill table (fsdpa fused only; AB_ARGS are
# compare_torch.py's arguments) and the decode rows DECODE_ROWS, alternating,
# twice; each run uses its own tree's Python wrapper. AB_PREFILL=0 or
# AB_DECODE=0 leaves a table out.
ab_base_tables() {
  [ -f .devbuild/base.tgz ] || { say "ab: no .devbuild/base.tgz"; return; }
  build_ab_base
  local rep variant
  for rep in 1 2; do
    for variant in base tree; do
      [ "${AB_PREFILL:-1}" = 1 ] &&
        FSDPA_LIBRARY=$(ab_lib $variant) PYTHONUNBUFFERED=1 timeout "$(limit ${AB_TIMEOUT:-90})" \
        python3 "$(ab_root $variant)/bench/compare_torch.py" --fsdpa-only --no-flex --out "$OUT/ab" \
        --name "$variant-$rep" ${AB_ARGS:-} >"$OUT/ab/$variant-$rep.log" 2>&1
      [ "${AB_DECODE:-1}" = 1 ] && ab_decode_run $variant $rep "${DECODE_ROWS:-15,3,10}"
    done
  done
  [ "${AB_PREFILL:-1}" = 1 ] &&
    python3 bench/ab_report.py "$OUT"/ab/base-1.json "$OUT"/ab/tree-1.json "$OUT"/ab/base-2.json \
    "$OUT"/ab/tree-2.json 2>&1 | tee "$OUT/ab/prefill-ab.md" | tee -a "$SUMMARY"
}

# Nsight Compute on one launch of the kernels matching regex $2 while
# `fsdpa run --device cuda` runs with arguments $3 (one string), with the
# sections that say what a kernel waits on (throughput against the ceilings,
# the pipes, shared memory and L1 among them, warp stall reasons, stalls
# sampled by instruction): $OUT/$1.ncu-rep, its details page ($1.txt) and
# its per-instruction SASS with stall samples ($1-source.csv).
ncu_profile() {
  local run_args
  read -r -a run_args <<<"$3"
  timeout "$(limit 240)" ncu --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section SchedulerStats --section WarpStateStats --section Occupancy \
    --section SourceCounters -k "regex:$2" -s "${NCU_SKIP:-2}" -c 1 -f -o "$OUT/$1" \
    $BUILD/bin/fsdpa run --device cuda "${run_args[@]}" >"$OUT/$1.log" 2>&1
  say "ncu $1: rc=$? ($2; fsdpa run $3)"
  ncu --import "$OUT/$1.ncu-rep" --page details >"$OUT/$1.txt" 2>>"$OUT/$1.log"
  ncu --import "$OUT/$1.ncu-rep" --page source --csv --print-source sass \
    >"$OUT/$1-source.csv" 2>>"$OUT/$1.log"
  grep -E "Duration|Throughput|Stall|Issue Slots|Bank|Warp Cycles|Registers" "$OUT/$1.txt" |
    head -60 | tee -a "$SUMMARY"
}

# `profile`: ncu_profile of one shape's kernel (NCU_KERNEL, a regex, and
# NCU_RUN, `fsdpa run` arguments; by default the staged load stage of the
# wgmma prefill kernel on contiguous D=90 rows). NCU_REF, more `fsdpa run`
# arguments, profiles a second launch beside it (by default none; for the
# staged stage the aligned bucket: "--dqk 96 ..."). PROFILE=1 runs it first
# in any other stage too.
if [ "$STAGES" = profile ] || [ "${PROFILE:-0}" = 1 ]; then
  ncu_profile profile "${NCU_KERNEL:-prefill_hopper_kernel}" \
    "${NCU_RUN:---dqk 90 --batch 4 --hq 16 --lq 4096 --lk 4096 --causal --policy fused}"
  [ -n "${NCU_REF:-}" ] && ncu_profile profile-ref "${NCU_KERNEL:-prefill_hopper_kernel}" "$NCU_REF"
fi

# `durations`: each kernel's time, one call of `fsdpa run` for each argument
# set of DURATION_RUNS (';'-separated), by ncu with the caches kept (a split
# kernel and its combine after the warm-up): ncu runs the kernels one at a time,
# so a call slower in the graph-timed benches but not here is slower between
# its kernels (lost launch overlap), not in them.
if [ "$STAGES" = durations ]; then
  IFS=';' read -r -a duration_sets <<<"${DURATION_RUNS:?fsdpa run argument sets, ';'-separated}"
  for arguments in "${duration_sets[@]}"; do
    read -r -a run_args <<<"$arguments"
    say "== fsdpa run ${arguments:0:120}"
    $BUILD/bin/fsdpa run --device cuda "${run_args[@]}" 2>&1 | grep -E "^(kernel|splits|time) " |
      tee -a "$SUMMARY"
    timeout "$(limit 60)" ncu --cache-control none -s "${NCU_SKIP:-6}" -c 4 --csv \
      --metrics gpu__time_duration.sum,launch__grid_size,launch__cluster_dim_x \
      $BUILD/bin/fsdpa run --device cuda "${run_args[@]}" >"$OUT/ncu-durations.csv" 2>&1
    python3 - "$OUT/ncu-durations.csv" <<'PY' | tee -a "$SUMMARY"
import csv, sys
def short(kernel):  # "void ns::(anonymous namespace)::name<args>(params)" -> "name<args>"
    head = kernel.replace("(anonymous namespace)::", "").split("(")[0]
    name, _, args = head.partition("<")
    return name.split("::")[-1] + ("<" + args if args else "")
metrics = {}
for r in csv.reader(open(sys.argv[1])):
    if len(r) > 10 and r[0].isdigit():
        metrics.setdefault((int(r[0]), short(r[4])), {})[r[-3]] = r[-1]
for (i, name), m in sorted(metrics.items()):
    print(f"  launch {i}: {name} {m.get('gpu__time_duration.sum')} ns, grid "
          f"{m.get('launch__grid_size')}, cluster {m.get('launch__cluster_dim_x')}")
PY
  done
fi

if [ "$STAGES" = prefill ]; then
  t0=$(date +%s)
  start_prefill_shards 240
  run_test "$OUT/nan_policy_tests.txt" 120 gpu_test_nan_policy
  for p in "${pids[@]}"; do wait "$p"; done
  cat "$OUT"/prefill_shard_*.txt "$OUT/nan_policy_tests.txt" >"$OUT/tests.log"
  rm -f "$OUT"/prefill_shard_*.txt "$OUT/nan_policy_tests.txt"
  say "prefill gpu tests (and the NaN policy's): $(($(date +%s) - t0)) s"
  report_tests
  sanitize_small gpu_test_prefill "${PREFILL_SANITIZE_FILTER:-*PrefillSemantics*L131x211_D64x64*causalBR_fused:*PrefillAwkward*D72x72_f16*:*PrefillAwkward*D90x90*offset*:*PrefillAwkward*D59x59*f16*}" 90 prefill
  sanitize_small gpu_test_nan_policy '*_bf16_*v96c3nan*:*_f32_*L129x577*' 90 nan-policy
  mkdir -p "$OUT/bench"
  t0=$(date +%s)
  FSDPA_LIBRARY=$PWD/$BUILD/libfsdpa.so PYTHONUNBUFFERED=1 timeout "$(limit ${BENCH_TIMEOUT:-150})" \
    python3 bench/compare_torch.py --out "$OUT/bench" ${BENCH_ARGS:---quick} >"$OUT/bench-prefill.log" 2>&1
  say "prefill bench: rc=$? $(($(date +%s) - t0)) s"
  [ "${AB_BASE:-0}" = 1 ] && ab_base_tables
fi

if [ "$STAGES" = coverage ] && [ "${COVERAGE_TESTS:-1}" = large ]; then
  run_large_suites 150 60
  sanitize_small gpu_test_prefill "${LARGE_SANITIZE_FILTER:-*L64x300_D384x384*:*L131x211_D440x440_bf16*:*L64x300_D512x512*:*L192x500_D520x400*:*L32x130_D576x512_f16*:*PrefillAwkward*D576x512*mla*causalBR_fused}" 150 large-dims
fi
if [ "$STAGES" = coverage ] && [ "${COVERAGE_TESTS:-1}" = 1 ]; then
  run_gpu_suites 200 150 60
  [ "${COVERAGE_DECODE_SANITIZE:-1}" = 1 ] &&
    sanitize_small gpu_test_decode 'Decode.UnalignedRows:Decode.SoftCap' 150 decode-new
  sanitize_small gpu_test_prefill "${LARGE_SANITIZE_FILTER:-*PrefillAwkward*D576x512*mla*causalBR_fused:*PrefillAwkward*D300x300*:*PrefillSemantics*D64x64*causalBR*cap2*:*PrefillAwkward*D90x90*offset*:*PrefillAwkward*D59x59*f16*:*PrefillAwkward*L131x257_D90x90_bf16_bhsd*:*PrefillAwkward*L131x257_D76x76_f16_bhsd*:*PrefillSharedBudgets*D576x512*smem99k:*PrefillSharedBudgets*D256x256*smem163k}" 150 large-dims
fi
# COVERAGE_TESTS=0: the coverage benches alone.
if [ "$STAGES" = coverage ]; then
  mkdir -p "$OUT/bench"
  t0=$(date +%s)
  FSDPA_LIBRARY=$PWD/$BUILD/libfsdpa.so PYTHONUNBUFFERED=1 timeout "$(limit ${BENCH_TIMEOUT:-240})" \
    python3 bench/compare_torch.py --out "$OUT/bench" --name h200-prefill-large --large ${BENCH_ARGS:-} \
    >"$OUT/bench-prefill.log" 2>&1
  say "prefill bench (large): rc=$? $(($(date +%s) - t0)) s"
  # FULL_PREFILL_TABLE=1: the main prefill table too (every bucket, torch's
  # backends beside), as `bench` makes it.
  if [ "${FULL_PREFILL_TABLE:-0}" = 1 ]; then
    t0=$(date +%s)
    FSDPA_LIBRARY=$PWD/$BUILD/libfsdpa.so PYTHONUNBUFFERED=1 timeout "$(limit 150)" \
      python3 bench/compare_torch.py --out "$OUT/bench" >"$OUT/bench-prefill-main.log" 2>&1
    say "prefill bench (main table): rc=$? $(($(date +%s) - t0)) s"
  fi
  grep -E "causal=" "$OUT/bench-prefill.log" | cut -c1-230 | tee -a "$SUMMARY"
  $BUILD/bin/fsdpa plan --matrix >"$OUT/bench/support-matrix.md" 2>&1
  # Decode of unaligned rows (D=90 contiguous) beside the aligned D=96
  # (COVERAGE_DECODE_BENCH=0 skips it).
  if [ "${COVERAGE_DECODE_BENCH:-1}" = 1 ]; then
    FSDPA_LIBRARY=$PWD/$BUILD/libfsdpa.so PYTHONUNBUFFERED=1 timeout "$(limit 90)" \
      python3 bench/decode_bench.py --rows 17,18 --out "$OUT/bench/h200-decode-unaligned.json" \
      --md "$OUT/bench/h200-decode-unaligned.md" --png "$OUT/bench/h200-decode-unaligned.png" \
      >"$OUT/bench-decode.log" 2>&1
    say "decode bench (unaligned): rc=$?"
    grep -E "^\('" "$OUT/bench-decode.log" | cut -c1-200 | tee -a "$SUMMARY"
  fi
  [ "${AB_BASE:-0}" = 1 ] && ab_base_tables
  # MMA_LARGE=1: the mma.sync row forced (`fsdpa run --row cuda_fused_prefill`)
  # on the large head dims of compare_torch.py --large (B1 H16/8 L8192, causal
  # and not; 576/512 without the aliasing), to set beside torch efficient's
  # figures of the bench above: the portable kernel's rate on the H200.
  if [ "${MMA_LARGE:-0}" = 1 ]; then
    for dims in "288 288" "320 320" "384 384" "512 512" "576 512"; do
      read -r dqk dv <<<"$dims"
      for causal in "" "--causal"; do
        timeout "$(limit 60)" $BUILD/bin/fsdpa run --device cuda --row cuda_fused_prefill \
          --dqk "$dqk" --dv "$dv" --hq 16 --hkv 8 --lq 8192 --lk 8192 $causal --repeat 5 \
          >"$OUT/mma-large.txt" 2>&1
        say "mma.sync $dqk/$dv ${causal:-non-causal}: rc=$? $(grep -E '^rate' "$OUT/mma-large.txt")"
      done
    done
  fi
fi

# An A/B of kernel variants inside this one call (fresh machines differ by
# up to 10%). Each directory .devbuild/variants/<name>/ holds files laid out
# like the tree; the library is rebuilt with each overlaid in turn (the tree
# as it is is the variant "tree"), then `$1 <name> <rep>` times every
# library, alternating, twice.
decode_ab_run() {
  FSDPA_LIBRARY=/tmp/ab/$1.so PYTHONUNBUFFERED=1 timeout "$(limit ${AB_TIMEOUT:-60})" \
    python3 bench/decode_bench.py --rows "${DECODE_ROWS:-15}" --fsdpa-only --profile \
    --out "$OUT/ab/$1-$2.json" --md "$OUT/ab/$1-$2.md" --png "$OUT/ab/$1-$2.png" \
    >"$OUT/ab/$1-$2.log" 2>&1
  grep -E "^\('" "$OUT/ab/$1-$2.log" | sed "s/^/ab $1 #$2: /" | cut -c1-220 | tee -a "$SUMMARY"
}
softcap_ab_run() {
  FSDPA_LIBRARY=/tmp/ab/$1.so PYTHONUNBUFFERED=1 timeout "$(limit ${AB_TIMEOUT:-60})" \
    python3 bench/compare_torch.py --softcap-only --fsdpa-only --out "$OUT/ab" --name "$1-$2" \
    >"$OUT/ab/$1-$2.log" 2>&1
  grep -E "causal=" "$OUT/ab/$1-$2.log" | sed "s/^/ab $1 #$2: /" | cut -c1-220 | tee -a "$SUMMARY"
}
ab_variants() {
  [ -d .devbuild/variants ] || { say "ab: no .devbuild/variants"; return; }
  rm -rf /tmp/ab && mkdir -p /tmp/ab "$OUT/ab"
  cp $BUILD/libfsdpa.so /tmp/ab/tree.so
  local names=(tree) dir name files f rep
  for dir in .devbuild/variants/*/; do
    name=$(basename "$dir")
    files=$(cd "$dir" && find . -type f)
    for f in $files; do
      mkdir -p "/tmp/ab/orig/$(dirname "$f")" && cp "$f" "/tmp/ab/orig/$f" && cp "$dir/$f" "$f"
    done
    ninja -C $BUILD -j16 fsdpa >>"$OUT/build.log" 2>&1 && cp $BUILD/libfsdpa.so "/tmp/ab/$name.so" &&
      names+=("$name") || say "ab: variant $name did not build"
    for f in $files; do cp "/tmp/ab/orig/$f" "$f"; done
  done
  # The build back to the tree's sources: the next call on this machine
  # copies the tree in with its own (older) file times, so ninja would take
  # the last variant's objects for the tree's.
  ninja -C $BUILD -j16 fsdpa >>"$OUT/build.log" 2>&1 || say "ab: the tree did not build again"
  for rep in 1 2; do
    for name in "${names[@]}"; do "$1" "$name" "$rep"; done
  done
}

# ------------------------------------------------------------------ decode loop
# `decode`: the decode GPU tests, memcheck/racecheck on small MLA and split
# cases, and decode_bench.py on DECODE_ROWS (indices into its ROWS; default:
# MLA, D=128 at Lk=32768 and at 131072) with per-kernel profile times. The
# side-by-side benches idle the GPU DECODE_COOLDOWN seconds (default 5)
# before each row: right after torch's math backend on the 512/512 row
# (~500 W), the next row measured 76% instead of 85-87% (bench/NOTES.md,
# session 7).
if [ "$STAGES" = decode ] && [ "${DECODE_TESTS:-1}" = 1 ]; then
  t0=$(date +%s)
  : >"$OUT/tests.log"
  run_test "$OUT/tests.log" 240 gpu_test_decode
  say "decode gpu tests: rc=$? $(($(date +%s) - t0)) s"
  report_tests
  sanitize_small gpu_test_decode 'Decode.MlaRowsPerKvHead:Decode.FullyMaskedRowsAndSinks:Decode.SplitsForced' 120 decode
fi
if [ "$STAGES" = decode ] && [ "${AB_ONLY:-0}" = 1 ]; then
  say "AB_ONLY=1: no side-by-side bench on the tree"
elif [ "$STAGES" = decode ] && [ "${DECODE_ROW_PROCESSES:-0}" = 1 ]; then
  decode_table_by_rows "${DECODE_ROWS:-15,3,10}"
  grep -E 'kernel|us' "$OUT/bench-decode.log" | tail -20
elif [ "$STAGES" = decode ]; then
  mkdir -p "$OUT/bench"
  FSDPA_LIBRARY=$PWD/$BUILD/libfsdpa.so PYTHONUNBUFFERED=1 timeout "$(limit ${DECODE_BENCH_TIMEOUT:-90})" \
    python3 -X faulthandler bench/decode_bench.py --rows "${DECODE_ROWS:-15,3,10}" --profile \
    --cooldown "${DECODE_COOLDOWN:-5}" \
    --out "$OUT/bench/h200-decode.json" --md "$OUT/bench/h200-decode.md" --png "$OUT/bench/h200-decode.png" \
    >"$OUT/bench-decode.log" 2>&1
  say "decode bench: rc=$?"
  grep -E 'kernel|us' "$OUT/bench-decode.log" | tail -20
fi
if [ "$STAGES" = decode ]; then
  # NCU=1: Nsight Compute on the MLA row (stall reasons, pipe use), one launch.
  if [ "${NCU:-0}" = 1 ]; then
    timeout $(limit 120) ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
      --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      -k regex:decode_mla -c 1 \
      $BUILD/bin/fsdpa run --device cuda --hq 128 --hkv 1 --lq 1 --lk 32768 --dqk 576 --dv 512 --mla \
      >"$OUT/ncu-mla.txt" 2>&1
    say "ncu mla: rc=$?"
    grep -E 'Duration|Throughput|stalled|Eligible|Executed Ipc' "$OUT/ncu-mla.txt" | head -60
  fi
  # NCU_SOURCE=1: per-instruction warp states (SASS with stall samples, CSV)
  # of one kernel for finding where the cycles go: by default the MLA kernel;
  # NCU_KERNEL (a regex) and NCU_RUN (arguments of `fsdpa run`) pick another.
  if [ "${NCU_SOURCE:-0}" = 1 ]; then
    ncu_profile ncu-mla "${NCU_KERNEL:-decode_mla}" \
      "${NCU_RUN:---hq 128 --hkv 1 --lq 1 --lk 32768 --dqk 576 --dv 512 --mla}"
  fi
  # AB=1: an A/B of kernel variants (ab_variants) on DECODE_ROWS.
  if [ "${AB:-0}" = 1 ]; then
    ab_variants decode_ab_run
  fi
fi
# `variants`: the same A/B of kernel variants on the soft cap row of
# compare_torch.py (with and without the cap), nothing else.
if [ "$STAGES" = variants ]; then
  ab_variants softcap_ab_run
fi

# ------------------------------------------------------------------ paged loop
if [ "$STAGES" = paged ]; then
  # PAGED_SUITES=all: every GPU suite; none: no tests; else the decode,
  # decode-vs-prefill and paged ones.
  if [ "${PAGED_SUITES:-decode}" = all ]; then
    run_gpu_suites 200 150 90
  elif [ "${PAGED_SUITES:-decode}" != none ]; then
    t0=$(date +%s)
    for suite in gpu_test_paged gpu_test_decode gpu_test_decode_vs_prefill gpu_test_tma \
      gpu_test_stream_order; do
      run_test "$OUT/tests.log" 150 "$suite"
    done
    say "decode + paged gpu tests: $(($(date +%s) - t0)) s"
    report_tests
  fi
  mkdir -p "$OUT/bench"
  t0=$(date +%s)
  FSDPA_LIBRARY=$PWD/$BUILD/libfsdpa.so PYTHONUNBUFFERED=1 timeout "$(limit ${BENCH_TIMEOUT:-150})" \
    python3 bench/paged_bench.py --out "$OUT/bench/h200-paged.json" --md "$OUT/bench/h200-paged.md" \
    --png "$OUT/bench/h200-paged.png" \
    ${PAGED_ARGS:-} >"$OUT/bench-paged.log" 2>&1
  say "paged bench: rc=$? $(($(date +%s) - t0)) s"
  grep -E "paged16 [0-9]" "$OUT/bench-paged.log" | cut -c1-200 | tee -a "$SUMMARY"
  tail -5 "$OUT/bench-paged.log" | grep -E "Error|error" | tee -a "$SUMMARY"
  [ "${PAGED_SUITES:-decode}" != none ] &&
    sanitize_small gpu_test_paged "${PAGED_SANITIZE_FILTER:-PagedDecode.Semantics:PagedDecode.NarrowRowsAndPaddedPools}" 120 paged
  # PAGED_DECODE_SANITIZE: a gtest filter of the decode suite to sanitize too
  # (the dense side of a changed decode load stage).
  [ -n "${PAGED_DECODE_SANITIZE:-}" ] && sanitize_small gpu_test_decode "$PAGED_DECODE_SANITIZE" 120 decode
  if [ "${AB_BASE:-0}" = 1 ] && [ -f .devbuild/base.tgz ]; then
    build_ab_base
    for rep in 1 2; do
      for variant in base tree; do
        ab_decode_run $variant $rep "${DECODE_ROWS:-15,3,0,8,17}"
        [ -n "${PAGED_AB_ROWS:-}" ] && ab_paged_run $variant $rep "$PAGED_AB_ROWS"
      done
    done
  fi
fi

# The Python GPU tests (the torch op, torch.compile, CUDA graphs, the
# transformers backend) against the build's library, at most $1 seconds.
run_python_gpu_tests() {
  FSDPA_LIBRARY=$PWD/$BUILD/libfsdpa.so PYTHONPATH=$PWD/python FSDPA_TORCH_NATIVE=$TORCH_NATIVE \
    timeout $(limit "$1") python3 -m pytest -q -p no:cacheprovider -rs tests/python/gpu >"$OUT/python_gpu.log" 2>&1
  say "python gpu tests: rc=$? $(tail -1 "$OUT/python_gpu.log")"
  grep -E "^(FAILED|ERROR|SKIPPED)" "$OUT/python_gpu.log" | head -30 | cut -c1-240 | tee -a "$SUMMARY"
}

# The host's cost of a launch by kind against the library's call
# (bench/launch_cost.cu), built here against the build's libfsdpa.so.
run_launch_cost() {
  nvcc -std=c++20 -O2 -gencode=arch=compute_90a,code=sm_90a -Iinclude bench/launch_cost.cu \
    -L$BUILD -lfsdpa -Xlinker -rpath=$PWD/$BUILD -o $BUILD/launch_cost >"$OUT/launch-cost-build.log" 2>&1 &&
    timeout "$(limit 60)" $BUILD/launch_cost >"$OUT/bench/h200-launch-cost.md" 2>&1
  say "launch cost bench: rc=$?"
  grep -E '^(\||plan:|environment:)' "$OUT/bench/h200-launch-cost.md" | tee -a "$SUMMARY"
}

# ------------------------------------------------------------------ ecosystem
# The Python side on the GPU: every GPU suite (the library's call path
# changed under them), the Python GPU tests (torch op, torch.compile, CUDA
# graphs, the transformers backend), the call-overhead bench, the small
# decodes by split count (bench/decode_splits.py: the split rule and the
# cluster merge), and `pip install` of the CUDA build into a fresh venv.
# `mla`: the loop for the MLA kernels (decode_mla.cu's 32-key kernel,
# decode_mla_latent.cu's alternating one; FSDPA_HEAD_DIMS=576 builds what it
# needs): `fsdpa run --check` on MLA shapes through both (decode and prefill,
# dense and paged, forced splits: split pairs, pairs that write out, the
# combine), the decode, paged and prefill suites' MLA tests, memcheck and
# racecheck on both kernels, the A/B of the two MLA prefill rows (eager
# medians, alternated twice) and decode_bench.py's MLA row.
if [ "$STAGES" = mla ]; then
  mla_run=(--device cuda --dqk 576 --dv 512 --mla --hkv 1)
  mla_check() {  # a label, then `fsdpa run` arguments
    local label=$1 out status
    shift
    out=$(timeout "$(limit 60)" $BUILD/bin/fsdpa run "${mla_run[@]}" "$@" --check --repeat 1 2>&1)
    status=$?
    say "[$status] $label | $(echo "$out" | grep -E '^(kernel|splits)' | awk '{print $2}' | tr '\n' ' ')| $(echo "$out" | grep -E '^check|rror|fsdpa:' | tr '\n' ' ' | cut -c1-150)"
  }
  mla_check "decode h128 lk 32768" --hq 128 --lq 1 --lk 32768
  mla_check "decode h16 b3 paged 16 ragged causal" --hq 16 --batch 3 --lq 2 --lk 700 --page-size 16 --seq-lens 700,1,333 --causal
  mla_check "decode h16 paged 8 window sinks lse" --hq 16 --batch 2 --lq 4 --lk 3000 --page-size 8 --window 500 --sinks --lse
  mla_check "prefill lq 17" --hq 16 --lq 17 --lk 4099
  mla_check "prefill lq 40 paged 8 ragged causal" --hq 16 --batch 3 --lq 40 --lk 700 --page-size 8 --seq-lens 700,41,333 --causal
  mla_check "prefill lq 64 paged 32 window" --hq 16 --batch 2 --lq 64 --lk 3000 --page-size 32 --window 500 --causal
  mla_check "prefill lq 33 paged 64 ragged mask" --hq 8 --batch 4 --lq 33 --lk 2000 --page-size 64 --seq-lens 2000,100,1500,64 --mask boolean
  mla_check "prefill lq 20 paged 128 sinks lse" --hq 16 --batch 2 --lq 20 --lk 5000 --page-size 128 --sinks --lse
  mla_check "prefill lq 40 paged 96 (32-key kernel)" --hq 16 --batch 2 --lq 40 --lk 1000 --page-size 96
  mla_check "prefill lq 100 softcap f16 top-left" --hq 16 --lq 100 --lk 2500 --softcap 30 --dtype f16 --causal top-left
  mla_check "prefill lq 300 causal (32-key kernel)" --hq 16 --lq 300 --lk 700 --causal --row cuda_fused_prefill_mla
  for splits in 2 3 16; do
    FSDPA_DECODE_SPLITS=$splits mla_check "splits $splits prefill lq 20" --hq 16 --lq 20 --lk 5000 --lse
    FSDPA_DECODE_SPLITS=$splits mla_check "splits $splits prefill lq 20 paged 64" --hq 16 --batch 2 --lq 20 --lk 3000 --page-size 64
    FSDPA_DECODE_SPLITS=$splits mla_check "splits $splits decode paged 32" --hq 16 --batch 2 --lq 1 --lk 3000 --page-size 32
  done
  : >"$OUT/tests.log"
  GTEST_FILTER='*Mla*' run_test "$OUT/tests.log" 150 gpu_test_decode
  GTEST_FILTER='*Mla*' run_test "$OUT/tests.log" 90 gpu_test_paged
  GTEST_FILTER='*D576x512*_mla*:PrefillSelection.Mla*' run_test "$OUT/tests.log" 150 gpu_test_prefill
  report_tests
  sanitize_small gpu_test_prefill '*H16x1_L97x333_D576x512_bf16_mla*:*PrefillAwkward*D576x512*mla*causalBR_fused' 150 mla-prefill
  sanitize_small gpu_test_decode 'Decode.MlaSemantics*:Decode.MlaSplitPairs*' 150 mla-decode
  for args in "--hq 16 --lq 300 --lk 700 --causal --lse" "--hq 16 --batch 2 --lq 40 --lk 3000 --page-size 64 --seq-lens 3000,700"; do
    read -r -a extra <<<"$args"
    FSDPA_DECODE_SPLITS=2 timeout "$(limit 60)" compute-sanitizer --tool racecheck --error-exitcode 9 \
      $BUILD/bin/fsdpa run "${mla_run[@]}" "${extra[@]}" --repeat 1 >>"$OUT/sanitizer-mla-runs.log" 2>&1
    say "racecheck fsdpa run $args (2 splits): rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/sanitizer-mla-runs.log" | tail -1)"
  done
  mla_rate() {
    timeout "$(limit 40)" $BUILD/bin/fsdpa run "${mla_run[@]}" "$@" --repeat 10 2>&1 |
      grep -E '^(splits|time|rate)' | tr '\n' ' ' | cut -c1-150
  }
  for shape in "--hq 16 --lq 8192 --lk 8192" "--hq 16 --lq 8192 --lk 8192 --causal" \
    "--hq 128 --lq 2048 --lk 32768" "--hq 128 --lq 32 --lk 32768"; do
    read -r -a extra <<<"$shape"
    for rep in 1 2; do
      for row in cuda_fused_prefill_mla cuda_fused_prefill_mla_alternating; do
        say "A/B $shape $row: $(mla_rate "${extra[@]}" --row $row)"
      done
    done
  done
  mkdir -p "$OUT/bench"
  FSDPA_LIBRARY=$PWD/$BUILD/libfsdpa.so PYTHONUNBUFFERED=1 timeout "$(limit 120)" \
    python3 bench/decode_bench.py --rows 15 --out "$OUT/bench/h200-decode-mla.json" \
    --md "$OUT/bench/h200-decode-mla.md" >"$OUT/bench-decode.log" 2>&1
  say "decode bench (MLA row): rc=$?"
  grep -E "^\('" "$OUT/bench-decode.log" | cut -c1-200 | tee -a "$SUMMARY"
fi

if [ "$STAGES" = ecosystem ]; then
  [ "${ECOSYSTEM_SUITES:-1}" = 1 ] && run_gpu_suites 240 200 120
  run_python_gpu_tests 300
  mkdir -p "$OUT/bench"
  FSDPA_LIBRARY=$PWD/$BUILD/libfsdpa.so timeout $(limit 120) python3 bench/overhead.py \
    --out "$OUT/bench/h200-overhead.json" >"$OUT/bench/h200-overhead.md" 2>&1
  say "overhead bench: rc=$?"
  tee -a "$SUMMARY" <"$OUT/bench/h200-overhead.md"
  run_launch_cost
  if [ "${ECOSYSTEM_SPLITS:-1}" = 1 ]; then
    FSDPA_LIBRARY=$PWD/$BUILD/libfsdpa.so timeout $(limit 90) python3 bench/decode_splits.py \
      --out "$OUT/bench/h200-decode-splits.json" --md "$OUT/bench/h200-decode-splits.md" \
      >"$OUT/decode-splits.log" 2>&1
    say "small-decode splits bench: rc=$?"
    grep -E '^\|' "$OUT/bench/h200-decode-splits.md" | tee -a "$SUMMARY"
  fi
  if [ "${ECOSYSTEM_PIP:-1}" = 1 ]; then
    t0=$(date +%s)
    FSDPA_PIP_CMAKE_ARGS="-DFSDPA_HEAD_DIMS=64;128 ${cmake_extra[*]}" timeout $(limit 240) \
      bash tests/package/check_pip.sh "$PWD" /tmp/fsdpa-pip python3 >"$OUT/pip.log" 2>&1
    say "pip install (CUDA build, fresh venv): rc=$? $(($(date +%s) - t0)) s $(tail -1 "$OUT/pip.log")"
  fi
fi

# ------------------------------------------------------------------ verify
# `verify`: the one call after a change to code every family shares (the
# epilogues, the NaN/Inf repair): every GPU suite, memcheck and racecheck on
# the NaN repair of prefill, decode (a split combine, a paged pool) and MLA
# cases (and the filters VERIFY_PREFILL_SANITIZE / VERIFY_DECODE_SANITIZE of
# the prefill and decode suites), the A/B against .devbuild/base.tgz (ab_base_tables: AB_ARGS,
# default --quick; DECODE_ROWS), the call-overhead and launch-cost benches,
# and with VERIFY_PYTHON=1 the Python GPU tests last.
if [ "$STAGES" = verify ]; then
  run_gpu_suites 200 150 90
  sanitize_small gpu_test_nan_policy "${NAN_SANITIZE_FILTER:-*_bf16_*v96c3nan*:*L1x8191*bf16*win100_*:*L1x300*f32*bool*:*mla*}" 120 nan-policy
  sanitize_small gpu_test_paged 'PagedDecode.UnusedRowsContributeNothing' 120 paged-nan
  # A changed load stage's own cases: VERIFY_PREFILL_SANITIZE and
  # VERIFY_DECODE_SANITIZE are gtest filters of the prefill and decode suites.
  [ -n "${VERIFY_PREFILL_SANITIZE:-}" ] && sanitize_small gpu_test_prefill "$VERIFY_PREFILL_SANITIZE" 120 prefill
  [ -n "${VERIFY_DECODE_SANITIZE:-}" ] && sanitize_small gpu_test_decode "$VERIFY_DECODE_SANITIZE" 120 decode
  mkdir -p "$OUT/ab" "$OUT/bench"
  AB_ARGS=${AB_ARGS:---quick} ab_base_tables
  FSDPA_LIBRARY=$PWD/$BUILD/libfsdpa.so timeout $(limit 120) python3 bench/overhead.py \
    --out "$OUT/bench/h200-overhead.json" >"$OUT/bench/h200-overhead.md" 2>&1
  say "overhead bench: rc=$?"
  tee -a "$SUMMARY" <"$OUT/bench/h200-overhead.md"
  run_launch_cost
  [ "${VERIFY_PYTHON:-0}" = 1 ] && run_python_gpu_tests 240
fi

# ------------------------------------------------------------------ runs
# `runs`: the quickest probe, for a call with little device time left: the
# command alone (with FSDPA_HEAD_DIMS, e.g. "96"), then `fsdpa run --device
# cuda` once per `;`-separated argument set of RUNS.
# `trace`: the wgmma prefill kernel's phases a key tile (`fsdpa run --trace`;
# src/cuda/prefill/trace.h) for each ';'-separated argument list of TRACE_RUNS
# (by default the gemma2-9b shape, capped and not); stamps in trace-<i>.csv.
if [ "$STAGES" = trace ]; then
  grep -E "spill stores" "$OUT/build.log" | grep -v " 0 bytes spill" | cut -c1-200 | head -4 | tee -a "$SUMMARY"
  IFS=';' read -r -a trace_sets <<<"${TRACE_RUNS:---dqk 256 --hq 16 --hkv 8 --lq 4096 --lk 4096 --causal --softcap 50;--dqk 256 --hq 16 --hkv 8 --lq 4096 --lk 4096 --causal}"
  i=0
  for trace_args in "${trace_sets[@]}"; do
    read -r -a args <<<"$trace_args"
    timeout "$(limit 60)" $BUILD/bin/fsdpa run --device cuda --policy fused "${args[@]}" \
      --trace "$OUT/trace-$i.csv" >"$OUT/trace-$i.txt" 2>&1
    say "fsdpa run --trace ${trace_args}: rc=$?"
    grep -E '^(kernel|time|rate|fsdpa)' "$OUT/trace-$i.txt" | cut -c1-200 | tee -a "$SUMMARY"
    grep -E -A9 '^traced blocks' "$OUT/trace-$i.txt" | tee -a "$SUMMARY"
    i=$((i + 1))
  done
fi

if [ "$STAGES" = runs ]; then
  IFS=';' read -r -a run_sets <<<"${RUNS:-}"
  for run_args in "${run_sets[@]}"; do
    read -r -a args <<<"$run_args"
    timeout "$(limit 60)" $BUILD/bin/fsdpa run --device cuda "${args[@]}" >"$OUT/run.txt" 2>&1
    say "fsdpa run ${run_args}: rc=$?"
    grep -E '^(kernel|loads|time|rate|output|error|fsdpa)' "$OUT/run.txt" | cut -c1-220 | tee -a "$SUMMARY"
  done
fi

# ------------------------------------------------------------------ tests
if [ "$STAGES" = all ] || [ "$STAGES" = tests ]; then
  run_gpu_suites 300 300 120
  (cd $BUILD && timeout $(limit 120) ctest -L gpu -R '^cli_' --output-on-failure >"$OUT/cli_gpu.log" 2>&1)
  say "cli gpu tests: rc=$? $(grep -E 'tests passed' "$OUT/cli_gpu.log")"
  run_python_gpu_tests 120  # the wrapper on CUDA torch tensors, with the machine's torch python
fi

# ------------------------------------------------------------------ bench
# `route`: only the routing benchmark, the support matrix and the default run.
if [ "$STAGES" = all ] || [ "$STAGES" = bench ] || [ "$STAGES" = route ]; then
  mkdir -p "$OUT/bench"
  export FSDPA_LIBRARY=$PWD/$BUILD/libfsdpa.so PYTHONUNBUFFERED=1
  if [ "$STAGES" != route ]; then
    t0=$(date +%s)
    timeout "$(limit ${BENCH_TIMEOUT:-240})" python3 bench/compare_torch.py --out "$OUT/bench" ${BENCH_ARGS:-} \
      >"$OUT/bench-prefill.log" 2>&1
    say "prefill bench: rc=$? $(($(date +%s) - t0)) s"
    t0=$(date +%s)
    decode_table_by_rows "${DECODE_ROWS:-$(python3 bench/decode_bench.py --row-indices)}"
    say "decode bench: $(($(date +%s) - t0)) s"
  fi
  # Decode vs prefill per Lq (the decode limit kDecodeMaxLenQ). route_bench is a
  # bench target, which the build above leaves out: configure it in, build it here.
  t0=$(date +%s)
  { cmake -S . -B $BUILD -DFSDPA_BUILD_BENCH=ON && timeout $(limit 120) ninja -C $BUILD -j16 route_bench; } \
    >"$OUT/route-build.log" 2>&1 &&
    timeout "$(limit ${ROUTE_BENCH_TIMEOUT:-120})" $BUILD/bin/route_bench --json "$OUT/bench/route.json" \
      --markdown "$OUT/bench/route.md" >"$OUT/bench-route.log" 2>&1
  say "route bench: rc=$? $(($(date +%s) - t0)) s"
  grep -E '^crossover' "$OUT/bench-route.log" 2>/dev/null | tee -a "$SUMMARY"
  $BUILD/bin/fsdpa plan --matrix >"$OUT/bench/support-matrix.md" 2>&1
  timeout $(limit 120) $BUILD/bin/fsdpa --json "$OUT/bench/fsdpa-default.json" >"$OUT/bench/fsdpa-default.txt" 2>"$OUT/fsdpa-default.err"
  say "fsdpa default run: rc=$? $(tail -1 "$OUT/bench/fsdpa-default.txt")"
fi
# ------------------------------------------------------------------ sanitizers
# Last, so that a call running out of time loses these rather than the numbers.
if [ "$STAGES" = all ] || [ "$STAGES" = tests ]; then
  t0=$(date +%s)
  small='*PrefillSemantics*L131x211_D64x64*causalBR_fused:*PrefillSemantics*D128x128*boolEmpty_fused:*PrefillAwkward*L37x1_*_fused:*PrefillAwkward*D72x72_f16*'
  timeout $(limit 90) compute-sanitizer --tool memcheck --error-exitcode 9 $BUILD/bin/gpu_test_prefill \
    --gtest_filter="$small" --gtest_brief=1 >"$OUT/sanitizer.log" 2>&1
  say "memcheck prefill: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)"
  timeout $(limit 45) compute-sanitizer --tool memcheck --error-exitcode 9 $BUILD/bin/gpu_test_unfused \
    --gtest_filter='*boolEmpty*:*L97x0*:*interleaved*' --gtest_brief=1 >>"$OUT/sanitizer.log" 2>&1
  say "memcheck unfused: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)"
  decode_small='Decode.SplitsForced:Decode.FullyMaskedRowsAndSinks:Decode.EmptyKeys:Decode.MlaRowsPerKvHead'
  timeout $(limit 90) compute-sanitizer --tool memcheck --error-exitcode 9 $BUILD/bin/gpu_test_decode \
    --gtest_filter="$decode_small" --gtest_brief=1 >>"$OUT/sanitizer.log" 2>&1
  say "memcheck decode: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)"
  timeout $(limit 60) compute-sanitizer --tool racecheck --error-exitcode 9 $BUILD/bin/gpu_test_prefill \
    --gtest_filter='*PrefillSemantics*L131x211_D64x64*causalBR_fused:*PrefillAwkward*D64x64_f32*' \
    --gtest_brief=1 >>"$OUT/sanitizer.log" 2>&1
  say "racecheck prefill: rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)"
  timeout $(limit 90) compute-sanitizer --tool racecheck --error-exitcode 9 $BUILD/bin/gpu_test_decode \
    --gtest_filter="$decode_small" --gtest_brief=1 >>"$OUT/sanitizer.log" 2>&1
  say "racecheck decode: rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1) ($(($(date +%s) - t0)) s sanitizers)"
fi

# The SASS dump stays out of the archive (it alone outgrows what the device
# tool brings back); the test log and the bench tables also come back alone.
tar czf "$FINAL_OUT/results.tgz" -C "$OUT" --exclude=sass.txt.gz .
cp "$SUMMARY" "$FINAL_OUT/summary.txt"
[ -f "$OUT/tests.log" ] && gzip -c "$OUT/tests.log" >"$FINAL_OUT/tests.log.gz"
for f in "$OUT"/bench/*.md "$OUT"/ab/*-ab.md; do [ -f "$f" ] && cp "$f" "$FINAL_OUT/"; done
true
# The coverage stage's reports also on their own: results.tgz can pass the
# tool's 16 MB a file (the SASS and sanitizer logs of a full build).
if [ "$STAGES" = coverage ] || [ "$STAGES" = ecosystem ] || [ "$STAGES" = verify ]; then
  for f in h200-prefill-large.json h200-prefill-large.md h200-prefill-large.png \
    h200-decode-unaligned.json support-matrix.md h200-overhead.json h200-overhead.md \
    h200-decode-splits.json h200-launch-cost.md; do
    [ -f "$OUT/bench/$f" ] && cp "$OUT/bench/$f" "$FINAL_OUT/"
  done
fi
echo "=================== summary"
cat "$SUMMARY"
for f in h200-prefill.md h200-prefill-large.md h200-decode.md h200-paged.md; do
  [ -f "$OUT/bench/$f" ] && grep -E '^\|' "$OUT/bench/$f" | cut -c1-200
done
exit 0
