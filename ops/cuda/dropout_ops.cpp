// ops/cuda/dropout_ops.cpp — dropout on CUDA: ops/dropout.cpp's Philox stream layout, element i
// from word i, so CUDA and CPU drop the same elements for the same generator state. During a CUDA
// graph capture the kernel reads the seed and the base offset from the graph's Philox slot, which
// each replay advances (core/cuda/graph.h), so a graphed run draws the eager run's masks.
#include "core/cuda/graph.h"
#include "ops/cuda/tensor_iter.h"

namespace mixtape::cuda {
namespace {

// dropout(x; p, seed, offset, default_generator) -> (out, mask).
TensorList dropout_cuda(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const double p = c.attrs.get<double>("p");
  MT_CHECK(is_floating(x.dtype()), c.name(), ": expected a floating input (f16, bf16, f32, f64), got ", x.describe());
  MT_CHECK(p >= 0.0 && p <= 1.0, c.name(), ": probability has to be between 0 and 1, got p=", p);
  auto seed = static_cast<uint64_t>(c.attrs.get<int64_t>("seed"));
  auto offset = static_cast<uint64_t>(c.attrs.get<int64_t>("offset"));
  const uint64_t* state = nullptr;
  if (is_capturing() && p < 1.0) {
    if (c.attrs.get<int64_t>("default_generator") == 0)
      check_not_capturing(c.name(), "draws random numbers from a Generator of its own (only the default generator's "
                                    "draws advance per replay; its seed and offset would be fixed in the graph)");
    const CapturedPhilox captured = captured_philox(c.name(), seed, offset);
    state = captured.state;
    offset = captured.offset_in_graph;
  }
  DeviceGuard guard(x.device().index());
  const Tensor xc = dense(x, c.name());
  Tensor out = empty_on(x.sizes(), x.dtype(), x.device());
  Tensor mask = empty_on(x.sizes(), DType::Bool, x.device());
  MT_CUDA_CHECK(launch_dropout(x.dtype(), xc.data_ptr(), out.data_ptr(), static_cast<bool*>(mask.data_ptr()), x.numel(),
                               p, seed, offset, state, current_stream()),
                c.name());
  return {out, mask};
}

const bool kRegistered = register_kernel("dropout", DeviceType::CUDA, dropout_cuda);

}  // namespace
}  // namespace mixtape::cuda
