# cmake/CudaEmulator.cmake — MIXTAPE_CUDA=EMULATOR: the CUDA backend built for a machine with no
# GPU, so CI runs every GPU test (tests/cuda_emulator/emulator.h says what is and is not proven).
# Owns: the mixtape_cuda_emulator library (the CUDA runtime, cuBLAS, cuDNN and NCCL functions mixtape
# calls, and the kernel engine) and MIXTAPE_CUDA_LIBS / MIXTAPE_WITH_CUDA for this mode.
# Invariants:
#   - The toolkit's and cuDNN's headers are used as they are (types, declarations): only their
#     libraries are replaced, so every emulated function is checked against the real declaration.
#   - .cu files are compiled as C++17 by the host compiler, with tests/cuda_emulator/device.h
#     force-included (mixtape_cuda_sources() below); they launch only through core/cuda/launch.cuh.
#   - One shared emulator library per process: every layer sees the same devices and memory.
#   - Never with the sanitizers: the fibers switch stacks behind ASan's back.
if(MIXTAPE_SANITIZE)
  message(FATAL_ERROR "MIXTAPE_CUDA=EMULATOR cannot be combined with MIXTAPE_SANITIZE=ON")
endif()
find_package(CUDAToolkit REQUIRED)  # headers only (it locates them through nvcc's directory)
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDNN_ROOT} ENV CUDNN_ROOT ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
if(NOT CUDNN_INCLUDE_DIR)
  message(FATAL_ERROR "MIXTAPE_CUDA=EMULATOR needs cudnn.h (set CUDNN_ROOT)")
endif()

set(_emu ${PROJECT_SOURCE_DIR}/tests/cuda_emulator)
add_library(mixtape_cuda_emulator SHARED
  ${_emu}/runtime.cpp ${_emu}/kernel_engine.cpp ${_emu}/cublas.cpp ${_emu}/cudnn.cpp)
target_include_directories(mixtape_cuda_emulator
  PUBLIC $<BUILD_INTERFACE:${CUDAToolkit_INCLUDE_DIRS}> $<BUILD_INTERFACE:${CUDNN_INCLUDE_DIR}>
  PRIVATE ${PROJECT_SOURCE_DIR})
# NCCL's functions too (tests/cuda_emulator/nccl.cpp: ranks meet in shared memory), when nccl.h
# is there to declare them.
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
if(NCCL_INCLUDE_DIR)
  target_sources(mixtape_cuda_emulator PRIVATE ${_emu}/nccl.cpp)
  target_include_directories(mixtape_cuda_emulator PRIVATE ${NCCL_INCLUDE_DIR})
endif()
target_compile_definitions(mixtape_cuda_emulator PUBLIC MIXTAPE_CUDA_EMULATOR=1)
target_compile_options(mixtape_cuda_emulator PRIVATE -Wall -Wextra -Wno-unused-parameter)
target_link_options(mixtape_cuda_emulator PRIVATE -Wl,--no-undefined)
# The fiber switch returns onto another stack, which a CET shadow stack would refuse; an object
# without the SHSTK mark keeps shadow stacks off for the process (compilers that enable
# -fcf-protection by default would mark it).
set_source_files_properties(${_emu}/kernel_engine.cpp PROPERTIES COMPILE_OPTIONS -fcf-protection=none)
set_target_properties(mixtape_cuda_emulator PROPERTIES INSTALL_RPATH "$ORIGIN")
install(TARGETS mixtape_cuda_emulator EXPORT mixtapeTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

# mixtape_cuda_sources(<sources...>): the .cu files among them become host C++17.
# -ffp-contract=off: device code shares functors with the CPU loops (ops/*_functors.h), some of which
# the CPU build compiles without contraction (ops/normalization.cpp) and the device rounds the same
# way on purpose (__dmul_rn); an FMA-enabled host build (-march=native) must not fuse them here.
function(mixtape_cuda_sources)
  foreach(src IN LISTS ARGN)
    if(src MATCHES "\\.cu$")
      set_source_files_properties(${src} PROPERTIES LANGUAGE CXX
        COMPILE_OPTIONS "-xc++;-std=c++17;-ffp-contract=off;-Wno-sign-compare;-Wno-unknown-pragmas;-include;${PROJECT_SOURCE_DIR}/tests/cuda_emulator/device.h")
    endif()
  endforeach()
endfunction()

set(MIXTAPE_WITH_CUDA ON)
set(MIXTAPE_CUDA_EMULATOR ON)
set(MIXTAPE_CUDA_REASON "MIXTAPE_CUDA=EMULATOR")
set(MIXTAPE_CUDA_LIBS mixtape_cuda_emulator)
message(STATUS "mixtape: CUDA EMULATOR — .cu files compiled by ${CMAKE_CXX_COMPILER_ID}, "
               "run on the CPU by tests/cuda_emulator (headers: ${CUDAToolkit_INCLUDE_DIRS}, ${CUDNN_INCLUDE_DIR})")
