// ops/cuda/copy.cpp — the to_device op's CUDA kernel: every transfer that involves a GPU.
//   to_device(x: T[*] on cpu|cuda:s, device = cuda:d | cpu) -> T[*] on the target, contiguous.
// The CPU kernel (ops/cast.cpp) hands CPU -> CUDA calls here, so this one function does
// H2D, D2H and D2D (same device, or peer-to-peer between devices).
// Invariants: bytes are copied, never converted (bit-exact for every dtype); a non-contiguous
// source is made contiguous on its own device first; the copy is ordered on the current streams
// of the devices involved, and a D2H copy has finished when the kernel returns (the host may
// read the result at once), while H2D and D2D copies are only enqueued.
#include "ops/cuda/copy.h"

#include <cuda_runtime_api.h>

#include "core/cuda/check.h"
#include "core/cuda/deferred_check.h"
#include "core/cuda/graph.h"
#include "core/cuda/pinned_memory.h"
#include "core/cuda/stream.h"
#include "core/cuda_api.h"
#include "core/dispatcher.h"
#include "ops/cpu/elementwise.h"
#include "ops/cuda/copy_kernels.h"

namespace mixtape::cuda {

Tensor contiguous_on_device(const Tensor& x) {
  if (x.is_contiguous()) return x;
  MT_CHECK(x.device().is_cuda(), "contiguous_on_device: expected a CUDA tensor, got one on ", x.device());
  int device = x.device().index();
  DeviceGuard guard(device);
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(x.dtype()).with_device(x.device()));
  const char* base = static_cast<const char*>(x.storage()->data());
  launch_strided_gather(out.data_ptr(), base + x.storage_offset() * static_cast<int64_t>(x.element_size()),
                        x.numel(), static_cast<int>(x.element_size()), static_cast<int>(x.dim()), x.sizes().data(),
                        x.strides().data(), current_stream(device));
  return out;
}

namespace {

// Host -> device: densify on the CPU, then one copy. From pageable memory cudaMemcpyAsync
// returns once the source has been staged, so the temporary may die right after. From pinned
// memory (core/cuda/pinned_memory.h) it is a DMA that reads the host bytes when the stream runs
// it: the host waits for it, so that the caller may rewrite or free the source on return, as
// after PyTorch's blocking .to() (data::BatchCopier is the way to copy without waiting).
Tensor host_to_device(const Tensor& x, int target) {
  // A captured copy would replay from host memory that may have changed or been freed since.
  check_not_capturing("to_device", "copies host memory to a CUDA tensor (fill a static device buffer before replay)");
  Tensor src = x;
  if (!x.is_contiguous()) {
    src = Tensor::empty(x.sizes(), TensorOptions(x.dtype()));
    cpu::copy_into(src, x);
  }
  DeviceGuard guard(target);
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(x.dtype()).with_device(Device::CUDA(target)));
  if (out.nbytes())
    MT_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), src.data_ptr(), out.nbytes(), cudaMemcpyHostToDevice,
                                  current_stream(target)),
                  "to_device");
  if (out.nbytes() && src.is_same(x) && is_pinned(src))
    MT_CUDA_CHECK(cudaStreamSynchronize(current_stream(target)), "to_device");
  return out;
}

// Device -> host: densify on the device, copy, wait (the caller reads the bytes next).
Tensor device_to_host(const Tensor& x) {
  check_not_capturing("to_device", "reads a CUDA tensor on the host");
  int source = x.device().index();
  DeviceGuard guard(source);
  Tensor src = contiguous_on_device(x);
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(x.dtype()));
  cudaStream_t stream = current_stream(source);
  if (out.nbytes()) {
    MT_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), src.data_ptr(), out.nbytes(), cudaMemcpyDeviceToHost, stream),
                  "to_device");
  }
  MT_CUDA_CHECK(cudaStreamSynchronize(stream), "to_device");
  run_deferred_checks(source);  // the host has waited for the device: report what it found
  return out;
}

// Device -> device. Between two devices the copy runs on the source's current stream, fenced
// with events on both sides: it starts after earlier work on the target's stream (which may
// have used the freshly reused block) and the target's stream waits for it to finish.
Tensor device_to_device(const Tensor& x, int target) {
  int source = x.device().index();
  Tensor src;
  {
    DeviceGuard guard(source);
    src = contiguous_on_device(x);
  }
  DeviceGuard guard(target);
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(x.dtype()).with_device(Device::CUDA(target)));
  if (!out.nbytes()) return out;
  if (source == target) {
    MT_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), src.data_ptr(), out.nbytes(), cudaMemcpyDeviceToDevice,
                                  current_stream(target)),
                  "to_device");
    return out;
  }
  cudaStream_t target_stream = current_stream(target);
  Event target_ready;
  target_ready.record(target_stream);
  DeviceGuard on_source(source);
  cudaStream_t source_stream = current_stream(source);
  target_ready.wait(source_stream);
  MT_CUDA_CHECK(cudaMemcpyPeerAsync(out.data_ptr(), target, src.data_ptr(), source, out.nbytes(), source_stream),
                "to_device");
  Event copied;
  copied.record(source_stream);
  copied.wait(target_stream);
  // src (a temporary when x was strided) is freed on the source's stream after the copy was
  // enqueued there: the allocator's stream rule keeps it from being reused too early.
  return out;
}

TensorList to_device_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  int64_t target = call.attrs.get<int64_t>("device");
  if (target >= 0) {
    MT_CHECK(is_available(), "to_device: cannot copy to cuda:", target, ": ", unavailable_reason());
    check_device(static_cast<int>(target), "to_device");
  }
  if (x.device().is_cpu()) {
    MT_CHECK(target >= 0, "to_device: the CUDA kernel was called for a CPU -> CPU copy");
    return {host_to_device(x, static_cast<int>(target))};
  }
  check_device(x.device().index(), "to_device");
  if (target < 0) return {device_to_host(x)};
  return {device_to_device(x, static_cast<int>(target))};
}

const bool kRegistered = register_kernel("to_device", DeviceType::CUDA, to_device_cuda);

}  // namespace
}  // namespace mixtape::cuda
