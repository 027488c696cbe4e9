// optim/step_kernel.h — the CPU loop every fused optimizer kernel shares (sgd_step_, adam_step_
// and their multi-tensor forms sgd_step_multi_, adam_step_multi_), and their operand checks.
//
// A fused step op's inputs are, in this order (shapes all equal, every tensor contiguous):
//   0  w       the tensor the update is applied to, written: an FP32 master, or an f32/f64 param
//              that is its own master. Its dtype W (float or double) is the compute type.
//   1  grad    the gradient, read: dtype W, or (W = float) a 16-bit gradient that is widened to
//              float and multiplied by attr "inv_scale" on the way in (the GradScaler's unscale at
//              the copy, optim_functors.h fn::unscale)
//   2  model   the 16-bit parameter that receives round(w) after the update, written; undefined
//              when w is the parameter itself
//   3… state   optimizer buffers (momentum, Adam moments), dtype W, written
// Attrs common to every fused step: inv_scale (a double holding the float inverse loss scale,
// docs/AMP.md#the-inverse-scale; 1 = none), stochastic (bool), seed, offset (int64, the Philox
// stream of stochastic rounding).
// The dispatcher bumps input 0's version; Optimizer::run_fused_step bumps model and state.
//
// A multi-tensor step op takes the same operands for n >= 1 tensors as 3 + NS lists of n inputs,
// one list after another (list-major):
//   w_0 … w_{n-1}, grad_0 … grad_{n-1}, model_0 … model_{n-1}, state0_0 … state0_{n-1}, …
// each tensor checked as above, and besides: the models all defined or all undefined, and one w
// dtype, one grad dtype and one model dtype for the whole call (one kernel runs every tensor:
// a caller groups tensors by dtypes, as Optimizer::step does); one device (the dispatcher's check).
// Attrs: count (int64, n: the length of every list), inv_scale and stochastic shared; seed and
// offset are lists (IntList) with one entry per tensor, and so are the op's own per-tensor attrs
// (sgd: first, adam: step). Tensor k's update is exactly the single op's on tensor k's operands
// with the k-th entries (same bits). Every tensor is checked before the first is written.
// The dispatcher bumps w_0's version; Optimizer::run_fused_step_multi bumps the others.
//
// Capturable form (attr capturable = true, either op form): after the lists come 3 + n more
// inputs, n = 1 for a single-tensor op, count for a multi-tensor one:
//   found_inf  1-element f32 or undefined: non-zero = skip (nothing at all is written)
//   inv_scale  1-element f32 or undefined: replaces attr inv_scale (the unscale of 16-bit grads)
//   lr         1-element f64: replaces attr lr
//   step_k     1-element i64 per tensor: updates applied so far; this update is number step_k + 1
//              (Adam's bias corrections; SGD's first is step_k == 0, replacing attr first/step),
//              and step_k advances by one unless skipped
// all on the tensors' device and read there, so a step neither reads nor decides anything on the
// host (docs/CUDA.md, "A step with no host sync"). Same bits as the plain form given the same values.
//
// Invariant: one pass over memory (in chunks that stay in cache); each element's master value is
// updated in place and the model copy is rounded from it, so model == round(master) after every step.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/convert.h"
#include "core/dispatcher.h"
#include "optim/optim_functors.h"

namespace mixtape::optim::detail {

// One tensor's operands of a fused step, checked: what the loop below (and the CUDA glue) reads.
struct FusedOperands {
  Tensor w, grad, model;        // model undefined when w is the parameter itself
  std::array<Tensor, 3> state;  // the first num_state are defined
  int64_t n = 0;                // elements
  float inv_scale = 1.0f;
  bool stochastic = false;
  uint64_t seed = 0, offset = 0;
};

// The capturable operands (layout above), checked: pointers valid on the tensors' device.
struct DeviceScalars {
  const float* found_inf = nullptr;  // null: never skip
  const float* inv_scale = nullptr;  // null: attr inv_scale
  const double* lr = nullptr;
  std::vector<int64_t*> step;        // one per tensor
};
// Whether the call is capturable; if so, its device scalars (checked: dtypes, one element, the
// device of input 0). `lists_end` is where the lists end (3 + num_state for a single op, (3 +
// num_state) * count for a multi one); `count` the tensors.
bool capturable(const OpCall& call);
DeviceScalars device_scalars(const OpCall& call, size_t lists_end, size_t count);
// The number of inputs before the capturable operands (all of them when not capturable).
size_t list_inputs(const OpCall& call, size_t count);

// A single-tensor step's operands (layout above), checked; errors name the op.
FusedOperands fused_operands(const OpCall& call, size_t num_state);
// A multi-tensor step's operands, one per tensor (layout above), all checked before any is
// returned; errors name the op, the tensor's index and list, what was expected and what came.
std::vector<FusedOperands> fused_operands_multi(const OpCall& call, size_t num_state);
// A multi-tensor op's per-tensor attr `name`: an IntList with exactly `count` entries (error otherwise).
const IntList& per_tensor_attr(const OpCall& call, const char* name, size_t count);

// The body of a fused step's sample (core/op_sample.h): from the sample's inputs in its dtype
// (x[0] the parameter, x[1] its gradient, x[2]... the state) it makes the operands an optimizer
// would pass — a 16-bit dtype gets an FP32 master (the parameter widened), a gradient scaled by 512
// and inv_scale 1/512, with stochastic rounding when `stochastic`; f32/f64 update the parameter
// itself — runs `op` on them with `attrs` and returns what it wrote: w, the model copy, the state.
TensorList run_step_sample(const OpSchema& op, const TensorList& x, Attrs attrs, bool stochastic);
// The same for a multi-tensor op: x holds `per_tensor` arguments (parameter, gradient, state...)
// for each tensor, one tensor after another; each tensor's operands are made as above, tensor k
// rounding stochastically (when `stochastic`) from offset 7 + 4096 k. `attrs` carries the op's
// own per-tensor lists. Returns every w, then every model copy, then the state, list by list.
TensorList run_multi_step_sample(const OpSchema& op, const TensorList& x, size_t per_tensor, Attrs attrs,
                                 bool stochastic);

// True when the CPU has fused multiply-add in hardware. The element loop then runs inside a
// function compiled for it, where fn::madd's std::fma is one instruction instead of a libm call.
// Both give the same bits (fma is exactly rounded): this is speed only. (core/convert.cpp picks
// its F16C loops the same way.)
bool cpu_has_fma();
// Test knob: true makes the loops take the portable path (std::fma through libm) even where the
// CPU has FMA, so a test can show both paths give the same bits. Process-wide, thread-safe.
void set_force_portable_loop(bool force);
bool force_portable_loop();
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define MIXTAPE_OPTIM_FMA_DISPATCH 1
template <typename F>
__attribute__((target("fma"))) void run_with_fma(const F& f) {
  f();
}
#endif

// Calls update(w[i], g, state, i) for every element i of one tensor's operands, with g the gradient loaded as W (a 16-bit
// one widened exactly and unscaled), then writes model[i] = round(w[i]). Update is
// (W& w, W g, std::array<W*, NS>& state, int64_t i) and should be always_inline, so that it is
// compiled into the FMA loop. 16-bit grads and model copies move through core/convert.h's bulk
// converters in chunks (bit-identical to the scalar conversions, F16C where the CPU has it).
template <typename W, size_t NS, typename Update>
void fused_step_loop(const FusedOperands& op, Update&& update) {
  const int64_t n = op.n;
  const Tensor& w = op.w;
  const Tensor& grad = op.grad;
  const Tensor& model = op.model;
  W* wp = static_cast<W*>(w.data_ptr());
  std::array<W*, NS> state{};
  for (size_t k = 0; k < NS; ++k) state[k] = static_cast<W*>(op.state[k].data_ptr());
  const float inv_scale = op.inv_scale;
  const bool stochastic = op.stochastic;
  const uint64_t seed = op.seed;
  const uint64_t offset = op.offset;
  const DType gt = grad.dtype(), mt = model.defined() ? model.dtype() : w.dtype();
  const bool wide_grad = gt == w.dtype();  // f32/f64 grads arrive unscaled (the scaler unscales them in place)
  constexpr int64_t kChunk = 1024;

  auto loop = [&]() __attribute__((always_inline)) {
    W gbuf[kChunk];
    for (int64_t base = 0; base < n; base += kChunk) {
      const int64_t m = n - base < kChunk ? n - base : kChunk;
      const W* g = gbuf;
      if (wide_grad) {
        g = static_cast<const W*>(grad.data_ptr()) + base;
      } else if constexpr (std::is_same_v<W, float>) {  // a 16-bit grad: widen exactly, unscale at the copy
        if (gt == DType::Float16)
          convert_half_to_float(static_cast<const Half*>(grad.data_ptr()) + base, gbuf, static_cast<size_t>(m));
        else
          convert_bfloat16_to_float(static_cast<const BFloat16*>(grad.data_ptr()) + base, gbuf, static_cast<size_t>(m));
        for (int64_t j = 0; j < m; ++j) gbuf[j] = fn::unscale(gbuf[j], inv_scale);
      }
      for (int64_t j = 0; j < m; ++j) update(wp[base + j], g[j], state, base + j);
      if constexpr (std::is_same_v<W, float>) {
        if (!model.defined()) continue;
        if (mt == DType::Float16) {
          Half* mp = static_cast<Half*>(model.data_ptr()) + base;
          if (stochastic)
            for (int64_t j = 0; j < m; ++j)
              mp[j] = fn::round_stochastic<Half>(wp[base + j], fn::rounding_uniform(seed, offset, uint64_t(base + j)));
          else
            convert_float_to_half(wp + base, mp, static_cast<size_t>(m));  // RNE, as fn::round_nearest
        } else {
          BFloat16* mp = static_cast<BFloat16*>(model.data_ptr()) + base;
          if (stochastic)
            for (int64_t j = 0; j < m; ++j)
              mp[j] = fn::round_stochastic<BFloat16>(wp[base + j],
                                                     fn::rounding_uniform(seed, offset, uint64_t(base + j)));
          else
            convert_float_to_bfloat16(wp + base, mp, static_cast<size_t>(m));
        }
      }
    }
  };
#if defined(MIXTAPE_OPTIM_FMA_DISPATCH)
  if (cpu_has_fma() && !force_portable_loop()) {
    run_with_fma(loop);
    return;
  }
#endif
  loop();
}

}  // namespace mixtape::optim::detail
