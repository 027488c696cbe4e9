// optim/optim_functors.h — the per-element arithmetic of every optimizer update, written once
// (MIXTAPE_HD) and run by the CPU loop (optim/step_kernel.h) and the CUDA kernels
// (optim/cuda/step_kernels.cu: SGDUpdate, AdamUpdate, unscale, round_stochastic).
//
// Invariant: each functor performs exactly the IEEE operations, in exactly the order, that
// PyTorch 1.13's single-tensor optimizers perform (torch/optim/sgd.py, adam.py, adamw.py), so an
// f32 or f64 run is bit-identical to torch's CPU run. Two facts about torch's CPU kernels (AVX2
// build, measured with tests/fixtures/gen_optim.py's Debian torch) fix the rounding:
//   x.add(y, alpha=a)            == fma(a, y, x)        (one rounding: vec::fmadd)
//   x.addcmul_(y, z, value=v)    == fma(v * y, z, x)    (v * y rounded, then one fused rounding)
//   x.addcdiv_(y, z, value=v)    == x + (v * y) / z     (three roundings, left to right)
//   x.mul_(s), x / s, sqrt(x)    one rounding each, s rounded to the tensor's dtype first
// so fused multiply-adds are spelled out with madd() (std::fma on the host, the fma instruction on
// a GPU): the result then never depends on whether a compiler contracts a * b + c.
// Hyperparameters are rounded to the compute type A once, as torch rounds a Python float scalar
// to the tensor's dtype (float(-lr) for an f32 tensor); bias corrections are computed on the host
// in double exactly as Python does (1 - beta ** step, math.sqrt).
//
// A is the compute type: float for f32 and 16-bit parameters (whose FP32 master is what is
// updated), double for f64 parameters.
// C++17-clean: CUDA translation units include this header.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/bfloat16.h"
#include "core/half.h"
#include "core/macros.h"
#include "core/rng.h"

namespace mixtape::optim::fn {

// a * b + c with one rounding.
MIXTAPE_INLINE float madd(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
MIXTAPE_INLINE double madd(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// SGD (torch/optim/sgd.py, _single_tensor_sgd), per element:
//   d = g + wd * w                      if weight_decay != 0
//   b = d                               on the step that creates the momentum buffer
//   b = b * momentum + (1 - dampening) * d   afterwards
//   d = d + momentum * b  (nesterov)  or  d = b
//   w = w - lr * d
template <typename A>
struct SGDUpdate {
  A neg_lr, weight_decay, momentum, one_minus_dampening;
  bool use_weight_decay, use_momentum, nesterov, first;  // first: the buffer is being created

  MIXTAPE_HD static SGDUpdate make(double lr, double momentum, double dampening, double weight_decay, bool nesterov,
                                   bool first) {
    SGDUpdate u;
    u.neg_lr = A(-lr);
    u.weight_decay = A(weight_decay);
    u.momentum = A(momentum);
    u.one_minus_dampening = A(1.0 - dampening);
    u.use_weight_decay = weight_decay != 0.0;
    u.use_momentum = momentum != 0.0;
    u.nesterov = nesterov;
    u.first = first;
    return u;
  }

  // w: the master value, g: the (unscaled) gradient, buf: the momentum buffer (unused without momentum).
  MIXTAPE_INLINE void operator()(A& w, A g, A& buf) const {
    A d = g;
    if (use_weight_decay) d = madd(weight_decay, w, d);                    // d_p.add(param, alpha=wd)
    if (use_momentum) {
      buf = first ? d : madd(one_minus_dampening, d, buf * momentum);     // buf.mul_(m).add_(d_p, alpha=1-damp)
      d = nesterov ? madd(momentum, buf, d) : buf;                        // d_p.add(buf, alpha=m) or buf
    }
    w = madd(neg_lr, d, w);                                                // param.add_(d_p, alpha=-lr)
  }
};

// Adam / AdamW (torch/optim/adam.py, adamw.py, the non-capturable branch), per element, at
// step t (1 for the first update):
//   AdamW: w = w * (1 - lr * wd)               Adam: g = g + wd * w   (if wd != 0)
//   m = m * beta1 + (1 - beta1) * g
//   v = v * beta2 + ((1 - beta2) * g) * g
//   vmax = max(vmax, v)                         (amsgrad; NaN propagates like torch.maximum)
//   denom = sqrt(amsgrad ? vmax : v) / sqrt(1 - beta2^t) + eps     (eps outside the sqrt)
//   w = w + (-(lr / (1 - beta1^t)) * m) / denom
// neg_step_size and bias_correction2_sqrt are the only fields that depend on t: a multi-tensor
// CUDA launch shares one functor and sets those two per tensor (optim/cuda/step_kernels.cu).
template <typename A>
struct AdamUpdate {
  A beta1, one_minus_beta1, beta2, one_minus_beta2, weight_decay, decay_factor, neg_step_size,
      bias_correction2_sqrt, eps;
  bool decoupled, use_weight_decay, amsgrad;

  // Host and device: a capturable step (optim/step_kernel.h) makes it on the device from the
  // device's lr and count.
  MIXTAPE_HD static AdamUpdate make(double lr, double beta1, double beta2, double eps, double weight_decay, bool amsgrad,
                                    bool decoupled, int64_t step) {
    // Python: bias_correction1 = 1 - beta1 ** step (step is a float holding an integer).
    const double t = static_cast<double>(step);
    const double bias_correction1 = 1.0 - std::pow(beta1, t);
    const double bias_correction2 = 1.0 - std::pow(beta2, t);
    AdamUpdate u;
    u.beta1 = A(beta1);
    u.one_minus_beta1 = A(1.0 - beta1);
    u.beta2 = A(beta2);
    u.one_minus_beta2 = A(1.0 - beta2);
    u.weight_decay = A(weight_decay);
    u.decay_factor = A(1.0 - lr * weight_decay);
    u.neg_step_size = A(-(lr / bias_correction1));
    u.bias_correction2_sqrt = A(std::sqrt(bias_correction2));
    u.eps = A(eps);
    u.decoupled = decoupled;
    u.use_weight_decay = weight_decay != 0.0;
    u.amsgrad = amsgrad;
    return u;
  }

  // vmax is only touched with amsgrad.
  MIXTAPE_INLINE void operator()(A& w, A g, A& m, A& v, A& vmax) const {
    if (decoupled)
      w = w * decay_factor;                                      // param.mul_(1 - lr * wd)
    else if (use_weight_decay)
      g = madd(weight_decay, w, g);                              // grad.add(param, alpha=wd)
    m = madd(one_minus_beta1, g, m * beta1);                     // exp_avg.mul_(b1).add_(g, alpha=1-b1)
    v = madd(one_minus_beta2 * g, g, v * beta2);                 // exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
    A second = v;
    if (amsgrad) {
      if (v > vmax || v != v) vmax = v;                          // torch.maximum: NaN wins
      second = vmax;
    }
    A denom = std::sqrt(second) / bias_correction2_sqrt + eps;   // (v.sqrt() / bc2_sqrt).add_(eps)
    w = w + (neg_step_size * m) / denom;                         // param.addcdiv_(m, denom, value=-step_size)
  }
};

// ---- writing the master back into a 16-bit parameter ----

// Round to nearest, ties to even: the default write-back (model = RNE(master), bit-exact).
template <typename T16>
MIXTAPE_HD T16 round_nearest(float x) {
  return T16(x);
}

// Stochastic rounding (llm.c's option): x goes to one of its two 16-bit neighbours, the one
// farther away with probability |x - near| / gap, so E[result] = x. `u` is uniform in [0, 1)
// (24 random bits). Exact values, NaN and +-inf are returned as RNE returns them; beyond the
// largest finite value the "next" neighbour is infinity at one more ulp of distance.
template <typename T16>
MIXTAPE_HD T16 round_stochastic(float x, float u) {
  const T16 r(x);
  const float rf = float(r);
  if (rf == x || x != x) return r;
  const uint16_t sign = static_cast<uint16_t>(r.bits & 0x8000u);
  const uint16_t mag = static_cast<uint16_t>(r.bits & 0x7FFFu);
  const float ax = std::fabs(x);
  // Magnitude bit patterns of the 16-bit formats are ordered like their values.
  const uint16_t lo = std::fabs(rf) > ax ? static_cast<uint16_t>(mag - 1u) : mag;
  const uint16_t hi = static_cast<uint16_t>(lo + 1u);
  const float flo = float(T16::from_bits(lo));
  float gap = float(T16::from_bits(hi)) - flo;
  if (!(gap < INFINITY)) gap = flo - float(T16::from_bits(static_cast<uint16_t>(lo - 1u)));  // hi is inf
  const float frac = (ax - flo) / gap;
  const uint16_t pick = frac >= 1.0f ? hi : (u < frac ? hi : lo);
  return T16::from_bits(static_cast<uint16_t>(sign | pick));
}

// The uniform draw for element i of a write-back whose random stream is (seed, offset).
MIXTAPE_HD inline float rounding_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  return uniform_from_bits(philox_word(seed, offset, i));
}

// The scaler's unscale at the copy: a 16-bit (or f32) gradient value, widened exactly to float,
// times the inverse scale in one float multiply (docs/AMP.md#the-inverse-scale).
MIXTAPE_HD inline float unscale(float g, float inv_scale) { return inv_scale == 1.0f ? g : g * inv_scale; }

}  // namespace mixtape::optim::fn
