#!/usr/bin/env bash
# bench/suite.sh [--quick] [--threads N] [--out DIR] [--rounds N] — the whole performance comparison of
# issue 6 in one command: builds what it needs (Release, CPU only, in its own build directory),
# runs mixtape and PyTorch 1.13 on the same workloads with the same thread count, and prints one
# set of markdown tables with the machine's details, also written to DIR/summary.md.
#
#   bench/suite.sh --quick                 # a few minutes on 2 cores: proves it works, numbers rough
#   bench/suite.sh --threads 2             # the full run, about 4 minutes on 2 cores
#
# Tables: (a) SmallCNN / ResNet-8 training images/s at batch 128, fp32 / AMP fp16 / AMP bf16
# (train_throughput vs torch_suite.py throughput); (b) SmallCNN's layers forward and backward
# (bench_layers vs torch_suite.py layers); (c) per-op overhead on 1-element tensors
# (bench_op_overhead vs libtorch's bench_torch_op_overhead when libtorch-dev is there, and PyTorch
# from Python); (d) GFLOP/s as a fraction of the measured FMA peak and, for BF16 on mixtape's
# native kernel, of the measured vdpbf16ps peak (fma_peak); (e) peak memory of a training step by
# dtype (amp_step). Where the CPU has AVX512_BF16, each round of (a) also runs mixtape's bf16 with
# MIXTAPE_CPU_BF16=emulated (every GEMM widened to FP32: what other CPUs get). bench/README.md says what every column means.
#
# Environment: BUILD_DIR (default build-bench), JOBS (build parallelism, default 2), PYTHON
# (default /usr/bin/python3, Debian's, which has python3-torch). The raw outputs (JSON, logs)
# stay in DIR beside summary.md. Without torch the PyTorch columns say why they are empty.
set -euo pipefail

quick=0 threads=$(nproc) out=out/bench-suite rounds=
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --threads) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "suite.sh: unknown option '$1' (--quick, --threads N, --out DIR, --rounds N)" >&2; exit 2 ;;
  esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-bench}
python=${PYTHON:-/usr/bin/python3}
jobs=${JOBS:-2}
mkdir -p "$out"
out=$(cd "$out" && pwd)
(cd "$out" && rm -f meta.txt run.log failures.txt fma.json fma.txt tp_*.json layers_*.json layers_*.txt op_*.json op_*.txt amp_step_*.txt summary.md)

# Sizes. quick: just enough to exercise every path; full: enough windows for a median and spread.
# rounds: table (a) runs mixtape and torch back to back this many times (a shared VM's speed drifts
# by tens of percent between minutes; the report takes medians over rounds and per-round ratios).
if [ $quick = 1 ]; then
  rounds=${rounds:-1}
  tp=(--warmup 1 --windows 3 --steps 2); gb=(--benchmark_repetitions=3 --benchmark_min_time=0.02)
  py_reps=(--reps 3 --seconds 0.02); amp_steps=2; fma=(--runs 3 --seconds 0.05)
else
  rounds=${rounds:-5}
  tp=(--warmup 3 --windows 5 --steps 8); gb=(--benchmark_repetitions=5 --benchmark_min_time=0.2)
  py_reps=(--reps 5 --seconds 0.2); amp_steps=5; fma=(--runs 7 --seconds 0.2)
fi

log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$out/run.log" >&2; }  # the times show where a run spends its minutes
meta() { echo "$1=$2" >>"$out/meta.txt"; }  # key=value facts the report prints
: >"$out/meta.txt"
meta threads "$threads"; meta quick "$quick"; meta build_dir "$build"
meta commit "$(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- 2>/dev/null || echo '+dirty')"
meta openblas_coretype "${OPENBLAS_CORETYPE:-}"
meta started "$(date -u +%Y-%m-%dT%H:%M:%SZ)"; meta load_start "$(cut -d' ' -f1-3 /proc/loadavg)"

# --- PyTorch: python module, and libtorch's CMake package for the C++ overhead benchmark ------
have_torch=0
if "$python" -c 'import torch' 2>/dev/null; then
  have_torch=1; meta torch "$("$python" -c 'import torch; print(torch.__version__)')"
else
  meta torch_missing "$python cannot import torch (apt-get install python3-torch)"
fi
bench_torch=OFF
if [ -f /usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake ] || [ -f /usr/share/cmake/Torch/TorchConfig.cmake ] \
   || ls /usr/lib/*/cmake/Torch/TorchConfig.cmake >/dev/null 2>&1; then
  bench_torch=ON
fi

# --- build -----------------------------------------------------------------------------------
log "configure + build in $build (Release, CPU only, -j$jobs); log: $out/build.log"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMIXTAPE_CUDA=OFF -DMIXTAPE_BUILD_TESTS=OFF \
  -DMIXTAPE_BUILD_EXAMPLES=OFF -DMIXTAPE_BUILD_BENCH=ON -DMIXTAPE_BENCH_TORCH=$bench_torch >"$out/build.log" 2>&1 \
  || { tail -30 "$out/build.log" >&2; exit 1; }
meta compiler "$(grep '^CMAKE_CXX_COMPILER:' "$build/CMakeCache.txt" | cut -d= -f2)"
cmake --build "$build" -j "$jobs" --target train_throughput fma_peak bench_layers bench_op_overhead amp_step \
  >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log" >&2; exit 1; }
# libtorch's twin is optional: a failure here only switches table (c) to the Python fallback.
torch_cxx=""
# (grep reads the whole listing: with pipefail, grep -q's early exit would fail the pipe.)
if [ $bench_torch = ON ] && cmake --build "$build" --target help 2>/dev/null | grep -c bench_torch_op_overhead >/dev/null; then
  if cmake --build "$build" -j "$jobs" --target bench_torch_op_overhead >>"$out/build.log" 2>&1; then
    torch_cxx="$build/bench/bench_torch_op_overhead"
  else
    meta torch_cxx_missing "bench_torch_op_overhead failed to build (see build.log)"
  fi
else
  meta torch_cxx_missing "no Torch CMake package (libtorch-dev) found by find_package(Torch)"
fi
b="$build/bench"

# --- run -------------------------------------------------------------------------------------
# One thread count for every pool: OpenMP (mixtape's kernels, torch's intra-op), OpenBLAS.
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
# step NAME CMD...: runs one measurement, its output shown and appended to run.log. A failure is
# written to failures.txt and the suite goes on: the report marks what is missing and why.
step() {
  local name=$1; shift
  log "$name"
  if ! "$@" 2>&1 | tee -a "$out/run.log" >&2; then
    echo "suite.sh: step '$name' failed (see $out/run.log)" >&2
    echo "$name" >>"$out/failures.txt"
  fi
}
to_file() { local f=$1; shift; "$@" >"$f"; }  # stdout to a file the report parses
torch_run() { "$python" bench/torch_suite.py "$@" --threads "$threads"; }

native_bf16=0
grep -qw avx512_bf16 /proc/cpuinfo && native_bf16=1
step "(d) FMA peak" "$b/fma_peak" --threads "$threads" "${fma[@]}" --json "$out/fma.json"
for model in smallcnn resnet8; do
  for r in $(seq 1 "$rounds"); do
    step "(a) $model throughput: mixtape (round $r/$rounds)" "$b/train_throughput" --model "$model" \
      --threads "$threads" "${tp[@]}" --json "$out/tp_mixtape_${model}_r$r.json"
    [ $have_torch = 0 ] || step "(a) $model throughput: torch (round $r/$rounds)" torch_run throughput \
      --model "$model" "${tp[@]}" --json "$out/tp_torch_${model}_r$r.json"
    # What a CPU without AVX512_BF16 gets: the bf16 run with every GEMM widened to FP32.
    [ $native_bf16 = 0 ] || step "(a) $model throughput: mixtape bf16 emulated (round $r/$rounds)" \
      env MIXTAPE_CPU_BF16=emulated "$b/train_throughput" --model "$model" --threads "$threads" "${tp[@]}" \
      --modes bf16 --json "$out/tp_mixtape-emulated_${model}_r$r.json"
  done
done
step "(b) layers: mixtape" to_file "$out/layers_mixtape.txt" "$b/bench_layers" "${gb[@]}" \
  --benchmark_out="$out/layers_mixtape.json" --benchmark_out_format=json
[ $have_torch = 0 ] || step "(b) layers: torch" torch_run layers "${py_reps[@]}" --json "$out/layers_torch.json"
# The 1-element ops run on one thread whatever OMP_NUM_THREADS says; BM_add_1M is left out.
op_filter='BM_empty_1|BM_add_1_|BM_mul_1_|BM_relu_1_'
step "(c) op overhead: mixtape" to_file "$out/op_mixtape.txt" "$b/bench_op_overhead" --benchmark_filter="$op_filter" \
  "${gb[@]}" --benchmark_out="$out/op_mixtape.json" --benchmark_out_format=json
[ -z "$torch_cxx" ] || step "(c) op overhead: libtorch C++" to_file "$out/op_torch_cxx.txt" "$torch_cxx" \
  --benchmark_filter="$op_filter" "${gb[@]}" --benchmark_out="$out/op_torch_cxx.json" --benchmark_out_format=json
[ $have_torch = 0 ] || step "(c) op overhead: torch from Python" torch_run op-overhead "${py_reps[@]}" \
  --json "$out/op_torch_python.json"
step "(e) peak memory: amp_step" to_file "$out/amp_step_smallcnn.txt" "$b/amp_step" --model smallcnn --batch 256 \
  --steps $amp_steps --threads "$threads"
meta finished "$(date -u +%Y-%m-%dT%H:%M:%SZ)"; meta load_end "$(cut -d' ' -f1-3 /proc/loadavg)"

"$python" bench/suite_report.py "$out"
