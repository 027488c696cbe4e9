#!/usr/bin/env bash
# bench/ddp_compare.sh — data parallelism on one machine: 2 ranks x 1 thread (mpirun, MPI over
# shared memory) against 1 rank x 2 threads, the same global batch, interleaved round by round
# (the VM's speed drifts), with the ratio per round and the medians; plus each round's bytes
# all-reduced per step and the share of the all-reduce hidden behind backward.
#
#   bench/ddp_compare.sh [--build DIR] [--rounds 5] [--model smallcnn] [--amp off] [--bucket-cap-kb K]
set -euo pipefail
build=build-bench rounds=5 model=smallcnn amp=off cap=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --amp) amp=$2; shift 2 ;;
    --bucket-cap-kb) cap=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ddp_compare.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
prog=$build/bench/ddp_step
[ -x "$prog" ] || { echo "ddp_compare.sh: $prog not built (cmake --build $build --target ddp_step)" >&2; exit 1; }
common=(--model "$model" --amp "$amp" --steps 20 --warmup 3 --json)
[ "$cap" = 0 ] || common+=(--bucket-cap-kb "$cap")
mpirun_flags=(--oversubscribe -np 2)
[ "$(id -u)" = 0 ] && mpirun_flags=(--allow-run-as-root "${mpirun_flags[@]}")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq 1 "$rounds"); do
  OMP_NUM_THREADS=2 "$prog" --threads 2 "${common[@]}" | sed "s/^/one $r /" >> "$out"
  OMP_NUM_THREADS=1 mpirun "${mpirun_flags[@]}" "$prog" --threads 1 "${common[@]}" | sed "s/^/two $r /" >> "$out"
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    kind, r, js = line.split(' ', 2)
    rows.setdefault(int(r), {})[kind] = json.loads(js)
print("round  1 rank x 2 threads  2 ranks x 1 thread  ratio  bytes/step  all-reduce ms  exposed ms  hidden")
ratios = []
for r in sorted(rows):
    one, two = rows[r]['one'], rows[r]['two']
    ratio = two['images_per_s'] / one['images_per_s']
    ratios.append(ratio)
    print(f"{r:5d}  {one['images_per_s']:12.0f} img/s  {two['images_per_s']:12.0f} img/s  {ratio:5.2f}  "
          f"{two['bytes_per_step']:10d}  {two['allreduce_ms']:13.2f}  {two['exposed_ms']:10.2f}  {100*two['hidden']:5.0f}%")
m1 = statistics.median(r['one']['images_per_s'] for r in rows.values())
m2 = statistics.median(r['two']['images_per_s'] for r in rows.values())
print(f"median  {m1:12.0f} img/s  {m2:12.0f} img/s  {statistics.median(ratios):5.2f}  (2 ranks / 1 rank, median of per-round ratios)")
PY
