#!/usr/bin/env bash
# bench/bf16_compare.sh [--build DIR] [--rounds 4] [--threads 2] [--model smallcnn|resnet8]
# One model's training throughput, interleaved in each round: mixtape FP32 + BF16 (default
# kernels), mixtape BF16 with the convs on im2col (MIXTAPE_CPU_CONV=im2col), and PyTorch FP32 +
# BF16 (bench/torch_suite.py, the same protocol); synthetic batches of 128. Prints each round and
# the medians of the per-round ratios, since this VM's speed drifts up to 1.5x within minutes.
# The quick version of bench/suite.sh's table (a), for A/B work on the BF16 kernels.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build rounds=4 threads=2 model=smallcnn
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    *) echo "usage: bench/bf16_compare.sh [--build DIR] [--rounds N] [--threads N] [--model smallcnn|resnet8]" >&2; exit 2 ;;
  esac
done
tp=$build/bench/train_throughput
[ -x "$tp" ] || { echo "bf16_compare: $tp not built (cmake --build $build --target train_throughput)" >&2; exit 2; }
py=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
args=(--model "$model" --threads "$threads" --windows 3 --synthetic)
"$tp" "${args[@]}" --modes bf16 2>&1 | grep '^BLAS' || true
for r in $(seq 1 "$rounds"); do
  "$tp" "${args[@]}" --modes fp32,bf16 --json "$tmp/m$r.json" > /dev/null
  MIXTAPE_CPU_CONV=im2col "$tp" "${args[@]}" --modes bf16 --json "$tmp/i$r.json" > /dev/null
  if "$py" -c 'import torch' 2> /dev/null; then
    "$py" bench/torch_suite.py throughput "${args[@]}" --modes fp32,bf16 --json "$tmp/t$r.json" > /dev/null
  fi
done
python3 - "$tmp" "$rounds" <<'PY'
import json, os, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
def rate(f, mode):
    p = os.path.join(tmp, f)
    return json.load(open(p))["modes"][mode]["images_per_s"] if os.path.exists(p) else None
ratios = {}
for r in range(1, rounds + 1):
    m32, m16, i16 = rate(f"m{r}.json", "fp32"), rate(f"m{r}.json", "bf16"), rate(f"i{r}.json", "bf16")
    t32, t16 = rate(f"t{r}.json", "fp32"), rate(f"t{r}.json", "bf16")
    cells = [f"mixtape fp32 {m32:.0f} bf16 {m16:.0f}", f"bf16 im2col {i16:.0f}"]
    if t32: cells.append(f"torch fp32 {t32:.0f} bf16 {t16:.0f}")
    print(f"round {r}: " + " | ".join(cells))
    for k, v in {"mixtape bf16 / mixtape fp32": m16 / m32, "implicit conv / im2col (bf16)": m16 / i16,
                 **({"mixtape bf16 / torch bf16": m16 / t16, "mixtape fp32 / torch fp32": m32 / t32} if t32 else {})}.items():
        ratios.setdefault(k, []).append(v)
for k, v in ratios.items():
    print(f"{k}: {statistics.median(v):.2f}x (rounds {min(v):.2f}..{max(v):.2f})")
PY
