#!/usr/bin/env bash
# bench/ab_compare.sh [--rounds N] [--threads N] [--quick] [--out DIR] BASE [NEW] — is commit NEW
# (default: the working tree) as fast as commit BASE? Builds suite table (a)'s and (b)'s programs
# (train_throughput, bench_layers) for both, then runs them in alternating rounds (A B, B A, ...)
# so that the VM's drift hits both sides alike, and prints, per row, the median over rounds of
# the per-round ratio NEW/BASE in speed (> 1: NEW is faster) with the lowest and highest ratio.
#
#   bench/ab_compare.sh --threads 2 8426d21        # about 15 minutes on 2 cores after the builds
#
# Builds: BASE in a detached worktree DIR/base-src (build DIR/base-build), NEW in DIR/new-build
# from this tree; Release, CPU only, bench on. Raw outputs stay in DIR (default out/ab).
# On a shared machine run it with raised priority, e.g.
#   setsid -w bash -c 'echo -20 > /proc/self/autogroup; exec nice -n -20 bench/ab_compare.sh BASE'
set -euo pipefail

rounds=5 threads=$(nproc) quick=0 out=out/ab
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "ab_compare.sh: unknown option '$1' (--rounds N, --threads N, --quick, --out DIR)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "ab_compare.sh: usage: ab_compare.sh [options] BASE [NEW]" >&2; exit 2; }
base=$1 new=${2:-}

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p "$out"
out=$(cd "$out" && pwd)
base_sha=$(git rev-parse --verify "$base^{commit}")

# Sources: BASE always from a worktree; NEW from a worktree too when it names a commit.
src_of() {  # $1 = side name, $2 = commit
  local dir="$out/$1-src"
  if [ -d "$dir" ]; then git -C "$dir" checkout -q --detach "$2"; else git worktree add -q --detach "$dir" "$2"; fi
  echo "$dir"
}
base_src=$(src_of base "$base_sha")
if [ -n "$new" ]; then new_src=$(src_of new "$(git rev-parse --verify "$new^{commit}")"); else new_src=$root; fi

build_side() {  # $1 = source dir, $2 = build dir
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DMIXTAPE_CUDA=OFF -DMIXTAPE_BUILD_BENCH=ON >"$2.configure.log" 2>&1 \
    || { echo "ab_compare.sh: configure of $1 failed, see $2.configure.log" >&2; exit 1; }
  cmake --build "$2" -j "${JOBS:-2}" --target train_throughput bench_layers >"$2.build.log" 2>&1 \
    || { echo "ab_compare.sh: build of $1 failed, see $2.build.log" >&2; exit 1; }
}
echo "== building BASE $base_sha and NEW ${new:-working tree}" >&2
build_side "$base_src" "$out/base-build"
build_side "$new_src" "$out/new-build"

if [ $quick = 1 ]; then
  tp=(--warmup 1 --windows 3 --steps 2); gb=(--benchmark_repetitions=1 --benchmark_min_time=0.02)
else
  tp=(--warmup 2 --windows 5 --steps 6); gb=(--benchmark_repetitions=3 --benchmark_min_time=0.2)
fi
run_side() {  # $1 = side, $2 = round
  local b="$out/$1-build/bench"
  for model in smallcnn resnet8; do
    "$b/train_throughput" --model "$model" --threads "$threads" "${tp[@]}" --json "$out/tp_${model}_$1_$2.json" >/dev/null
  done
  OMP_NUM_THREADS=$threads "$b/bench_layers" "${gb[@]}" --benchmark_format=json --benchmark_out="$out/layers_$1_$2.json" \
    --benchmark_out_format=json >/dev/null
}
rm -f "$out"/tp_*.json "$out"/layers_*.json
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="base new"; else order="new base"; fi
  for side in $order; do
    echo "== $(date -u +%H:%M:%S) round $r/$rounds: $side" >&2
    run_side "$side" "$r"
  done
done

python3 - "$out" "$rounds" "$base_sha" "${new:-working tree}" <<'EOF'
import json, statistics, sys
out, rounds, base, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {}  # row name -> per-round NEW/BASE speed ratios
def speeds(side, r):
    s = {}
    for model in ("smallcnn", "resnet8"):
        for mode, v in json.load(open(f"{out}/tp_{model}_{side}_{r}.json"))["modes"].items():
            s[f"train {model} {mode} (images/s)"] = v["images_per_s"]
    times = {}
    for b in json.load(open(f"{out}/layers_{side}_{r}.json"))["benchmarks"]:
        if b.get("run_type", "iteration") == "iteration":
            times.setdefault(b["run_name"], []).append(b["real_time"])
    for name, t in times.items():
        s[f"{name} (1/time)"] = 1.0 / statistics.median(t)
    return s
for r in range(1, rounds + 1):
    a, b = speeds("base", r), speeds("new", r)
    for k in a.keys() & b.keys():
        rows.setdefault(k, []).append(b[k] / a[k])
print(f"NEW ({new}) / BASE ({base[:10]}) speed, median of {rounds} per-round ratios [lowest, highest]\n")
print("| row | median | range |\n|---|---|---|")
for k in sorted(rows):
    v = rows[k]
    print(f"| {k} | {statistics.median(v):.3f} | {min(v):.3f}-{max(v):.3f} |")
EOF
