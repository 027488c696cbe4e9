// core/cuda/deferred_check.h — input validation done by the device, reported by the host at its
// next synchronisation, so ops such as nll_loss never stop the host to look at their inputs
// (an AMP step's one host sync stays GradScaler.step reading found_inf).
//
// Use, in an op's CUDA glue:
//   DeferredCheck check("nll_loss", [C](uint64_t position, uint64_t value) { return "..."; });
//   launch a kernel that does atomicMin(check.slot(), position) for every bad element and
//   treats it as harmless (never reads or writes out of bounds because of it);
//   check.commit(dense_input.data_ptr(), element_size);   // the input the positions index
// commit() enqueues a copy of the first bad element's bytes next to its position (so the
// message shows the value the kernel saw, whatever happens to the input later) and an event.
// The next device->host copy (to(CPU), item(), GradScaler.step) or cuda::synchronize() calls
// run_deferred_checks(device), which reads every check whose event has completed and throws
// "<op>: <describe(position, value)> (found on the device, reported at the next
// synchronisation)". PyTorch reports such inputs with device-side asserts, which also surface
// later but abort the process; this keeps a mixtape::Error.
// During CUDA graph capture (core/cuda/graph.h) commit() makes the check part of the graph: its
// kernels are captured, and after each replay() the slot is copied to a snapshot of its own (16
// bytes, in stream order after the replay, before the next one resets the slot) that becomes
// pending like an eager check. So every replay's inputs are checked, and a failure is reported at
// the next synchronisation after that replay even if later replays were clean.
// Invariants: a check is pending only once committed, is read once (then forgotten, failed or
// not), and never through a stream handle (streams may be destroyed meanwhile); at most
// kMaxPendingChecks wait — the next commit (or replay) first waits for them, so a program that
// never synchronises stays bounded.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda/deferred_check_kernels.h"
#include "core/tensor.h"

namespace mixtape::cuda {

inline constexpr int kMaxPendingChecks = 256;

// describe(position, value): the message for the first bad position; `value` holds the bytes of
// that element (the low element_size bytes given to commit, zero-extended).
using DescribeFailure = std::function<std::string(uint64_t position, uint64_t value)>;

class DeferredCheck {
 public:
  // A fresh slot (kNoFailure) on the current device, set in stream order on the current stream.
  DeferredCheck(const char* op, DescribeFailure describe);
  unsigned long long* slot() const { return static_cast<unsigned long long*>(slot_.data_ptr()); }
  // After the checking kernel was launched: `data` is the dense input the positions index,
  // element_size <= 8 bytes. Makes the check pending.
  void commit(const void* data, size_t element_size);

 private:
  const char* op_;
  DescribeFailure describe_;
  Tensor slot_;  // two UInt64 words: the first bad position, then that element's bytes
};

// A check committed during graph capture: what each replay makes pending again.
struct CapturedCheck {
  const char* op;
  Tensor slot;  // in the graph's pool, rewritten by every replay
  DescribeFailure describe;
};
namespace detail {
// After a replay enqueued on `stream` (current on `device`): one pending snapshot per check.
void replay_captured_checks(const std::vector<CapturedCheck>& checks, int device, cudaStream_t stream);
}  // namespace detail

// Reads every pending check of `device` whose work has completed and throws the first
// failure's message as a mixtape::Error. Called where the host has just waited for the device;
// reentrant calls (describe() copying to the host) return at once.
void run_deferred_checks(int device);

}  // namespace mixtape::cuda
