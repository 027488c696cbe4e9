# scripts/gpu-deps.sh — sourced by scripts/gpu-check.sh: finds each build/test dependency on this
# machine and, for what is missing, takes it from the bundle (scripts/gpu-bundle.sh). Invariant:
# a dependency the machine has is used as it is; the bundle supplies only the rest, one CMake cache
# variable per dependency (never a prefix that would shadow the machine's own copies).
#
#   resolve_gpu_deps BUNDLE_DIR EXTRACT_DIR
# sets:    deps_cmake_args (array: -D... for CMake), deps_report (array: one line per dependency:
#          "name: system|bundle|MISSING <where>"), deps_missing (count)
# exports: LD_LIBRARY_PATH (bundle and cuDNN-wheel libraries first), MIXTAPE_FASHION_MNIST (when
#          the data comes from the bundle), CPATH (cuBLAS headers from a wheel, if only there)
# BUNDLE_DIR may be absent: then nothing missing can be supplied and each is reported MISSING.

# First existing file among the arguments (globs allowed), or nothing.
_first_file() {
  local f
  for f in "$@"; do [ -e "$f" ] && { echo "$f"; return 0; }; done
  return 1
}

# The machine's include directories (the compiler's defaults plus the usual prefixes).
_system_include_dirs() {
  local arch
  arch=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
  echo /usr/local/include /usr/include "/usr/include/$arch" "/usr/include/$arch/openblas-openmp" \
    "/usr/include/$arch/openblas-pthread" /usr/include/openblas
}

_system_header() {  # _system_header REL: the first system include dir holding REL
  local d
  for d in $(_system_include_dirs); do [ -e "$d/$1" ] && { echo "$d/$1"; return 0; }; done
  return 1
}

# The cuDNN root (a folder with include/cudnn.h and lib/libcudnn.so*) in Python's site-packages
# (NVIDIA's wheels: nvidia/cudnn/, or the CUDA-13 layout nvidia/cu13/), if any.
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

resolve_gpu_deps() {
  local bundle=$1 extract=$2 prefix="" arch libdir
  [ ! -d "$bundle" ] || bundle=$(cd "$bundle" && pwd)
  deps_cmake_args=()
  deps_report=()
  deps_missing=0
  arch=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)

  if [ -f "$bundle/prefix.tar.xz" ]; then
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
    prefix=$extract/usr
    libdir=$prefix/lib/$arch
  fi

  # take NAME SYSTEM_PROBE_RESULT BUNDLE_FILE CMAKE_ARGS...: report where NAME comes from; the
  # CMake arguments apply only when the bundle supplies it.
  take() {
    local name=$1 sys=$2 file=$3; shift 3
    if [ -n "$sys" ]; then
      deps_report+=("$name: system ($sys)")
    elif [ -n "$prefix" ] && [ -e "$file" ]; then
      deps_report+=("$name: bundle ($file)")
      deps_cmake_args+=("$@")
    else
      deps_report+=("$name: MISSING (not on this machine${prefix:+, not in the bundle}${prefix:-; no bundle at $bundle: run scripts/gpu-bundle.sh on the Debian machine})")
      deps_missing=$((deps_missing + 1))
    fi
  }
  local cm=$prefix/lib/$arch/cmake ob=$prefix/lib/$arch/openblas-openmp
  take GoogleTest "$(_system_header gtest/gtest.h)" "$cm/GTest/GTestConfig.cmake" "-DGTest_DIR=$cm/GTest"
  take "Google Benchmark" "$(_system_header benchmark/benchmark.h)" "$cm/benchmark/benchmarkConfig.cmake" \
    "-Dbenchmark_DIR=$cm/benchmark"
  take nlohmann-json "$(_system_header nlohmann/json.hpp)" "$prefix/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake" \
    "-Dnlohmann_json_DIR=$prefix/share/cmake/nlohmann_json"
  take CLI11 "$(_system_header CLI/CLI.hpp)" "$prefix/include/CLI/CLI.hpp" "-DCLI11_INCLUDE_DIR=$prefix/include"
  take stb "$(_system_header stb/stb_image.h)" "$prefix/include/stb/stb_image.h" "-DSTB_INCLUDE_DIR=$prefix/include"
  take zlib "$(_system_header zlib.h)" "$libdir/libz.so" "-DZLIB_INCLUDE_DIR=$prefix/include" "-DZLIB_LIBRARY=$libdir/libz.so"
  local blas_sys=""
  _first_file "/usr/lib/$arch/libopenblas.so" "/usr/lib/$arch"/openblas*/libopenblas.so /usr/local/lib/libopenblas.so \
    >/dev/null && blas_sys=$(_system_header cblas.h)
  take OpenBLAS "$blas_sys" "$ob/libopenblas.so.0" \
    "-DCBLAS_INCLUDE_DIR=$prefix/include/$arch/openblas-openmp" "-DMIXTAPE_BLAS_DEFAULT_LIBRARY=$ob/libopenblas.so" \
    "-DMIXTAPE_OPENBLAS_OPENMP_LIBRARY=$ob/libopenblas.so.0"
  if [ -n "$prefix" ]; then
    export LD_LIBRARY_PATH="$libdir:$ob${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi

  # The data: the Debian package, $MIXTAPE_FASHION_MNIST, or the bundle's copy.
  local data_sys=""
  for d in "${MIXTAPE_FASHION_MNIST:-}" /usr/share/datasets/fashion-mnist; do
    [ -n "$d" ] && [ -e "$d/train-images-idx3-ubyte.gz" ] && { data_sys=$d; break; }
  done
  if [ -n "$data_sys" ]; then
    deps_report+=("Fashion-MNIST: system ($data_sys)")
    export MIXTAPE_FASHION_MNIST=$data_sys
  elif [ -e "$bundle/fashion-mnist/train-images-idx3-ubyte.gz" ]; then
    deps_report+=("Fashion-MNIST: bundle ($bundle/fashion-mnist)")
    MIXTAPE_FASHION_MNIST=$(cd "$bundle/fashion-mnist" && pwd)
    export MIXTAPE_FASHION_MNIST
  else
    deps_report+=("Fashion-MNIST: MISSING (no /usr/share/datasets/fashion-mnist, no \$MIXTAPE_FASHION_MNIST, not in the bundle)")
    deps_missing=$((deps_missing + 1))
  fi

  # cuDNN: $CUDNN_ROOT, the toolkit, the system, else NVIDIA's pip wheel (libcudnn.so.9 only).
  local nvcc_bin cuda_home cudnn_sys="" root
  nvcc_bin=$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
  cuda_home=$(cd "$(dirname "$nvcc_bin")/.." 2>/dev/null && pwd || echo /usr/local/cuda)
  if [ -n "${CUDNN_ROOT:-}" ] && [ -e "$CUDNN_ROOT/include/cudnn.h" ]; then
    deps_report+=("cuDNN: \$CUDNN_ROOT ($CUDNN_ROOT)")
    deps_cmake_args+=("-DCUDNN_ROOT=$CUDNN_ROOT")
    export LD_LIBRARY_PATH="$CUDNN_ROOT/lib:$CUDNN_ROOT/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  elif cudnn_sys=$(_first_file "$cuda_home/include/cudnn.h" "$cuda_home"/targets/*/include/cudnn.h) ||
       cudnn_sys=$(_system_header cudnn.h); then
    deps_report+=("cuDNN: system ($cudnn_sys)")
  elif root=$(_wheel_root_of cudnn.h); then
    deps_report+=("cuDNN: Python wheel ($root)")
    deps_cmake_args+=("-DCUDNN_ROOT=$root")
    export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    deps_report+=("cuDNN: MISSING (no cudnn.h under \$CUDNN_ROOT, $cuda_home, /usr/include or Python's nvidia/*/ wheels)")
    deps_missing=$((deps_missing + 1))
  fi
  # cuBLAS: loaded at run time by soname (core/cuda/cublas_lazy.cpp); its headers are needed to
  # build. From the toolkit, else a wheel (headers through CPATH, the library through the loader).
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
