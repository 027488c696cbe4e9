// amp/fp8_autocast.h — amp::Fp8Autocast, the FP8 training region (Transformer Engine's
// fp8_autocast). Inside it, on the CPU, linear, 2-D matmul and conv2d (groups 1) run their
// forward GEMM and both backward GEMMs (input gradient, weight gradient) on FP8 operands cast
// with the recipe's scales (E4M3 forward; the output gradient E5M2 under HYBRID), accumulate in
// FP32 and return `output_dtype`; every other op follows BF16 autocast (the region opens an
// AutocastGuard(CPU, BFloat16) too). The rules and one step through the code: docs/FP8.md.
//
//   amp::Fp8Metas metas(amp::DelayedScaling{}, model.named_parameters());
//   for (...) {
//     Tensor loss;
//     { amp::Fp8Autocast fp8(amp::DelayedScaling{}, &metas);  // updates metas' scales first
//       loss = cross_entropy(model.forward(x), y); }
//     loss.backward();   // the output gradients' amaxes are recorded here
//     opt.step();
//   }
//
// Invariant: the region's FP8 settings are thread-local and restored on exit (exceptions too);
// a GEMM it runs in FP8 is recorded as one tape node whose backward quantizes the gradient with
// the same recipe (the casts are straight-through: d(quantize)/dx = 1).
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "amp/autocast.h"
#include "amp/fp8_meta.h"
#include "amp/fp8_recipe.h"
#include "core/dispatcher.h"

namespace mixtape::amp {

struct Fp8AutocastOptions {
  DType output_dtype = DType::BFloat16;  // of the FP8 GEMMs' results: BFloat16 or Float32
  // Delayed scaling: called with the amaxes to all-reduce (max) before the scale update, as TE
  // does under data parallelism (amp/fp8_meta.h, AmaxReducer).
  AmaxReducer amax_reducer;
  // Delayed scaling: update the scales when the region opens (once per step). Pass false for
  // the second and later micro-batches of one accumulated step, so they use the same scales,
  // and for evaluation, which would otherwise roll the histories once per batch. A region
  // opened inside a checkpointed segment's recompute never updates (nor records amaxes): its
  // forward did.
  bool update_scales = true;
};

namespace detail {
struct Fp8RegionSettings {
  Fp8Recipe recipe;
  Fp8Metas* metas = nullptr;
  DType output_dtype = DType::BFloat16;
  // Whether the casts record their amaxes in the metas: not in a checkpoint's recompute, whose
  // casts repeat the forward's (Transformer Engine's recompute phase records nothing either).
  bool record_amaxes = true;
  // A checkpoint's recompute only: the scales the forward cast with, 3 per meta (by role, metas
  // in order), so the recompute casts as the forward did even if the metas were updated since.
  std::shared_ptr<const std::vector<float>> forward_scales;
  // The same for metas on a CUDA device, kept there (no host read): the metas' scale and
  // scale_inv tensors concatenated, f32 (3 * metas) each.
  Tensor forward_scales_device, forward_scale_invs_device;
  // The tensors whose GEMMs run in FP8: CPU or CUDA (the region's device type).
  DeviceType device_type = DeviceType::CPU;
};
}  // namespace detail

class Fp8Autocast {
 public:
  // DelayedScaling needs the model's metas (made with an equal recipe, on the device of the
  // region's tensors); the other recipes take none (nullptr). device_type: CPU or CUDA (a build
  // with CUDA; every recipe runs there, MXFP8 widened to BF16).
  explicit Fp8Autocast(const Fp8Recipe& recipe, Fp8Metas* metas = nullptr, Fp8AutocastOptions options = {},
                       DeviceType device_type = DeviceType::CPU);
  ~Fp8Autocast();
  Fp8Autocast(const Fp8Autocast&) = delete;
  Fp8Autocast& operator=(const Fp8Autocast&) = delete;

 private:
  const detail::Fp8RegionSettings* prev_;
  std::unique_ptr<detail::Fp8RegionSettings> settings_;
  std::optional<AutocastGuard> bf16_;
};

bool is_fp8_autocast_enabled();

namespace detail {
const Fp8RegionSettings* fp8_region();  // this thread's open region, or nullptr
// Called by the Autocast layer first: runs linear / 2-D matmul / conv2d in FP8 when a region is
// open and returns its outputs; nullopt lets BF16 autocast handle the call (amp/fp8_ops.cpp).
std::optional<TensorList> fp8_dispatch(const OpSchema& op, OpCall& call);

// For autograd::checkpoint (amp/checkpoint_region.cpp). capture: this thread's region as a
// checkpointed segment's forward sees it, with the scales it casts with now (nullptr: none).
// Fp8RecomputeRegion installs a capture (nullptr: no FP8 region, even inside an open one) for
// the recompute, amaxes not recorded, and restores the thread's region on exit. A capture keeps
// a pointer to the region's Fp8Metas: they must outlive the segment's backward.
std::shared_ptr<const Fp8RegionSettings> capture_fp8_region();
class Fp8RecomputeRegion {
 public:
  explicit Fp8RecomputeRegion(std::shared_ptr<const Fp8RegionSettings> forward);
  ~Fp8RecomputeRegion();
  Fp8RecomputeRegion(const Fp8RecomputeRegion&) = delete;
  Fp8RecomputeRegion& operator=(const Fp8RecomputeRegion&) = delete;

 private:
  const Fp8RegionSettings* prev_;
  std::shared_ptr<const Fp8RegionSettings> forward_;
};
}  // namespace detail

}  // namespace mixtape::amp
