#!/usr/bin/env bash
# scripts/install-deps.sh — install the Debian packages mixtape builds, tests and runs with.
# Idempotent: checks each package with dpkg (`dpkg-query -W`, i.e. `dpkg -s`) and installs
# only the missing ones, running `apt-get update` only when something must be installed. Never calls sudo: as non-root it
# lists what is missing, says how to install it, and exits 1.
#
#   scripts/install-deps.sh               build + test + demo dependencies
#   scripts/install-deps.sh --with-torch  also python3-torch (regenerating tests/fixtures,
#                                         comparison benchmarks)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

packages=(
  build-essential cmake          # compiler, make, CMake >= 3.25
  libopenblas-dev                # CPU GEMM: cblas.h and the default OpenBLAS
  libopenblas0-openmp            # the OpenBLAS mixtape loads: threads on the OpenMP pool (ops/cpu/blas.h)
  zlib1g-dev                     # .gz datasets
  libgtest-dev libgmock-dev      # tests
  libbenchmark-dev               # bench/
  libstb-dev                     # stb_image
  nlohmann-json3-dev             # JSON headers
  libcli11-dev                   # command lines
  libopenmpi-dev openmpi-bin     # data parallelism (distributed/): MPI and mpirun
  iproute2                       # scripts/mpi-two-hosts.sh: two hosts as network namespaces
  dataset-fashion-mnist          # the training job's data
)

for arg in "$@"; do
  case "$arg" in
    --with-torch) packages+=(python3-torch) ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps.sh: unknown argument '$arg' (expected --with-torch)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  # Require "install ok installed": `dpkg -s` alone also succeeds for removed-but-configured
  # (rc) packages, whose files are gone.
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  if [ "$status" != "install ok installed" ]; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps.sh: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps.sh: missing: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: not root, so not installing. Run as root, e.g.:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
echo "install-deps.sh: installed ${missing[*]}"
