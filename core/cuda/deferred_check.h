// core/cuda/deferred_check.h — input validation done by the device, reported by the host at its
// next synchronisation, so ops such as nll_loss never stop the host to look at their inputs
// (the AMP step's one host sync stays GradScaler.step reading found_inf).
//
// Use, in an op's CUDA glue:
//   unsigned long long* first_bad = defer_check("nll_loss", [targets, C](uint64_t position) { return "..."; });
//   launch a kernel that does atomicMin(first_bad, position) for every bad element and treats it
//   as harmless (never reads or writes out of bounds because of it);
// then the next device->host copy (to(CPU), item(), GradScaler.step) or cuda::synchronize()
// calls run_deferred_checks(device), which throws "<op>: <describe(first position)> (found on
// the device, reported at the next synchronisation)". PyTorch reports such inputs with
// device-side asserts, which also surface later but abort the process; this keeps a
// mixtape::Error.
// Invariants: a slot starts at kNoFailure in stream order before the kernel that fills it; each
// check is read once (then forgotten, failed or not); describe() runs on the host after the
// device is done with the op's inputs, and may copy them to the host.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>

namespace mixtape::cuda {

inline constexpr unsigned long long kNoFailure = ~0ull;  // atomicMin's type, all bits set

// A fresh device slot (kNoFailure) on the current device and stream, read by the next
// run_deferred_checks for this device. At most kMaxPendingChecks stay pending: the next one
// first runs them (one synchronisation) so a program that never synchronises stays bounded.
unsigned long long* defer_check(const char* op, std::function<std::string(uint64_t position)> describe);
inline constexpr int kMaxPendingChecks = 256;

// Reads every pending check of `device` (waiting for its stream) and throws the first failure's
// message as a mixtape::Error. Called by the synchronising paths; reentrant calls (describe()
// copying to the host) return at once.
void run_deferred_checks(int device);

// For a stream about to be destroyed, after it has been synchronised: its pending checks' slots
// are final, so they are read on the legacy default stream from now on. Never throws.
void release_stream_checks(cudaStream_t stream) noexcept;

}  // namespace mixtape::cuda
