#!/usr/bin/env bash
# scripts/gpu-check.sh — one command that proves mixtape's CUDA backend on a machine with an
# NVIDIA GPU and a CUDA toolkit (no network needed): configure Release for the local GPU's
# architecture only, build with all cores, run every test (gpu-labelled ones included), run the
# GPU benchmarks (bench_gpu_* — absent ones are noted, not failed), print a final table, keep
# every log under LOGDIR, exit non-zero on any failure. Budget: 8 minutes on 16 cores (each
# stage has its own timeout below).
#
#   scripts/gpu-check.sh LOGDIR                 the real run
#   scripts/gpu-check.sh LOGDIR --dry-run       no GPU needed: print the plan, then run the
#                                               result parsers and the table on sample results
#   options: --build-dir DIR (default build-gpu)   --arch NN (skip nvidia-smi, e.g. 90)
#            --jobs N (default nproc)               --skip-build (reuse the build dir)
# Environment: GPU_CHECK_COMPUTE_CAP overrides what nvidia-smi reports (e.g. "9.0");
#              GPU_CHECK_CTEST_ARGS adds ctest arguments (e.g. "-L gpu" for the GPU tests only);
#              GPU_CHECK_BUDGET_S (default 480): no stage runs past this many seconds from the start.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }

logdir=""
build_dir=build-gpu
arch=""
jobs=$(nproc 2>/dev/null || echo 4)
dry_run=0
skip_build=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --skip-build) skip_build=1 ;;
    --build-dir) build_dir=${2:?--build-dir needs a value}; shift ;;
    --arch) arch=${2:?--arch needs a value}; shift ;;
    --jobs) jobs=${2:?--jobs needs a value}; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "gpu-check: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    *) [ -z "$logdir" ] || { echo "gpu-check: one LOGDIR only (got '$logdir' and '$1')" >&2; exit 2; }
       logdir=$1 ;;
  esac
  shift
done
[ -n "$logdir" ] || { echo "gpu-check: missing LOGDIR" >&2; usage >&2; exit 2; }
mkdir -p "$logdir"
logdir=$(cd "$logdir" && pwd)
summary="$logdir/summary.txt"
t_start=$SECONDS
budget_s=${GPU_CHECK_BUDGET_S:-480}

# ---- results, filled as stages run; printed by the EXIT trap so a failure still shows them ----
declare -A stage_status stage_time
stages=()
failures=0
tests_total="-" tests_passed="-" tests_failed="-" tests_skipped="-"
bench_rows=()

record() {  # record NAME STATUS SECONDS
  stages+=("$1"); stage_status[$1]=$2; stage_time[$1]=$3
  [ "$2" = ok ] || [ "$2" = skipped ] || [ "$2" = absent ] || failures=$((failures + 1))
}

# run_stage NAME TIMEOUT_S LOGFILE CMD...: runs CMD with a timeout, output to LOGFILE.
run_stage() {
  local name=$1 limit=$2 log=$3; shift 3
  echo "=== [$name] $* (timeout ${limit}s, log $log)"
  if [ $dry_run = 1 ]; then record "$name" ok 0; return 0; fi
  # The whole check must end within the 8-minute budget: no stage may run past it.
  local left=$((budget_s - (SECONDS - t_start) - 15))
  if [ "$left" -lt "$limit" ]; then limit=$left; fi
  if [ "$limit" -le 0 ]; then record "$name" "NO TIME" 0; return 1; fi
  local t0=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1 || rc=$?
  local dt=$((SECONDS - t0))
  if [ $rc -eq 0 ]; then
    record "$name" ok "$dt"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    record "$name" "TIMEOUT" "$dt"; tail -n 30 "$log" >&2
  else
    record "$name" "FAILED($rc)" "$dt"; tail -n 30 "$log" >&2
  fi
  return $rc
}

# Counts from a ctest JUnit file (ctest --output-junit): tests, failures, skipped.
parse_junit() {
  local f=$1 head
  head=$(tr '\n\t' '  ' <"$f" | grep -o '<testsuite [^>]*>' | head -n 1)
  attr() { echo "$head" | grep -o " $1=\"[0-9]*\"" | grep -o '[0-9]*' || echo 0; }
  tests_total=$(attr tests)
  tests_failed=$(attr failures)
  tests_skipped=$(( $(attr skipped) + $(attr disabled) ))
  tests_passed=$((tests_total - tests_failed - tests_skipped))
}

# One table row per benchmark entry of a Google Benchmark JSON file (name, time, counters).
parse_bench_json() {
  local f=$1
  if command -v python3 >/dev/null 2>&1; then
    while IFS= read -r row; do bench_rows+=("$row"); done < <(python3 - "$f" <<'PY'
import json, sys
try:
    data = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print(f"{sys.argv[1]}: no results (the program skipped, see its log)")
    sys.exit(0)
skip = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads", "iterations",
        "real_time", "cpu_time", "time_unit", "family_index", "per_family_instance_index",
        "aggregate_name", "aggregate_unit", "label", "error_occurred", "error_message"}
if not data.get("benchmarks"):
    print(f"{sys.argv[1]}: no results (the program skipped, see its log)")
for b in data.get("benchmarks", []):
    if b.get("error_occurred"):
        print(f"{b['name']:<48} ERROR {b.get('error_message', '')}")
        continue
    counters = []
    for k, v in b.items():
        if k in skip or not isinstance(v, (int, float)):
            continue
        counters.append(f"{k}={v:.4g}")
    print(f"{b['name']:<48} {b['real_time']:>10.3f} {b['time_unit']:<2} {' '.join(counters)}")
PY
)
  else
    bench_rows+=("$(basename "$f"): python3 missing, see the JSON file")
  fi
}

print_table() {
  {
    echo
    echo "==================== mixtape gpu-check ===================="
    echo "GPU:        ${gpu_name:-unknown} (compute capability ${compute_cap:-?}, arch ${arch:-?})"
    echo "Build dir:  $build_dir    Logs: $logdir"
    echo "Wall time:  $((SECONDS - t_start)) s (budget $budget_s s)"
    echo
    printf '%-22s %-12s %8s\n' "stage" "status" "seconds"
    for s in "${stages[@]}"; do printf '%-22s %-12s %8s\n' "$s" "${stage_status[$s]}" "${stage_time[$s]}"; done
    echo
    printf 'tests: %s total, %s passed, %s failed, %s skipped\n' \
      "$tests_total" "$tests_passed" "$tests_failed" "$tests_skipped"
    echo
    if [ ${#bench_rows[@]} -gt 0 ]; then
      echo "benchmarks (name, real time, counters — step times, images/s, TFLOP/s, peak bytes):"
      printf '  %s\n' "${bench_rows[@]}"
    else
      echo "benchmarks: none ran"
    fi
    echo
    if [ "$failures" -eq 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($failures stage(s))"; fi
  } | tee "$summary"
}
trap 'rc=$?; print_table; if [ $rc -eq 0 ] && [ $failures -gt 0 ]; then rc=1; fi; exit $rc' EXIT

# ---- 1. the GPU and its architecture ----
gpu_name=""
compute_cap=${GPU_CHECK_COMPUTE_CAP:-}
if [ -z "$arch" ]; then
  if [ -z "$compute_cap" ]; then
    if [ $dry_run = 1 ]; then
      compute_cap=9.0
    elif command -v nvidia-smi >/dev/null 2>&1; then
      compute_cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' ')
      gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
      nvidia-smi >"$logdir/nvidia-smi.txt" 2>&1 || true
    else
      echo "gpu-check: nvidia-smi not found: is this a machine with an NVIDIA GPU and driver?" >&2
      record gpu "FAILED" 0
      exit 1
    fi
  fi
  # "9.0" -> 90, "12.0" -> 120
  if [[ ! "$compute_cap" =~ ^[0-9]+\.[0-9]+$ ]]; then
    echo "gpu-check: cannot read the compute capability from '$compute_cap'" >&2
    record gpu "FAILED" 0
    exit 1
  fi
  arch=${compute_cap/./}
fi
[[ "$arch" =~ ^[0-9]+$ ]] || { echo "gpu-check: --arch must be digits, e.g. 90 (got '$arch')" >&2; exit 2; }
record gpu ok 0

# ---- 2. configure and build for this arch only ----
if [ $skip_build = 0 ]; then
  run_stage configure 120 "$logdir/configure.log" \
    cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DMIXTAPE_CUDA=ON \
      "-DCMAKE_CUDA_ARCHITECTURES=$arch" -DMIXTAPE_BUILD_BENCH=ON -DMIXTAPE_BUILD_TESTS=ON || exit 1
  run_stage build 300 "$logdir/build.log" cmake --build "$build_dir" -j "$jobs" || exit 1
else
  record configure skipped 0
  record build skipped 0
fi

# ---- 3. every test, GPU ones included ----
junit="$logdir/ctest-junit.xml"
# shellcheck disable=SC2086  # GPU_CHECK_CTEST_ARGS is a list of arguments on purpose
run_stage tests 240 "$logdir/ctest.log" \
  ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" --timeout 120 --no-tests=error \
    --output-junit "$junit" ${GPU_CHECK_CTEST_ARGS:-} || true  # counted below; a failed stage is already recorded
if [ $dry_run = 1 ]; then
  # Exercise the parser on a sample JUnit header (what ctest 3.25 writes).
  printf '<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="(empty)"\n\ttests="12"\n\tfailures="1"\n\tdisabled="0"\n\tskipped="3"\n\thostname=""\n\t>\n' >"$junit"
fi
if [ -f "$junit" ]; then
  parse_junit "$junit"
  if [ $dry_run = 0 ] && [ "$tests_skipped" != "-" ] && [ "$tests_skipped" -gt 0 ]; then
    # On a GPU machine nothing should skip for want of a GPU: list what did.
    grep -B1 -i 'skipped' "$logdir/ctest.log" | grep -o 'Test *#[0-9]*: [^ ]*' >"$logdir/skipped.txt" || true
  fi
fi

# ---- 4. GPU benchmarks (bench_gpu_*) ----
bench_dir="$build_dir/bench"
if [ $dry_run = 1 ]; then
  cat >"$logdir/bench_sample.json" <<'JSON'
{"benchmarks": [
 {"name": "gemm_f16/4096", "real_time": 0.25, "cpu_time": 0.25, "time_unit": "ms", "TFLOPS": 549.7},
 {"name": "resnet20_step/amp_fp16", "real_time": 12.5, "cpu_time": 12.4, "time_unit": "ms",
  "images_per_s": 10240, "peak_bytes": 1.2e9}
]}
JSON
  parse_bench_json "$logdir/bench_sample.json"
  # The dry run checks its own parsers: the sample must read back as written.
  if [ "$tests_total/$tests_passed/$tests_failed/$tests_skipped" = "12/8/1/3" ] && [ ${#bench_rows[@]} -eq 2 ] &&
     [[ "${bench_rows[1]}" == *"images_per_s=1.024e+04"* ]]; then
    record "parsers (sample)" ok 0
  else
    echo "gpu-check: the dry run's sample results were misread" >&2
    record "parsers (sample)" FAILED 0
  fi
else
  mapfile -t benches < <(find "$bench_dir" -maxdepth 1 -type f -name 'bench_gpu_*' -perm -u+x 2>/dev/null | sort)
  if [ ${#benches[@]} -eq 0 ]; then
    echo "gpu-check: no bench_gpu_* programs in $bench_dir (not written yet): no benchmark figures"
    record benchmarks absent 0
  else
    for b in "${benches[@]}"; do
      name=$(basename "$b")
      if run_stage "$name" 120 "$logdir/$name.log" "$b" --benchmark_out="$logdir/$name.json" \
           --benchmark_out_format=json; then
        parse_bench_json "$logdir/$name.json"
      fi
    done
  fi
fi

# ---- 5. PyTorch eager on the same GPU, when it is installed (side by side with the above) ----
torch_script=bench/gpu_torch_step.py
if [ $dry_run = 0 ] && python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
  if [ -f "$torch_script" ]; then
    if run_stage pytorch 120 "$logdir/pytorch.log" python3 "$torch_script"; then
      while IFS= read -r line; do bench_rows+=("torch: $line"); done <"$logdir/pytorch.log"
    fi
  else
    echo "gpu-check: PyTorch with CUDA is here but $torch_script is not written yet"
    record pytorch absent 0
  fi
else
  record pytorch skipped 0
fi

if [ "$tests_failed" != "-" ] && [ "$tests_failed" -gt 0 ] && [ $dry_run = 0 ]; then
  failures=$((failures + 1))
fi
[ "$failures" -eq 0 ]
