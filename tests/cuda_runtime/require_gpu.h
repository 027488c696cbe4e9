// tests/cuda_runtime/require_gpu.h — REQUIRE_GPU(): skips a CUDA runtime test, with the reason,
// where no GPU (or the emulator) is usable. Shared by the cuda_runtime suites.
#pragma once
#include <gtest/gtest.h>

#include "core/cuda_api.h"

#define REQUIRE_GPU()                                                                           \
  do {                                                                                          \
    if (!cuda::is_available()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason(); \
  } while (0)
