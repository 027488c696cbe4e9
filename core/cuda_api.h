// core/cuda_api.h — what every layer may ask about CUDA, in any build: is it compiled in, is a
// GPU usable, and why not. Includes no CUDA header, so CPU-only code and the CPU-only build
// (-DMIXTAPE_CUDA=OFF) use it freely; the CUDA-only API lives in core/cuda/.
// Invariant: nothing here touches the CUDA runtime before the first call (no static
// initialiser does), and on a machine without a driver or device every answer is "no" with a
// reason, never a crash or an exception — except check_available(), whose job is to throw.
#pragma once
#include <string>

#include "core/allocator.h"

namespace mixtape::cuda {

// Compiled with the CUDA backend (MIXTAPE_WITH_CUDA).
bool built_with_cuda();
// At least one CUDA device can be used (driver loaded, device present).
bool is_available();
// Usable devices; 0 when built without CUDA, with no driver, or with no device.
int device_count();
// Why is_available() is false: "built without CUDA" | "no CUDA driver (<cuda status>)" |
// "no CUDA device"; empty when a GPU is available.
std::string unavailable_reason();

// Waits for all work on `device` (-1: the current device). No-op without a GPU; refused during
// CUDA graph capture (core/cuda/graph.h).
void synchronize(int device = -1);
// Returns every cached, unused block of the CUDA caching allocator to the driver.
// No-op without a GPU or before the first CUDA allocation.
void empty_cache();

// Throws mixtape::Error "<op>: CUDA is not available: <unavailable_reason()>" when it is not.
void check_available(const char* op);
// check_available, then: device index in [0, device_count()), else
// "<op>: cuda:<index> does not exist (<n> CUDA device(s))".
void check_device(int index, const char* op);

// cuDNN's convolution algorithms, like torch.backends.cudnn.deterministic but on by default: true
// (the default) lets only algorithms cuDNN reports deterministic run, so a CUDA training step gives
// the same bits on every run; false lets the heuristics' first choice run even when it is not
// (backward algorithms that accumulate with atomics; sometimes faster). Process-wide, any build;
// a choice is cached per shape and per setting.
void set_cudnn_deterministic(bool on);
bool cudnn_deterministic();
// Like torch.backends.cudnn.benchmark, off by default: true makes the first call of each
// convolution shape time cuDNN's algorithms on the call's own operands (cudnnFind*AlgorithmEx) and
// keep the fastest one that meets the requirements above (determinism included) instead of
// taking the heuristics' ranking. Costs a few milliseconds per new shape; pays off when shapes
// repeat (a training loop). Process-wide, any build; cached per shape and per setting.
void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();

// The CUDA caching allocator's statistics for one device (all zero without a GPU);
// memory_stats(Device::CUDA()) gives the sum over devices.
AllocatorStats memory_stats(int device);

}  // namespace mixtape::cuda
