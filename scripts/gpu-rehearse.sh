#!/usr/bin/env bash
# scripts/gpu-rehearse.sh — rehearse scripts/gpu-check.sh on a bare GPU machine, here, without a GPU.
# The lent GPU machine has a CUDA toolkit, a compiler, CMake and Python but none of our Debian
# packages; the bundle (scripts/gpu-bundle.sh) must make up for them. This script proves it does:
# it mounts an overlay of / (in a private mount namespace, so nothing outside changes) in which
# every file of those packages is whited out, cuDNN is moved out of the toolkit into the layout of
# NVIDIA's pip wheel (site-packages/nvidia/cudnn/, found through PYTHONPATH like a wheel), checks
# that each is really gone, copies the working tree and the bundle in, and runs gpu-check.sh there
# in a chroot: dependencies, configure, a real nvcc build of every .cu file for sm_90, the GPU
# stages (which find no GPU), the CPU tests. It passes when every dependency came from the bundle
# or the wheel, the build and the CPU tests passed, and the verdict is FAIL for want of a GPU only.
# Not a CI stage (20-30 minutes on 2 cores); needs root (mount, chroot). docs/CUDA.md says more.
#
#   scripts/gpu-rehearse.sh WORKDIR [--jobs N] [--check-only]
#     --check-only   set up and check the bare root, run gpu-check's --dry-run in it, stop (a minute)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
work="" jobs=$(nproc) check_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) jobs=${2:?--jobs needs a value}; shift ;;
    --check-only) check_only=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "gpu-rehearse: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    *) work=$1 ;;
  esac
  shift
done
[ -n "$work" ] || { usage >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "gpu-rehearse: needs root (an overlay mount and a chroot)" >&2; exit 1; }
[ -f gpu-bundle/prefix.tar.xz ] || scripts/gpu-bundle.sh gpu-bundle

mkdir -p "$work"
work=$(cd "$work" && pwd)
case "$work" in "$repo"|"$repo"/*) echo "gpu-rehearse: WORKDIR must be outside the repository" >&2; exit 2 ;; esac
upper=$work/upper
rm -rf "$upper" "$work/ovl-work" "$work/root"
mkdir -p "$upper" "$work/ovl-work" "$work/root"
arch=$(gcc -dumpmachine)

# ---- what the GPU machine lacks: every file of these packages (the bundle's, and this machine's
# other OpenBLAS builds and googletest's sources), the alternatives links into them, the data ----
hidden_packages=(libgtest-dev libgmock-dev googletest libbenchmark-dev libbenchmark1debian libstb-dev libstb0
  nlohmann-json3-dev libcli11-dev libopenblas-dev libopenblas0 libopenblas-openmp-dev libopenblas0-openmp
  libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0 zlib1g-dev dataset-fashion-mnist)
whiteout() {  # whiteout PATH: PATH disappears from the overlay (a 0/0 character device in the upper layer)
  local p=$1
  mkdir -p "$upper$(dirname "$p")"
  [ -e "$upper$p" ] || mknod "$upper$p" c 0 0
}
# Whiteouts go on real folders only: one on a path through a symlinked folder (usrmerge's /lib ->
# usr/lib, the toolkit's lib64 -> lib) would make the upper layer's copy of that folder a real,
# empty one, hiding all of it.
hide() {  # hide PATH: PATH itself (a file or a link) in its folder's real location
  whiteout "$(readlink -f "$(dirname "$1")")/$(basename "$1")"
}
n=0
for pkg in "${hidden_packages[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" = "install ok installed" ] || continue
  while IFS= read -r f; do
    if [ -L "$f" ] || [ -f "$f" ]; then hide "$f"; n=$((n + 1)); fi
  done < <(dpkg -L "$pkg")
done
while IFS= read -r f; do hide "$f"; n=$((n + 1)); done < <(
  find /usr/include /usr/lib /etc/alternatives -maxdepth 3 -lname '/etc/alternatives/*' 2>/dev/null | grep -E 'blas|lapack'
  find /etc/alternatives -maxdepth 1 | grep -E 'blas|lapack')

# cuDNN leaves the toolkit for a wheel layout (hard links: no copy of its 1 GB).
cuda=$(readlink -f /usr/local/cuda)
wheel=$upper/rehearsal/site/nvidia/cudnn
mkdir -p "$wheel/include" "$wheel/lib"
link_into() {  # link_into FILE DIR: FILE's content as DIR/basename (a hard link, else a copy)
  local to=$2/$(basename "$1")
  [ -e "$to" ] || ln "$(readlink -f "$1")" "$to" 2>/dev/null || cp "$(readlink -f "$1")" "$to"
}
for h in "$cuda"/include/cudnn*.h; do
  link_into "$h" "$wheel/include"
  hide "$h"
done
# The wheel ships only the versioned names (libcudnn.so.9, libcudnn_ops.so.9, ...).
for d in $(for l in "$cuda"/lib*; do readlink -f "$l"; done | sort -u); do
  for l in "$d"/libcudnn*; do
    [ -e "$l" ] || continue
    case "$l" in *.so.9) link_into "$l" "$wheel/lib" ;; esac
    hide "$l"
  done
done
touch "$upper/rehearsal/site/nvidia/__init__.py" "$wheel/__init__.py"
echo "gpu-rehearse: $n files of ${#hidden_packages[@]} packages and cuDNN hidden; cuDNN as a wheel at /rehearsal/site"

# ---- the working tree (what the device tool sends: tracked and untracked-not-ignored files) and the bundle ----
mkdir -p "$upper/rehearsal/src"
git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -C "$upper/rehearsal/src" -xf -
cp -r gpu-bundle "$upper/rehearsal/src/gpu-bundle"

# ---- inside: check the root is bare, then run gpu-check ----
cat >"$upper/rehearsal/inside.sh" <<'INSIDE'
#!/usr/bin/env bash
set -uo pipefail
arch=$1 jobs=$2 check_only=$3
bad=0
for f in /usr/include/gtest/gtest.h /usr/include/benchmark/benchmark.h /usr/include/nlohmann/json.hpp \
         /usr/include/CLI/CLI.hpp /usr/include/stb/stb_image.h /usr/include/zlib.h "/usr/include/$arch/cblas.h" \
         "/usr/lib/$arch/libopenblas.so.0" "/usr/lib/$arch/libgfortran.so.5" \
         /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz /usr/src/googletest/CMakeLists.txt \
         /usr/local/cuda/include/cudnn.h /usr/local/cuda/lib64/libcudnn.so.9; do
  if [ -e "$f" ]; then echo "rehearsal: $f is still there: the root is not bare" >&2; bad=1; fi
done
[ $bad = 0 ] || exit 3
echo "rehearsal: the root is bare (none of the checked files is there)"
cd /rehearsal/src
export PYTHONPATH=/rehearsal/site CUDA_VISIBLE_DEVICES=
if [ "$check_only" = 1 ]; then
  scripts/gpu-check.sh /rehearsal/logs --dry-run --jobs "$jobs"
  exit $?
fi
GPU_CHECK_BUDGET_S=5400 GPU_CHECK_BUILD_S=3600 GPU_CHECK_CPU_TESTS_S=1500 \
  scripts/gpu-check.sh /rehearsal/logs --arch 90 --jobs "$jobs"
INSIDE
chmod +x "$upper/rehearsal/inside.sh"

root=$work/root
set +e
unshare -m --propagation private bash -c '
  set -e
  mount -t overlay overlay -o "lowerdir=/,upperdir=$1,workdir=$2" "$3"
  for m in proc sys dev dev/pts dev/shm; do mount --rbind "/$m" "$3/$m"; done
  mount -t tmpfs tmpfs "$3/tmp"
  chroot "$3" /usr/bin/env -i PATH=/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
    /rehearsal/inside.sh "$4" "$5" "$6"
' rehearse "$upper" "$work/ovl-work" "$root" "$arch" "$jobs" "$check_only" 2>&1 | tee "$work/rehearsal.log"
rc=${PIPESTATUS[0]}
set -e
logs=$upper/rehearsal/logs
[ $rc -ne 3 ] || { echo "REHEARSAL: FAIL (the root was not bare)"; exit 1; }

# ---- judge: dependencies from the bundle/wheel, build and CPU tests ok, FAIL only for the GPU ----
summary=$logs/summary.txt
fail() { echo "REHEARSAL: FAIL ($*; logs: $logs)"; exit 1; }
[ -f "$summary" ] || fail "gpu-check wrote no summary"
for dep in GoogleTest "Google Benchmark" nlohmann-json CLI11 stb zlib OpenBLAS; do
  grep -q "^Dependency: $dep: bundle" "$summary" || fail "$dep did not come from the bundle"
done
grep -q "^Dependency: Fashion-MNIST: bundle" "$summary" || fail "the data did not come from the bundle"
grep -q "^Dependency: cuDNN: Python wheel" "$summary" || fail "cuDNN was not found as a wheel"
if [ $check_only = 1 ]; then
  grep -q '^RESULT: PASS$' "$summary" || fail "gpu-check --dry-run did not pass"
  echo "REHEARSAL: PASS (check only: bare root, dependencies from the bundle and the wheel, dry run)"
  exit 0
fi
for stage in deps configure build cpu-tests; do
  grep -Eq "^$stage +ok " "$summary" || fail "stage $stage did not pass"
done
grep -q '^RESULT: FAIL$' "$summary" || fail "without a GPU the verdict must be FAIL"
grep -q 'no GPU\|nvidia-smi' "$summary" || fail "the verdict did not name the missing GPU"
! grep -q 'gpu test failed' "$summary" || fail "a gpu-labelled test failed (without a GPU they must skip)"
echo "REHEARSAL: PASS (bundle and wheel supplied every dependency; build, every .cu for sm_90 and the CPU tests passed; verdict FAIL for want of a GPU)"
