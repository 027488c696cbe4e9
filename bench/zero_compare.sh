#!/usr/bin/env bash
# bench/zero_compare.sh — the main job on 2 ranks with --shard-optimizer (ZeRO-1) against plain
# DDP (the unsharded optimizer), interleaved round by round (the VM's speed drifts): each round's
# median step time of both (from the metrics CSV, the first 3 steps left out), their ratio, and
# the median of the per-round ratios; plus each run's optimizer state bytes per rank.
#
#   bench/zero_compare.sh [--build DIR] [--rounds 5] [--model smallcnn] [--optimizer adam] [-- more options]
set -euo pipefail
build=build rounds=5 model=smallcnn optimizer=adam extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --optimizer) optimizer=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "zero_compare.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
prog=$build/examples/train_fashion_mnist
[ -x "$prog" ] || { echo "zero_compare.sh: $prog not built (cmake --build $build --target train_fashion_mnist)" >&2; exit 1; }
mpirun_flags=(--oversubscribe -np 2)
[ "$(id -u)" = 0 ] && mpirun_flags=(--allow-run-as-root "${mpirun_flags[@]}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--model "$model" --optimizer "$optimizer" --lr 0.001 --epochs 1 --limit 5120 --limit-test 500
        --batch-size 128 --threads 1 --log-every 100000 "${extra[@]}")
for r in $(seq 1 "$rounds"); do
  for kind in ddp zero; do
    flag=(); [ $kind = zero ] && flag=(--shard-optimizer)
    OMP_NUM_THREADS=1 mpirun "${mpirun_flags[@]}" "$prog" "${common[@]}" "${flag[@]}" \
      --metrics "$work/$kind$r.csv" --summary-json "$work/$kind$r.json" > /dev/null
  done
done
python3 - "$work" "$rounds" <<'PY'
import csv, json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def step_ms(path):  # images_per_s is the global batch over the step's wall time
    rows = list(csv.DictReader(open(path)))[3:]
    return statistics.median(128 / float(r["images_per_s"]) * 1e3 for r in rows)
print("round  DDP step ms  ZeRO-1 step ms  ratio")
ratios, d_all, z_all = [], [], []
for r in range(1, rounds + 1):
    d, z = step_ms(f"{work}/ddp{r}.csv"), step_ms(f"{work}/zero{r}.csv")
    ratios.append(z / d); d_all.append(d); z_all.append(z)
    print(f"{r:5d}  {d:11.1f}  {z:14.1f}  {z / d:5.2f}")
print(f"median {statistics.median(d_all):11.1f}  {statistics.median(z_all):14.1f}  {statistics.median(ratios):5.2f} "
      "(median of the per-round ratios)")
for kind in ("ddp", "zero"):
    s = json.load(open(f"{work}/{kind}1.json"))
    print(f"{kind}: optimizer_state_bytes_per_rank {s['optimizer_state_bytes_per_rank']} "
          f"({s['optimizer_state_bytes_per_rank'] / s['parameters']:.2f} B/parameter)")
PY
