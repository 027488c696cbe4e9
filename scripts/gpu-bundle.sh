#!/usr/bin/env bash
# scripts/gpu-bundle.sh — gather here what a bare GPU machine lacks, for scripts/gpu-check.sh there.
# The lent GPU machine has a CUDA toolkit, CMake, a compiler and Python (with PyTorch and NVIDIA's
# pip wheels) but none of our Debian packages, no apt and no network. This script downloads those
# packages from Debian's archive (apt-get download: no installation, any user), unpacks them
# (dpkg-deb -x), keeps what a build and the tests need, and writes into DIR (git-ignored):
#   DIR/prefix.tar.xz     a /usr-style prefix: headers, CMake package files, shared libraries and
#                         the static GoogleTest/Google Benchmark libraries (Debian ships them so)
#   DIR/fashion-mnist/    the dataset's four .gz files (already compressed; whole, it fits)
#   DIR/MANIFEST.txt      packages and versions, and the newest glibc / libstdc++ symbol versions
#                         the bundled libraries need (the GPU machine must have at least those)
# DIR travels with the working tree (the device tool's `carry`: 64 MiB in all with the tree; the
# bundle is about 40 MiB). gpu-check.sh finds DIR (default gpu-bundle/) and uses it only for what
# the machine lacks. docs/CUDA.md ("A bare GPU machine") has the whole procedure.
#
#   scripts/gpu-bundle.sh [DIR]      default DIR: gpu-bundle
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${1:-gpu-bundle}
case "$dir" in -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

# What the build, the tests and the benchmarks need beyond a compiler, CMake, CUDA and Python
# (scripts/install-deps.sh is the same list for a Debian machine). Runtime libraries are listed
# where the -dev package needs them at link or run time (OpenBLAS -> gfortran -> quadmath).
packages=(
  libgtest-dev libgmock-dev                       # tests (static libraries + CMake config)
  libbenchmark-dev libbenchmark1debian            # bench/ (bench_gpu_step)
  libstb-dev                                      # stb_image (header-only use)
  nlohmann-json3-dev libcli11-dev                 # headers
  libopenblas-openmp-dev libopenblas0-openmp      # cblas.h and the OpenMP OpenBLAS
  libgfortran5 libquadmath0                       # what libopenblas needs at run time
  zlib1g-dev zlib1g                               # .gz datasets (zlib1g: libz.so's target)
  dataset-fashion-mnist                           # the data
)

for tool in apt-get dpkg-deb tar xz sha256sum; do
  command -v "$tool" >/dev/null || { echo "gpu-bundle: '$tool' is needed (run this on the Debian machine)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/root"
echo "gpu-bundle: downloading ${#packages[@]} packages"
(cd "$work/debs" && apt-get download "${packages[@]}" >/dev/null 2>"$work/apt.err") || {
  cat "$work/apt.err" >&2
  echo "gpu-bundle: apt-get download failed (is the archive reachable? 'apt-get update' first?)" >&2
  exit 1
}
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/root"; done

root=$work/root
# Not needed there: documentation, and the libraries we do not use (mixtape reads stb's headers
# only; it calls OpenBLAS's cblas, not the reference BLAS/LAPACK shims; libopenblas.a is 30 MB).
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian" "$root/usr/share/bug"
find "$root" \( -name 'libstb.so*' -o -name 'liblapack.so*' -o -name 'libblas.so*' -o -name 'libopenblas*.a' -o -name 'libz.a' \) \
  -exec rm -f {} +
# Debian 12's zlib1g still ships /lib/<arch>/libz.so.1: merge /lib into /usr/lib (the tarball
# holds usr/ only), as a usrmerged system has it.
if [ -d "$root/lib" ]; then
  cp -a "$root/lib/." "$root/usr/lib/"
  rm -rf "$root/lib"
fi
# Absolute symlinks would point into the GPU machine's own /: make them relative where the target
# is inside the bundle (libz.so -> /lib/.../libz.so.1.2.13: Debian's usrmerge puts it in /usr/lib).
while IFS= read -r link; do
  target=$(readlink "$link")
  for cand in "$root$target" "$root/usr$target"; do
    if [ -e "$cand" ]; then
      ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$cand")" "$link"
      continue 2
    fi
  done
  echo "gpu-bundle: $link -> $target points outside the bundle" >&2
  exit 1
done < <(find "$root" -type l -lname '/*')

# Links left dangling by what was dropped (libblas.a -> ..., /usr/src/gtest -> googletest's sources).
find "$root" -xtype l -delete

data_src=$root/usr/share/datasets/fashion-mnist
[ -f "$data_src/train-images-idx3-ubyte.gz" ] || { echo "gpu-bundle: the dataset package had no IDX files" >&2; exit 1; }
rm -rf "$dir"
mkdir -p "$dir/fashion-mnist"
mv "$data_src"/*.gz "$dir/fashion-mnist/"
rm -rf "$root/usr/share/datasets"

tar -C "$root" -cJf "$dir/prefix.tar.xz" usr

newest() {  # newest NAME_ : the highest NAME_x.y[.z] version the bundle's shared libraries need
  find "$root" -name '*.so*' -type f -print0 | xargs -0 objdump -T 2>/dev/null | grep -o "$1[0-9.]*[0-9]" |
    sort -u -V | tail -n 1
}
{
  echo "# mixtape GPU bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "# by scripts/gpu-bundle.sh; read by scripts/gpu-check.sh"
  echo "needs-glibc $(newest GLIBC_)"
  echo "needs-libstdc++ $(newest GLIBCXX_)"
  for deb in "$work"/debs/*.deb; do
    echo "package $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)"
  done
  (cd "$dir" && sha256sum prefix.tar.xz fashion-mnist/*.gz | sed 's/^/sha256 /')
} >"$dir/MANIFEST.txt"

echo "gpu-bundle: wrote $dir ($(du -sh "$dir" | cut -f1)): $(grep -c '^package' "$dir/MANIFEST.txt") packages," \
  "$(grep '^needs-' "$dir/MANIFEST.txt" | tr '\n' ' ')"
