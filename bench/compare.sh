#!/usr/bin/env bash
# bench/compare.sh [--epochs N] [--limit N] [--threads N] — trains SmallCNN on Fashion-MNIST
# with mixtape (examples/train_fashion_mnist, Release) and with PyTorch 1.13
# (bench/torch_fashion_mnist.py: same model, recipe, data order and thread count), one after
# the other, and prints their images/s, test accuracy and loss, time and peak memory side by
# side, with the machine they ran on.
#
#   bench/compare.sh --epochs 1 --limit 6000 --threads 2
#
# Defaults: the full recipe (3 epochs, all 60000 images) on every core. Outputs (logs,
# summaries) go to out/compare/. BUILD_DIR (default build) is the Release build to use; it is
# configured and the example built there if needed. PYTHON (default /usr/bin/python3, Debian's,
# which has python3-torch) runs the twin.
set -euo pipefail

epochs=3 limit=0 threads=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    --epochs) epochs=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown option '$1' (--epochs N, --limit N, --threads N)" >&2; exit 2 ;;
  esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build}
python=${PYTHON:-/usr/bin/python3}
out=out/compare
mkdir -p "$out"

"$python" -c 'import torch' 2>/dev/null || { echo "compare.sh: $python has no torch (apt-get install python3-torch)" >&2; exit 1; }
build_log="$out/build.log"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >"$build_log" 2>&1 || { cat "$build_log" >&2; exit 1; }
fi
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target train_fashion_mnist >"$build_log" 2>&1 || { cat "$build_log" >&2; exit 1; }
exe="$build/examples/train_fashion_mnist"

common=(--epochs "$epochs" --limit "$limit" --threads "$threads")
echo "== mixtape: $exe ${common[*]}"
/usr/bin/time -f '%M' -o "$out/mixtape.rss_kb" "$exe" "${common[@]}" \
  --metrics "$out/mixtape_metrics.csv" --summary-json "$out/mixtape.json" 2>&1 | tee "$out/mixtape.log" | grep '^epoch\|^test'
echo "== torch: $python bench/torch_fashion_mnist.py ${common[*]}"
/usr/bin/time -f '%M' -o "$out/torch.rss_kb" "$python" bench/torch_fashion_mnist.py "${common[@]}" \
  --summary-json "$out/torch.json" 2>&1 | tee "$out/torch.log" | grep '^epoch\|^test'

"$python" - "$out" "$threads" <<'PY'
import json, os, sys
out, threads = sys.argv[1], sys.argv[2]
def load(name):
    with open(os.path.join(out, name + ".json")) as f:
        s = json.load(f)
    with open(os.path.join(out, name + ".rss_kb")) as f:
        s["_rss"] = int(f.read().split()[-1]) * 1024
    return s
m, t = load("mixtape"), load("torch")
def get(s, *keys):  # the summary keys, under either spelling
    for k in keys:
        if k in s:
            return s[k]
    return float("nan")
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"\nmachine: {cpu}, {os.cpu_count()} cores; {threads} threads each; "
      f"{get(m, 'train_images')} train images, {get(m, 'epochs')} epoch(s)")
mib = lambda b: f"{b / 2**20:.1f} MiB"
rows = [
    ("train images/s", lambda s: f"{get(s, 'train_images_per_s', 'train_images_per_sec'):.0f}"),
    ("test accuracy", lambda s: f"{100 * get(s, 'test_accuracy'):.2f}%"),
    ("test loss", lambda s: f"{get(s, 'test_loss'):.4f}"),
    ("seconds (wall)", lambda s: f"{get(s, 'wall_seconds', 'seconds'):.1f}"),
    ("peak RSS (/usr/bin/time)", lambda s: mib(s["_rss"])),
]
print(f"{'':26} {'mixtape':>14} {'torch ' + t.get('framework', '').split()[-1]:>14}")
for name, fmt in rows:
    print(f"{name:26} {fmt(m):>14} {fmt(t):>14}")
print(f"{'peak tensor bytes':26} {mib(get(m, 'peak_bytes')):>14} {'n/a':>14}   (mixtape's allocator; torch keeps no CPU count)")
ratio = get(m, 'train_images_per_s', 'train_images_per_sec') / get(t, 'train_images_per_s', 'train_images_per_sec')
print(f"mixtape / torch throughput: {ratio:.2f}x")
PY
