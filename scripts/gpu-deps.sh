# scripts/gpu-deps.sh — sourced by scripts/gpu-check.sh: finds each build/test dependency on this
# machine and, for what is missing, takes it from the bundle (scripts/gpu-bundle.sh). Invariant:
# a dependency the machine has is used as it is; the bundle supplies only the rest, each from its
# own root in the bundle through CMake cache variables naming that root's files (never a shared
# prefix or include folder that would shadow the machine's own copies), and the bundle's libraries
# go on the loader path only when a dependency that needs them at run time came from it.
#
#   resolve_gpu_deps BUNDLE_DIR EXTRACT_DIR [dry]
# sets:    deps_cmake_args (array: -D/-U arguments for CMake), deps_report (array: one line per
#          dependency: "name: system|bundle|Python wheel|MISSING ..."), deps_missing (count)
# exports: LD_LIBRARY_PATH (OpenBLAS's runtime libraries from the bundle, cuDNN's wheel),
#          MIXTAPE_FASHION_MNIST (absolute), CPATH (cuBLAS headers from a wheel, if only there)
# BUNDLE_DIR may be absent: then what the machine lacks is reported MISSING. `dry` unpacks
# nothing (gpu-check's --dry-run): a dependency the bundle would supply is reported as such.

_first_file() {  # the first existing path among the arguments (globs allowed)
  local f
  for f in "$@"; do [ -e "$f" ] && { echo "$f"; return 0; }; done
  return 1
}

_arch() { gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu; }

_system_header() {  # _system_header REL: REL in the first of the machine's include folders that has it
  local d arch
  arch=$(_arch)
  for d in /usr/local/include /usr/include "/usr/include/$arch" "/usr/include/$arch/openblas-openmp" \
           "/usr/include/$arch/openblas-pthread" /usr/include/openblas; do
    [ -e "$d/$1" ] && { echo "$d/$1"; return 0; }
  done
  return 1
}

_system_lib() {  # _system_lib NAME...: the first lib<NAME>.{so,a} in the machine's library folders
  local arch n d
  arch=$(_arch)
  for n in "$@"; do
    for d in "/usr/lib/$arch" /usr/lib /usr/local/lib /usr/local/lib64 /usr/lib64; do
      _first_file "$d/lib$n.so" "$d/lib$n.a" "$d"/openblas*/"lib$n.so" && return 0
    done
  done
  return 1
}

# A header and a library, or nothing: what a find_package / find_library of the machine would see.
_system_dep() {  # _system_dep HEADER LIB...
  local h
  h=$(_system_header "$1") || return 1
  shift
  [ $# -eq 0 ] || _system_lib "$@" >/dev/null || return 1
  echo "$h"
}

# The root (a folder with include/HEADER and lib/lib*.so*) of an NVIDIA pip wheel in Python's
# site-packages: nvidia/cudnn/, nvidia/cublas/, or the CUDA-13 layout nvidia/cu13/.
_wheel_root_of() {  # _wheel_root_of HEADER
  command -v python3 >/dev/null 2>&1 || return 1
  timeout 60 python3 - "$1" <<'PY' 2>/dev/null
import glob, os, sys
for base in sys.path:
    for inc in sorted(glob.glob(os.path.join(base, "nvidia", "*", "include", sys.argv[1]))):
        root = os.path.dirname(os.path.dirname(inc))
        if glob.glob(os.path.join(root, "lib", "lib*.so*")):
            print(root)
            sys.exit(0)
sys.exit(1)
PY
}

# Whether this machine's glibc and libstdc++ are at least what the bundle's libraries need
# (MANIFEST.txt's needs- lines); prints why not.
_bundle_runs_here() {  # _bundle_runs_here MANIFEST
  local need have lib
  need=$(sed -n 's/^needs-glibc GLIBC_//p' "$1")
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  if [ -n "$need" ] && [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)" != "$need" ]; then
    echo "the bundle's libraries need glibc $need, this machine has $have"
    return 1
  fi
  need=$(sed -n 's/^needs-libstdc++ //p' "$1")
  lib=$(readlink -f "$(g++ -print-file-name=libstdc++.so.6 2>/dev/null)" 2>/dev/null || true)
  if [ -n "$need" ] && [ -f "$lib" ] && ! grep -qa "$need" "$lib"; then
    echo "the bundle's libraries need $need, which this machine's $lib lacks"
    return 1
  fi
  return 0
}

resolve_gpu_deps() {
  local bundle=$1 extract=$2 dry=${3:-} prefix="" arch why="" unusable=""
  deps_cmake_args=()
  deps_report=()
  deps_missing=0
  arch=$(_arch)
  [ ! -d "$bundle" ] || bundle=$(cd "$bundle" && pwd)

  if [ -f "$bundle/prefix.tar.xz" ]; then
    if ! why=$(_bundle_runs_here "$bundle/MANIFEST.txt"); then
      unusable="the bundle cannot be used here: $why"
    elif [ -n "$dry" ]; then
      prefix=$extract  # not unpacked: only named
    else
      # Unpacked once per bundle (the stamp is the archive's checksum).
      local sum
      sum=$(sha256sum "$bundle/prefix.tar.xz" | cut -d' ' -f1)
      if [ "$(cat "$extract/.stamp" 2>/dev/null)" != "$sum" ]; then
        rm -rf "$extract" && mkdir -p "$extract"
        if ! tar -C "$extract" -xJf "$bundle/prefix.tar.xz" 2>/dev/null; then
          # No xz program: Python's tarfile reads .tar.xz itself.
          python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            "$bundle/prefix.tar.xz" "$extract" || { echo "gpu-deps: cannot unpack $bundle/prefix.tar.xz" >&2; return 1; }
        fi
        echo "$sum" >"$extract/.stamp"
      fi
      prefix=$extract
    fi
  fi

  # take NAME SYSTEM_PROBE_RESULT BUNDLE_FILE CMAKE_ARGS...: report where NAME comes from; the
  # CMake arguments apply only when the bundle supplies it.
  take() {
    local name=$1 sys=$2 file=$3; shift 3
    if [ -n "$sys" ]; then
      deps_report+=("$name: system ($sys)")
    elif [ -n "$prefix" ] && { [ -n "$dry" ] || [ -e "$file" ]; }; then
      deps_report+=("$name: bundle ($file${dry:+, once unpacked})")
      deps_cmake_args+=("$@")
      return 0
    else
      local where="not in the bundle"
      [ -f "$bundle/prefix.tar.xz" ] || where="no bundle at $bundle: run scripts/gpu-bundle.sh on the Debian machine"
      [ -z "$unusable" ] || where=$unusable
      deps_report+=("$name: MISSING (not on this machine; $where)")
      deps_missing=$((deps_missing + 1))
    fi
    return 1
  }
  local lib=lib/$arch
  take GoogleTest "$(_system_dep gtest/gtest.h gtest)" "$prefix/gtest/usr/$lib/cmake/GTest/GTestConfig.cmake" \
    "-DGTest_DIR=$prefix/gtest/usr/$lib/cmake/GTest" || true
  take "Google Benchmark" "$(_system_dep benchmark/benchmark.h benchmark)" \
    "$prefix/benchmark/usr/$lib/cmake/benchmark/benchmarkConfig.cmake" "-Dbenchmark_DIR=$prefix/benchmark/usr/$lib/cmake/benchmark" || true
  take nlohmann-json "$(_system_dep nlohmann/json.hpp)" "$prefix/nlohmann/usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake" \
    "-Dnlohmann_json_DIR=$prefix/nlohmann/usr/share/cmake/nlohmann_json" || true
  take CLI11 "$(_system_dep CLI/CLI.hpp)" "$prefix/cli11/usr/include/CLI/CLI.hpp" "-DCLI11_INCLUDE_DIR=$prefix/cli11/usr/include" || true
  take stb "$(_system_dep stb/stb_image.h)" "$prefix/stb/usr/include/stb/stb_image.h" "-DSTB_INCLUDE_DIR=$prefix/stb/usr/include" || true
  take zlib "$(_system_dep zlib.h z)" "$prefix/zlib/usr/$lib/libz.so" "-DZLIB_INCLUDE_DIR=$prefix/zlib/usr/include" \
    "-DZLIB_LIBRARY=$prefix/zlib/usr/$lib/libz.so" || true
  local ob=$prefix/openblas/usr/$lib/openblas-openmp
  if take OpenBLAS "$(_system_dep cblas.h openblas)" "$ob/libopenblas.so.0" \
       "-DCBLAS_INCLUDE_DIR=$prefix/openblas/usr/include/$arch/openblas-openmp" \
       "-DMIXTAPE_BLAS_DEFAULT_LIBRARY=$ob/libopenblas.so" "-DMIXTAPE_OPENBLAS_OPENMP_LIBRARY=$ob/libopenblas.so.0"; then
    # OpenBLAS is loaded at run time (dlopen) and needs the bundle's libgfortran and libquadmath.
    export LD_LIBRARY_PATH="$prefix/openblas/usr/$lib:$ob${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi

  # The data: $MIXTAPE_FASHION_MNIST, the Debian package, or the bundle's copy (made absolute:
  # ctest runs each test in its own folder).
  local d data=""
  for d in "${MIXTAPE_FASHION_MNIST:-}" /usr/share/datasets/fashion-mnist; do
    [ -n "$d" ] && [ -e "$d/train-images-idx3-ubyte.gz" ] && { data=$(cd "$d" && pwd); break; }
  done
  if [ -n "$data" ]; then
    deps_report+=("Fashion-MNIST: system ($data)")
  elif [ -e "$bundle/fashion-mnist/train-images-idx3-ubyte.gz" ]; then
    data=$bundle/fashion-mnist
    deps_report+=("Fashion-MNIST: bundle ($data)")
  else
    deps_report+=("Fashion-MNIST: MISSING (no \$MIXTAPE_FASHION_MNIST, no /usr/share/datasets/fashion-mnist, not in the bundle)")
    deps_missing=$((deps_missing + 1))
  fi
  [ -z "$data" ] || export MIXTAPE_FASHION_MNIST=$data

  # cuDNN: $CUDNN_ROOT, the toolkit, the system, else NVIDIA's pip wheel (libcudnn.so.9 only). A
  # root's paths are passed explicitly, and a system cuDNN clears the cached ones, so a rerun in
  # the same build folder follows this choice.
  local nvcc_bin cuda_home cudnn_sys="" root
  nvcc_bin=$(readlink -f "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")
  cuda_home=$(cd "$(dirname "$nvcc_bin")/.." 2>/dev/null && pwd || echo /usr/local/cuda)
  cudnn_root() {  # cudnn_root ROOT SOURCE
    local l
    l=$(_first_file "$1"/lib/libcudnn.so "$1"/lib/libcudnn.so.9 "$1"/lib64/libcudnn.so "$1"/lib64/libcudnn.so.9) || return 1
    deps_report+=("cuDNN: $2 ($1)")
    deps_cmake_args+=("-DCUDNN_INCLUDE_DIR=$1/include" "-DCUDNN_LIBRARY=$l")
    export LD_LIBRARY_PATH="$(dirname "$l")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  }
  if [ -n "${CUDNN_ROOT:-}" ] && [ -e "$CUDNN_ROOT/include/cudnn.h" ] && cudnn_root "$CUDNN_ROOT" "\$CUDNN_ROOT"; then
    :
  elif cudnn_sys=$(_first_file "$cuda_home/include/cudnn.h" "$cuda_home"/targets/*/include/cudnn.h) ||
       cudnn_sys=$(_system_header cudnn.h); then
    deps_report+=("cuDNN: system ($cudnn_sys)")
    deps_cmake_args+=(-UCUDNN_INCLUDE_DIR -UCUDNN_LIBRARY)
  elif root=$(_wheel_root_of cudnn.h) && cudnn_root "$root" "Python wheel"; then
    :
  else
    deps_report+=("cuDNN: MISSING (no cudnn.h under \$CUDNN_ROOT, $cuda_home, /usr/include or Python's nvidia/*/ wheels)")
    deps_missing=$((deps_missing + 1))
  fi
  # cuBLAS: loaded at run time by soname (core/cuda/cublas_lazy.cpp); its headers are needed to
  # build. From the toolkit, else a wheel (headers through CPATH, the library through the loader;
  # the wheel must be for the toolkit's CUDA major, which the soname assumes).
  if _first_file "$cuda_home/include/cublas_v2.h" "$cuda_home"/targets/*/include/cublas_v2.h >/dev/null; then
    deps_report+=("cuBLAS: system ($cuda_home)")
  elif root=$(_wheel_root_of cublas_v2.h); then
    deps_report+=("cuBLAS: Python wheel ($root)")
    export CPATH="$root/include${CPATH:+:$CPATH}"
    export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    deps_report+=("cuBLAS: MISSING (no cublas_v2.h under $cuda_home or Python's nvidia/*/ wheels)")
    deps_missing=$((deps_missing + 1))
  fi
  return 0
}
