#!/usr/bin/env bash
# scripts/gpu-bundle.sh — gather here what a bare GPU machine lacks, for scripts/gpu-check.sh there.
# The lent GPU machine has a CUDA toolkit, CMake, a compiler and Python (with PyTorch and NVIDIA's
# pip wheels) but none of our Debian packages, no apt and no network. This script downloads those
# packages from Debian's archive (apt-get download: no installation, any user), unpacks them
# (dpkg-deb -x), keeps what a build and the tests need, and writes into DIR (git-ignored):
#   DIR/prefix.tar.xz     one /usr-style root per dependency (gtest/usr, benchmark/usr, stb/usr,
#                         nlohmann/usr, cli11/usr, openblas/usr, zlib/usr), so that taking one
#                         dependency from the bundle never brings another's headers along
#   DIR/fashion-mnist/    the dataset's four .gz files (already compressed; whole, it fits)
#   DIR/MANIFEST.txt      packages and versions, and the newest glibc / libstdc++ symbol versions
#                         the bundled shared libraries need; gpu-check.sh (scripts/gpu-deps.sh)
#                         compares them with the GPU machine's before using the bundle
# DIR travels with the working tree (the device tool's `carry`: 64 MiB in all with the tree; the
# bundle is about 37 MB). docs/CUDA.md ("A bare GPU machine") has the whole procedure.
#
#   scripts/gpu-bundle.sh [DIR]      default DIR: gpu-bundle (replaced if it holds a bundle)
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${1:-gpu-bundle}
case "$dir" in -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
# DIR is deleted and rewritten: only when it is absent, empty, or an earlier bundle.
if [ -e "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ] && [ ! -f "$dir/MANIFEST.txt" ]; then
  echo "gpu-bundle: '$dir' exists and is not a bundle (no MANIFEST.txt): not replacing it" >&2
  exit 2
fi

# What the build, the tests and the benchmarks need beyond a compiler, CMake, CUDA and Python
# (scripts/install-deps.sh is the same list for a Debian machine), grouped by the dependency
# they make up (its root in the bundle). Runtime libraries go where their -dev package needs
# them at link or run time (OpenBLAS -> gfortran -> quadmath; libz.so -> zlib1g's libz.so.1).
declare -A groups=(
  [gtest]="libgtest-dev libgmock-dev"                 # tests (static libraries + CMake config)
  [benchmark]="libbenchmark-dev libbenchmark1debian"  # bench/ (bench_gpu_step)
  [stb]="libstb-dev"                                  # stb_image (header-only use)
  [nlohmann]="nlohmann-json3-dev"
  [cli11]="libcli11-dev"
  [openblas]="libopenblas-openmp-dev libopenblas0-openmp libgfortran5 libquadmath0"
  [zlib]="zlib1g-dev zlib1g"
)
data_package=dataset-fashion-mnist

for tool in apt-get dpkg-deb tar xz sha256sum objdump; do
  command -v "$tool" >/dev/null || { echo "gpu-bundle: '$tool' is needed (run this on the Debian machine)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs"
packages=($data_package)
for g in "${!groups[@]}"; do for p in ${groups[$g]}; do packages+=("$p"); done; done
echo "gpu-bundle: downloading ${#packages[@]} packages"
(cd "$work/debs" && apt-get download "${packages[@]}" >/dev/null 2>"$work/apt.err") || {
  cat "$work/apt.err" >&2
  echo "gpu-bundle: apt-get download failed (is the archive reachable? 'apt-get update' first?)" >&2
  exit 1
}
deb_of() { ls "$work"/debs/"$1"_*.deb; }

# One root per dependency, pruned and made self-contained.
for g in "${!groups[@]}"; do
  root=$work/roots/$g
  mkdir -p "$root"
  for p in ${groups[$g]}; do dpkg-deb -x "$(deb_of "$p")" "$root"; done
  # Not needed there: documentation, and the libraries we do not use (stb's headers only; OpenBLAS's
  # cblas, not the reference BLAS/LAPACK shims; libopenblas.a is 30 MB; the shared libz.so suffices).
  rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian" "$root/usr/share/bug"
  find "$root" \( -name 'libstb.so*' -o -name 'liblapack.*' -o -name 'libblas.*' -o -name 'libopenblas*.a' \
    -o -name 'libz.a' \) -exec rm -f {} +
  # Debian 12's zlib1g still ships /lib/<arch>/libz.so.1: merge /lib into /usr/lib (a root holds
  # usr/ only), as a usrmerged system has it.
  if [ -d "$root/lib" ]; then
    cp -a "$root/lib/." "$root/usr/lib/"
    rm -rf "$root/lib"
  fi
  # Absolute symlinks would point into the GPU machine's own /: made relative when the target is
  # in this root (libz.so -> /lib/<arch>/libz.so.1.2.13).
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
  # Links left dangling by what was dropped (/usr/src/gtest -> googletest's sources).
  find "$root" -xtype l -delete
done

rm -rf "$dir"
mkdir -p "$dir/fashion-mnist"
dpkg-deb -x "$(deb_of $data_package)" "$work/data"
mv "$work"/data/usr/share/datasets/fashion-mnist/*.gz "$dir/fashion-mnist/"
[ -f "$dir/fashion-mnist/train-images-idx3-ubyte.gz" ] || { echo "gpu-bundle: the dataset package had no IDX files" >&2; exit 1; }

tar -C "$work/roots" -cJf "$dir/prefix.tar.xz" .

newest() {  # newest NAME_ : the highest NAME_x.y[.z] version the bundle's shared libraries need
  find "$work/roots" -name '*.so*' -type f -print0 | xargs -0 objdump -T 2>/dev/null | grep -o "$1[0-9.]*[0-9]" |
    sort -u -V | tail -n 1
}
{
  echo "# mixtape GPU bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "# by scripts/gpu-bundle.sh; read by scripts/gpu-deps.sh (the needs- lines)"
  echo "needs-glibc $(newest GLIBC_)"
  echo "needs-libstdc++ $(newest GLIBCXX_)"
  for g in $(printf '%s\n' "${!groups[@]}" | sort); do
    for p in ${groups[$g]}; do echo "package $g $p $(dpkg-deb -f "$(deb_of "$p")" Version)"; done
  done
  echo "package data $data_package $(dpkg-deb -f "$(deb_of $data_package)" Version)"
  (cd "$dir" && sha256sum prefix.tar.xz fashion-mnist/*.gz | sed 's/^/sha256 /')
} >"$dir/MANIFEST.txt"

echo "gpu-bundle: wrote $dir ($(du -sh "$dir" | cut -f1)): $(grep -c '^package' "$dir/MANIFEST.txt") packages," \
  "$(grep '^needs-' "$dir/MANIFEST.txt" | tr '\n' ' ')"
