# cmake/Cuda.cmake — decides whether mixtape is built with its CUDA backend, and sets the toolkit up.
# Owns: the MIXTAPE_CUDA option (AUTO|ON|OFF), the CUDA language settings, the imported cuDNN
# target, and MIXTAPE_CUDA_LIBS (what a layer with CUDA sources links).
# Invariants (docs/CUDA.md explains them):
#   - AUTO turns CUDA on exactly when an nvcc is found, so a machine without the toolkit builds
#     the CPU-only configuration with no extra flags; ON without nvcc is a configure error.
#   - Explicit architecture list (never "native": it fails on a machine without a GPU). Each
#     architecture is one more device compile (cicc, ptxas) of every .cu, so the default is one:
#     the local GPU's (nvidia-smi's compute capability, e.g. 90, which also embeds its PTX) when
#     one is found, else 80 (sm_80 code plus compute_80 PTX: runs on every GPU from A100 on,
#     Hopper by JIT, and still puts every kernel through ptxas, so a build without a GPU, CI's,
#     checks the whole device compile). -DCMAKE_CUDA_ARCHITECTURES=... or CUDAARCHS choose
#     others, e.g. "80-real;90-real;90-virtual" for binaries meant for several GPU generations.
#   - One cudart, the shared one; never the driver library (only a stub exists on CI machines
#     and a binary linked to it does not start) — cudart loads the driver itself, at first use.
#   - cuBLAS/cuBLASLt are not linked but loaded at first call (core/cuda/cublas_lazy.cpp), so
#     processes that never multiply on a GPU (most tests) do not pay for loading them.
# Sets MIXTAPE_WITH_CUDA (ON/OFF) and MIXTAPE_CUDA_REASON for the configure message.
set(MIXTAPE_CUDA AUTO CACHE STRING
    "Build the CUDA backend: AUTO (when nvcc is found), ON, OFF, or EMULATOR (kernels on the CPU, for tests)")
set_property(CACHE MIXTAPE_CUDA PROPERTY STRINGS AUTO ON OFF EMULATOR)
string(TOUPPER "${MIXTAPE_CUDA}" _mixtape_cuda_mode)
if(NOT _mixtape_cuda_mode MATCHES "^(AUTO|ON|OFF|EMULATOR)$")
  message(FATAL_ERROR "MIXTAPE_CUDA must be AUTO, ON, OFF or EMULATOR, got '${MIXTAPE_CUDA}'")
endif()

set(MIXTAPE_WITH_CUDA OFF)
set(MIXTAPE_CUDA_EMULATOR OFF)
set(MIXTAPE_CUDA_LIBS)
if(_mixtape_cuda_mode STREQUAL "EMULATOR")
  # The whole CUDA backend, compiled by the host compiler against the CUDA emulator
  # (tests/cuda_emulator/): no nvcc, no GPU, no cudart/cuBLAS/cuDNN at run time.
  include(cmake/CudaEmulator.cmake)
  return()
elseif(_mixtape_cuda_mode STREQUAL "OFF")
  set(MIXTAPE_CUDA_REASON "MIXTAPE_CUDA=OFF")
elseif(MIXTAPE_SANITIZE)
  # Sanitizer flags are host-compiler flags nvcc refuses; the sanitizer build is CPU-only.
  if(_mixtape_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "MIXTAPE_SANITIZE=ON needs the CPU-only build: use MIXTAPE_CUDA=OFF or AUTO")
  endif()
  set(MIXTAPE_CUDA_REASON "MIXTAPE_SANITIZE=ON (sanitizer builds are CPU-only)")
else()
  # CMake 3.25 does not look in /usr/local/cuda by itself (nvcc is not on PATH there).
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(MIXTAPE_WITH_CUDA ON)
    set(MIXTAPE_CUDA_REASON "nvcc at ${CMAKE_CUDA_COMPILER} (MIXTAPE_CUDA=${_mixtape_cuda_mode})")
  elseif(_mixtape_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "MIXTAPE_CUDA=ON but no CUDA compiler was found: set CMAKE_CUDA_COMPILER "
                        "(e.g. /usr/local/cuda/bin/nvcc) or configure with -DMIXTAPE_CUDA=OFF")
  else()
    set(MIXTAPE_CUDA_REASON "no nvcc found (MIXTAPE_CUDA=AUTO)")
  endif()
endif()

# mixtape_default_cuda_architecture(<arch var> <reason var>): the local GPU's architecture when
# nvidia-smi answers with a compute capability this nvcc can compile for, else 80. With several
# GPUs, all of their (distinct) architectures.
function(mixtape_default_cuda_architecture out_arch out_why)
  set(arch 80)
  set(why "no GPU found (no nvidia-smi, or it answered no compute capability): sm_80 + compute_80 PTX")
  find_program(MIXTAPE_NVIDIA_SMI nvidia-smi)
  if(MIXTAPE_NVIDIA_SMI)
    execute_process(COMMAND ${MIXTAPE_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                    RESULT_VARIABLE rc OUTPUT_VARIABLE caps ERROR_QUIET TIMEOUT 20)
    string(REGEX MATCHALL "[0-9]+\\.[0-9]+" caps "${caps}")
    list(REMOVE_DUPLICATES caps)
    if(rc EQUAL 0 AND caps)
      execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-arch
                      RESULT_VARIABLE nvcc_rc OUTPUT_VARIABLE supported ERROR_QUIET TIMEOUT 20)
      set(found)
      foreach(cap ${caps})
        string(REPLACE "." "" a "${cap}")
        if(NOT nvcc_rc EQUAL 0 OR supported MATCHES "compute_${a}([^0-9]|$)")
          list(APPEND found ${a})
        else()
          message(WARNING "mixtape: the GPU's compute capability ${cap} is not one this nvcc compiles for "
                          "(nvcc --list-gpu-arch), so it is left out of the default architectures (${arch} "
                          "when no GPU is left); set -DCMAKE_CUDA_ARCHITECTURES to choose.")
        endif()
      endforeach()
      list(REMOVE_DUPLICATES found)
      if(found)
        set(arch ${found})
        set(why "the local GPU's (nvidia-smi: compute capability ${caps})")
      else()
        set(why "no GPU this nvcc compiles for (nvidia-smi: compute capability ${caps}): sm_80 + compute_80 PTX")
      endif()
    endif()
  endif()
  set(${out_arch} ${arch} PARENT_SCOPE)
  set(${out_why} "${why}" PARENT_SCOPE)
endfunction()

if(MIXTAPE_WITH_CUDA)
  # One architecture by default (see the header): each more is another device compile of
  # every .cu, and most builds (a newcomer's `make demo`, CI) run on no GPU at all.
  # scripts/gpu-check.sh passes the local GPU's explicitly; CUDAARCHS is CMake's own variable.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
    mixtape_default_cuda_architecture(_mixtape_arch _mixtape_arch_why)
    set(CMAKE_CUDA_ARCHITECTURES ${_mixtape_arch} CACHE STRING "CUDA architectures (${_mixtape_arch_why})")
    message(STATUS "mixtape: CUDA architecture ${_mixtape_arch}: ${_mixtape_arch_why}")
  endif()
  # CMake 3.25 knows no C++20 flag for nvcc: .cu files are C++17 (headers they include must be too).
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  if(MIXTAPE_CCACHE AND NOT CMAKE_CUDA_COMPILER_LAUNCHER)
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${MIXTAPE_CCACHE})
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # nccl.h (optional; CMakeLists.txt decides whether distributed/ uses NCCL).
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)

  # cuDNN sits beside the toolkit here but a bare find_library misses it: hint the toolkit dirs.
  # CUDNN_ROOT (a CMake or environment variable) names another root: NVIDIA's pip wheel
  # (site-packages/nvidia/cudnn) ships only the versioned libcudnn.so.9, hence the second name.
  find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDNN_ROOT} ENV CUDNN_ROOT ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR HINTS ${CUDNN_ROOT} ENV CUDNN_ROOT ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  if(NOT CUDNN_INCLUDE_DIR OR NOT CUDNN_LIBRARY)
    message(FATAL_ERROR "CUDA is on (${MIXTAPE_CUDA_REASON}) but cuDNN was not found "
                        "(cudnn.h: ${CUDNN_INCLUDE_DIR}, libcudnn: ${CUDNN_LIBRARY}); set CUDNN_ROOT "
                        "or configure with -DMIXTAPE_CUDA=OFF")
  endif()
  if(NOT TARGET mixtape_cudnn)
    add_library(mixtape_cudnn SHARED IMPORTED)
    set_target_properties(mixtape_cudnn PROPERTIES
      IMPORTED_LOCATION ${CUDNN_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${CUDNN_INCLUDE_DIR})
  endif()
  # cuBLAS/cuBLASLt are not linked: core/cuda/cublas_lazy.cpp loads them at first use (linking
  # libcublasLt costs every process ~0.4 CPU-s at start, GPU or not). It needs their soversion.
  # A toolkit without cuBLAS's library (a pip-wheel machine) has no CUDA::cublas: the soversion is
  # then the toolkit's major version, as cuBLAS's always is.
  set(_mixtape_cublas_real "")
  if(TARGET CUDA::cublas)
    get_target_property(_mixtape_cublas_lib CUDA::cublas IMPORTED_LOCATION)
    file(REAL_PATH "${_mixtape_cublas_lib}" _mixtape_cublas_real)
  endif()
  if(_mixtape_cublas_real MATCHES "libcublas\\.so\\.([0-9]+)")
    set(MIXTAPE_CUBLAS_SOVERSION ${CMAKE_MATCH_1})
  else()
    set(MIXTAPE_CUBLAS_SOVERSION ${CUDAToolkit_VERSION_MAJOR})
  endif()
  set(MIXTAPE_CUDA_LIBS CUDA::cudart mixtape_cudnn ${CMAKE_DL_LIBS})
  message(STATUS "mixtape: CUDA on — ${MIXTAPE_CUDA_REASON}; CUDA ${CUDAToolkit_VERSION}, "
                 "archs ${CMAKE_CUDA_ARCHITECTURES}, cuDNN ${CUDNN_LIBRARY}")
else()
  message(STATUS "mixtape: CUDA off — ${MIXTAPE_CUDA_REASON}; CPU-only build "
                 "(mixtape::cuda answers \"built without CUDA\")")
endif()
