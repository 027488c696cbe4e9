// amp/amp_functors.h — the arithmetic of dynamic loss scaling, written once (MIXTAPE_HD, as
// ops/functors.h) and run by the CPU kernels (amp/scaler_kernels.cpp), the CUDA kernels
// (amp/cuda/scaler_kernels.cu) and, for update_scale, the GradScaler's host copy of the scale
// (amp/grad_scaler.cpp). docs/AMP.md, "The kernels on the CPU and on CUDA".
//
// Two pieces, PyTorch's two AMP kernels (aten/src/ATen/native/cuda/AmpKernels.cu):
//   UnscaleAndCheck  per gradient element: flag a non-finite value, multiply by 1/S
//                    (_amp_foreach_non_finite_check_and_unscale_)
//   update_scale     once per iteration: back off on overflow, grow after growth_interval
//                    clean iterations (_amp_update_scale_)
// Invariant: the same IEEE operations in the same order as PyTorch's kernels, so a scale
// trajectory and every unscaled gradient are bit-identical to torch's, except where
// update_scale's three deliberate differences (below) apply.
// C++17-clean: CUDA translation units include this header.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/macros.h"

namespace mixtape::amp::fn {

template <typename A>
MIXTAPE_INLINE bool is_finite(A x) {
#if defined(__CUDA_ARCH__)
  return ::isfinite(x);  // qualified: mixtape::isfinite(Half/BFloat16) would hide CUDA's overloads
#else
  return std::isfinite(x);
#endif
}

// One gradient element g (widened exactly to its compute type A: float for f32/f16/bf16
// storage, double for f64) -> g * inv_scale, and whether this element makes the step unsafe.
//
//   found |= !finite(g)                 PyTorch: the check is on the incoming, still-scaled value;
//   out    = g * inv_scale              multiplied even when g is inf/NaN (harmless: the step is
//                                       skipped), and skipped when inv_scale == 1 (same bits)
//   found |= !finite(out)               mixtape's addition (b), pytorch#99640: with S < 1,
//                                       inv_scale > 1 and a finite g can overflow here. With S >= 1
//                                       |out| <= |g|, so this never fires and the rule is PyTorch's.
// inv_scale: the inverse scale (docs/AMP.md#the-inverse-scale); for f64 grads the float widened to
// double (A = double), as torch's opmath does.
template <typename A>
struct UnscaleAndCheck {
  A inv_scale;

  MIXTAPE_INLINE A operator()(A g, bool& found) const {
    if (!is_finite(g)) found = true;
    if (inv_scale == A(1)) return g;
    const A out = g * inv_scale;
    if (!is_finite(out)) found = true;
    return out;
  }
};

// PyTorch's _amp_update_scale_ (the CPU and CUDA kernels agree), in place on the 1-element
// scale (f32) and growth tracker (i32):
//   found_inf != 0 (inf and NaN count):  scale = max(float(scale * backoff_factor), kMinScale);
//                                        tracker = 0
//   otherwise, successful = tracker + 1:
//     successful >= growth_interval:     grown = float(scale * growth_factor);
//                                        scale = grown only if grown is finite (pytorch#98828:
//                                        never grow to inf); tracker = 0
//     else:                              tracker = successful
// The factors are doubles, the products are formed in double and narrowed to float once.
// Three deliberate differences (docs/AMP.md, "The scale's range" and "One iteration"):
// * PyTorch tests successful == growth_interval, so a tracker left above a lowered interval
//   (set_growth_interval(3) at tracker 5) never grows again until an overflow resets it; here it
//   grows on the next clean iteration. Whenever the tracker is below the interval -- always,
//   unless the interval was lowered -- the two agree bit for bit.
// * The test is written tracker >= growth_interval - 1, so a tracker of INT32_MAX (a loaded
//   state, or the op called directly) grows instead of overflowing int32 (UB; PyTorch's tracker
//   wraps negative). growth_interval >= 1, so growth_interval - 1 cannot overflow either.
// * Backoff stops at kMinScale = 2^-126, the smallest normal float, where PyTorch goes on to
//   subnormals and 0 (after which every step is skipped). Below 2^-128, 1/S overflows float;
//   GradScaler reports a backoff that reaches the floor as a collapse.
constexpr float kMinScale = 0x1p-126f;  // FLT_MIN, the smallest normal float

MIXTAPE_INLINE void update_scale(float& scale, int32_t& growth_tracker, float found_inf, double growth_factor,
                                 double backoff_factor, int32_t growth_interval) {
  if (found_inf != 0.0f) {  // NaN != 0 is true: a NaN flag also backs off
    const float backed_off = static_cast<float>(static_cast<double>(scale) * backoff_factor);
    scale = backed_off >= kMinScale ? backed_off : kMinScale;
    growth_tracker = 0;
    return;
  }
  if (growth_tracker >= growth_interval - 1) {  // successful = tracker + 1 >= interval, without overflow
    const float grown = static_cast<float>(static_cast<double>(scale) * growth_factor);
    if (is_finite(grown)) scale = grown;
    growth_tracker = 0;
  } else {
    growth_tracker = growth_tracker + 1;
  }
}

}  // namespace mixtape::amp::fn
