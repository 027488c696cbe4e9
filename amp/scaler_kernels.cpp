// amp/scaler_kernels.cpp — the two GradScaler ops: definitions, CPU kernels, and the functions
// that call them (layout and semantics in scaler_kernels.h, arithmetic in amp_functors.h).
#include "amp/scaler_kernels.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <type_traits>

#include "amp/amp_functors.h"
#include "amp/scaler_args.h"
#include "autograd/grad_mode.h"
#include "core/convert.h"
#include "core/dispatcher.h"
#include "ops/cast.h"
#include "ops/creation.h"

namespace mixtape::amp {
namespace {

bool is_one_element_f32(const Tensor& t) { return t.defined() && t.dtype() == DType::Float32 && t.numel() == 1; }

}  // namespace

void check_unscale_operands(const OpCall& c) {
  MT_CHECK(c.inputs.size() >= 2, c.name(), ": expected inputs (found_inf, inv_scale, grads...), got ",
           c.inputs.size(), " inputs");
  const Tensor& found_inf = c.inputs[0];
  const Tensor& inv_scale = c.inputs[1];
  MT_CHECK(is_one_element_f32(found_inf) && found_inf.is_contiguous(), c.name(),
           ": found_inf must be a 1-element f32 tensor, got ", found_inf.describe());
  MT_CHECK(is_one_element_f32(inv_scale), c.name(), ": inv_scale must be a 1-element f32 tensor, got ",
           inv_scale.defined() ? inv_scale.describe() : "undefined");
}

void check_unscale_grad(const OpCall& c, size_t i) {
  const Tensor& g = c.inputs[i];
  if (!g.defined()) return;
  MT_CHECK(g.is_floating_point(), c.name(), ": gradient ", i - 2, " must be f16, bf16, f32 or f64, got ",
           g.describe());
  MT_CHECK(g.is_contiguous(), c.name(), ": gradient ", i - 2, " must be contiguous, got ", g.describe(),
           " with strides ", shape_str(g.strides()));
}

void check_update_scale_operands(const OpCall& c) {
  MT_CHECK(c.inputs.size() == 3, c.name(), ": expected inputs (scale, growth_tracker, found_inf), got ",
           c.inputs.size(), " inputs");
  const Tensor& scale = c.inputs[0];
  const Tensor& tracker = c.inputs[1];
  const Tensor& found_inf = c.inputs[2];
  MT_CHECK(is_one_element_f32(scale), c.name(), ": scale must be a 1-element f32 tensor, got ", scale.describe());
  MT_CHECK(tracker.defined() && tracker.dtype() == DType::Int32 && tracker.numel() == 1, c.name(),
           ": growth_tracker must be a 1-element i32 tensor, got ",
           tracker.defined() ? tracker.describe() : "undefined");
  MT_CHECK(is_one_element_f32(found_inf), c.name(), ": found_inf must be a 1-element f32 tensor, got ",
           found_inf.defined() ? found_inf.describe() : "undefined");
  // The kernels take the interval as i32 and test tracker >= interval - 1.
  const int64_t interval = c.attrs.get<int64_t>("growth_interval");
  MT_CHECK(interval >= 1 && interval <= INT32_MAX, c.name(), ": growth_interval must be in [1, 2^31 - 1], got ",
           interval);
}

namespace {

// One contiguous tensor of storage type T through the functor, compute type A. 16-bit grads go
// through the bulk converters in chunks (bit-identical to the scalar conversions).
template <typename A, typename T>
void unscale_span(T* data, int64_t n, const fn::UnscaleAndCheck<A>& f, bool write, bool& found) {
  if constexpr (std::is_same_v<T, A>) {
    for (int64_t i = 0; i < n; ++i) {
      const A out = f(data[i], found);
      if (write) data[i] = out;
    }
  } else {
    constexpr int64_t kChunk = 1024;
    float buf[kChunk];
    for (int64_t base = 0; base < n; base += kChunk) {
      const size_t m = static_cast<size_t>(std::min(kChunk, n - base));
      if constexpr (std::is_same_v<T, Half>)
        convert_half_to_float(data + base, buf, m);
      else
        convert_bfloat16_to_float(data + base, buf, m);
      for (size_t i = 0; i < m; ++i) buf[i] = f(buf[i], found);
      if (!write) continue;
      if constexpr (std::is_same_v<T, Half>)
        convert_float_to_half(buf, data + base, m);
      else
        convert_float_to_bfloat16(buf, data + base, m);
    }
  }
}

// inputs: found_inf, inv_scale, grads...; attr unscale_count.
TensorList foreach_non_finite_check_and_unscale_cpu(const OpCall& c) {
  check_unscale_operands(c);
  const Tensor& found_inf = c.inputs[0];
  const Tensor& inv_scale = c.inputs[1];
  const size_t unscale_count = static_cast<size_t>(c.attrs.get<int64_t>("unscale_count"));
  // Validate every gradient before touching any.
  for (size_t i = 2; i < c.inputs.size(); ++i) check_unscale_grad(c, i);
  const float inv = *static_cast<const float*>(inv_scale.data_ptr());
  const fn::UnscaleAndCheck<float> f32{inv};
  const fn::UnscaleAndCheck<double> f64{static_cast<double>(inv)};
  bool found = false;
  for (size_t i = 2; i < c.inputs.size(); ++i) {
    const Tensor& g = c.inputs[i];
    if (!g.defined()) continue;
    const bool write = i - 2 < unscale_count;
    const int64_t n = g.numel();
    switch (g.dtype()) {
      case DType::Float32: unscale_span(static_cast<float*>(g.data_ptr()), n, f32, write, found); break;
      case DType::Float64: unscale_span(static_cast<double*>(g.data_ptr()), n, f64, write, found); break;
      case DType::Float16: unscale_span(static_cast<Half*>(g.data_ptr()), n, f32, write, found); break;
      default: unscale_span(static_cast<BFloat16*>(g.data_ptr()), n, f32, write, found); break;
    }
  }
  if (found) *static_cast<float*>(found_inf.data_ptr()) = 1.0f;
  return {found_inf};
}

// inputs: scale, growth_tracker, found_inf; attrs growth_factor, backoff_factor, growth_interval.
TensorList update_scale_cpu(const OpCall& c) {
  check_update_scale_operands(c);
  const Tensor& scale = c.inputs[0];
  const Tensor& tracker = c.inputs[1];
  const Tensor& found_inf = c.inputs[2];
  const int64_t interval = c.attrs.get<int64_t>("growth_interval");
  fn::update_scale(*static_cast<float*>(scale.data_ptr()), *static_cast<int32_t*>(tracker.data_ptr()),
                   *static_cast<const float*>(found_inf.data_ptr()), c.attrs.get<double>("growth_factor"),
                   c.attrs.get<double>("backoff_factor"), static_cast<int32_t>(interval));
  return {scale};
}

// Samples: gradients of the sample's dtype (of several lengths; the third only checked, not
// unscaled: unscale_count 2), a 1-element f32 found_inf and inv_scale made on their device.
Tensor f32_scalar(float v, Device d) { return to_device(full({1}, v, TensorOptions(DType::Float32)), d); }
TensorList check_and_unscale_sample(const TensorList& x) {
  std::vector<Tensor> grads;
  for (const Tensor& g : x) grads.push_back(g.detach().clone());
  const Device d = x[0].device();
  Tensor found_inf = f32_scalar(0, d);
  non_finite_check_and_unscale_(grads, found_inf, f32_scalar(1.0f / 1024.0f, d), 2);
  TensorList out(grads.begin(), grads.end());
  out.push_back(found_inf);
  return out;
}
const OpSchema& kCheckAndUnscale =
    define_op("_amp_foreach_non_finite_check_and_unscale_")
        .in_place()
        .kernel(DeviceType::CPU, foreach_non_finite_check_and_unscale_cpu)
        .sample("finite", {arg({1500}, -3000, 3000), arg({7}, -3000, 3000), arg({300}, -3000, 3000)},
                check_and_unscale_sample, no_gradcheck())
        .sample("inf-in-check-only-grad", {arg({1500}, -3000, 3000), arg({7}), values_arg({3}, {1.0, INFINITY, -2.0})},
                check_and_unscale_sample, no_gradcheck())
        .sample("nan", {arg({1500}, -3000, 3000), values_arg({3}, {1.0, NAN, -2.0})}, check_and_unscale_sample,
                no_gradcheck());
// Growth interval 3 over a run of found_inf flags that grows, backs off (inf and NaN) and resets.
const OpSchema& kUpdateScale = define_op("_amp_update_scale_")
                                   .in_place()
                                   .kernel(DeviceType::CPU, update_scale_cpu)
                                   .sample("growth-and-backoff", {arg({1})},
                                           [](const TensorList& x) {
                                             const Device d = x[0].device();
                                             Tensor scale = f32_scalar(65536.0f, d);
                                             Tensor tracker = to_device(zeros({1}, TensorOptions(DType::Int32)), d);
                                             TensorList out;
                                             for (float f : {0.f, 0.f, 0.f, 1.f, 0.f, NAN, 0.f, 0.f, 0.f, INFINITY}) {
                                               update_scale_(scale, tracker, f32_scalar(f, d), 2.0, 0.5, 3);
                                               out.push_back(scale.clone());
                                               out.push_back(tracker.clone());
                                             }
                                             return out;
                                           },
                                           no_gradcheck());

}  // namespace

void non_finite_check_and_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                   const Tensor& inv_scale, size_t unscale_count) {
  MT_CHECK(is_one_element_f32(found_inf), "_amp_foreach_non_finite_check_and_unscale_: found_inf must be a ",
           "1-element f32 tensor, got ", found_inf.defined() ? found_inf.describe() : "undefined");
  MT_CHECK(unscale_count <= grads.size(), "_amp_foreach_non_finite_check_and_unscale_: unscale_count ",
           unscale_count, " exceeds the number of gradients ", grads.size());
  autograd::NoGradGuard no_grad;
  // The kernel wants contiguous memory; a strided grad is processed as a copy and written back.
  TensorList inputs{found_inf, inv_scale};
  std::vector<std::pair<Tensor, Tensor>> write_back;  // (original, contiguous copy)
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (g.defined() && !g.is_contiguous()) {
      Tensor copy = contiguous(g);
      if (i < unscale_count) write_back.emplace_back(g, copy);
      inputs.push_back(copy);
    } else {
      inputs.push_back(g);
    }
  }
  dispatch(kCheckAndUnscale, std::move(inputs), {{"unscale_count", static_cast<int64_t>(unscale_count)}});
  for (size_t i = 0; i < std::min(unscale_count, grads.size()); ++i)
    if (grads[i].defined() && grads[i].is_contiguous()) grads[i].bump_version();  // written in place
  for (auto& [orig, copy] : write_back) {
    Tensor dst = orig;
    copy_(dst, copy);
  }
}

Tensor update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                     double growth_factor, double backoff_factor, int64_t growth_interval) {
  MT_CHECK(is_one_element_f32(scale) && scale.is_contiguous(), "_amp_update_scale_: scale must be a contiguous "
           "1-element f32 tensor, got ", scale.defined() ? scale.describe() : "undefined");
  MT_CHECK(growth_interval >= 1 && growth_interval <= INT32_MAX, "_amp_update_scale_: growth_interval must be in ",
           "[1, 2^31 - 1], got ", growth_interval);
  autograd::NoGradGuard no_grad;
  dispatch(kUpdateScale, {scale, growth_tracker, found_inf},
           {{"growth_factor", growth_factor},
            {"backoff_factor", backoff_factor},
            {"growth_interval", growth_interval}});
  growth_tracker.bump_version();  // the dispatcher bumps input 0 (scale) only
  return scale;
}

}  // namespace mixtape::amp
