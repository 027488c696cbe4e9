// distributed/device_collectives.h — collectives on device memory (NCCL), beside the host
// group's MPI: what a ProcessGroup asks for CUDA tensors when the build has NCCL.
// Invariant: a collective is queued on the tensor's device after the work the caller's current
// stream had queued, on a stream of its own; the returned Work's wait() makes the caller's then
// current stream wait for it (the host never blocks), and the tensor's memory is kept from reuse
// until it has finished (cuda::record_stream). Every rank issues the same device collectives in
// the same order, as with MPI. A collective still outstanding after the group's timeout, or an
// asynchronous NCCL error, makes the communicator's watchdog thread abort it and fail the group:
// every later collective, and wait()/is_completed() of each aborted one, throws naming it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"

namespace mixtape::distributed {

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual const char* name() const = 0;
  // `t` contiguous, on a CUDA device; f32, f64, f16, bf16 (and i64 for Sum/Max).
  virtual Work all_reduce(const Tensor& t, ReduceOp op, const std::string& what) = 0;
  virtual void broadcast(const Tensor& t, int root) = 0;
  virtual std::vector<Tensor> all_gather(const Tensor& t) = 0;
  // ProcessGroup::reduce_scatter / all_gather_into on this device: `input` and `output`
  // contiguous, non-empty, the flat layout checked by the group; async like all_reduce (the
  // returned Work's wait() orders the caller's stream after it). reduce_scatter leaves `input`
  // unchanged and gives chunk `rank` of an all_reduce of the whole input (the same NCCL call with
  // the same count, so the same bits as all_reduce: docs/DISTRIBUTED.md says why not
  // ncclReduceScatter). all_gather_into's `input` may be `output`'s own chunk `rank` (NCCL's
  // in-place form); any other overlap the group resolves before calling.
  virtual Work reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, const std::string& what) = 0;
  virtual Work all_gather_into(const Tensor& output, const Tensor& input, const std::string& what) = 0;
};

// NCCL's communicator for this process's ranks, its unique id sent from rank 0 through `host`
// (MPI); null in a build without NCCL (distributed/cuda/nccl_collectives.cpp).
std::unique_ptr<DeviceCollectives> make_nccl_collectives(ProcessGroup& host, int device);
bool built_with_nccl();

}  // namespace mixtape::distributed
