// amp/fp8_autocast.cpp — the Fp8Autocast region: its thread-local settings and the delayed
// recipe's scale update at entry. The FP8 GEMM ops themselves: amp/fp8_ops.cpp.
#include "amp/fp8_autocast.h"

#include "amp/fp8_cuda_route.h"
#include "autograd/checkpoint.h"
#include "core/error.h"
#include "ops/shape_ops.h"

namespace mixtape::amp {

namespace {
thread_local const detail::Fp8RegionSettings* tls_region = nullptr;

bool same_recipe(const DelayedScaling& a, const DelayedScaling& b) {
  return a.margin == b.margin && a.fp8_format == b.fp8_format && a.amax_history_len == b.amax_history_len &&
         a.amax_compute_algo == b.amax_compute_algo && a.power_of_2_scales == b.power_of_2_scales;
}
}  // namespace

Fp8Autocast::Fp8Autocast(const Fp8Recipe& recipe, Fp8Metas* metas, Fp8AutocastOptions options,
                         DeviceType device_type)
    : prev_(nullptr) {
  check_recipe(recipe, "Fp8Autocast");
  if (device_type == DeviceType::CUDA) detail::fp8_cuda_backend("Fp8Autocast(cuda)");  // refuses without CUDA
  MT_CHECK(options.output_dtype == DType::BFloat16 || options.output_dtype == DType::Float32,
           "Fp8Autocast: output_dtype must be BFloat16 or Float32, got ", dtype_name(options.output_dtype));
  if (const auto* d = std::get_if<DelayedScaling>(&recipe)) {
    MT_CHECK(metas != nullptr, "Fp8Autocast: ", recipe_string(recipe),
             " keeps per-module state; pass the model's Fp8Metas (amp::Fp8Metas metas(recipe, "
             "model.named_parameters()))");
    MT_CHECK(same_recipe(*d, metas->recipe()), "Fp8Autocast: the recipe ", recipe_string(recipe),
             " differs from the one the metas were made with, ", recipe_string(metas->recipe()));
    // The metas live on their weights' devices (TE's fp8_meta): a region casts with and records
    // into the metas of its own device type only.
    for (const Fp8Meta& m : metas->metas())
      MT_CHECK(m.scale.device().type() == device_type, "Fp8Autocast(", device_type_name(device_type), "): the FP8 metadata '",
               m.name, "' is on ", m.scale.device(), "; make the Fp8Metas from the model's parameters on the region's "
               "device (move the model first)");
    if (options.update_scales && !autograd::in_checkpoint_recompute()) metas->update_scales(options.amax_reducer);
  } else {
    MT_CHECK(metas == nullptr, "Fp8Autocast: ", recipe_string(recipe),
             " computes its scales from each cast's own values and takes no Fp8Metas");
  }
  settings_ = std::make_unique<detail::Fp8RegionSettings>(detail::Fp8RegionSettings{recipe, metas, options.output_dtype});
  settings_->record_amaxes = !autograd::in_checkpoint_recompute();
  settings_->device_type = device_type;
  bf16_.emplace(device_type, DType::BFloat16);
  prev_ = tls_region;
  tls_region = settings_.get();
}

Fp8Autocast::~Fp8Autocast() {
  tls_region = prev_;
  bf16_.reset();
}

bool is_fp8_autocast_enabled() { return tls_region != nullptr; }

namespace detail {
const Fp8RegionSettings* fp8_region() { return tls_region; }

namespace {
Fp8CudaBackend& cuda_backend_slot() {
  static Fp8CudaBackend b;
  return b;
}
}  // namespace
bool register_fp8_cuda_backend(Fp8CudaBackend backend) {
  cuda_backend_slot() = backend;
  return true;
}
const Fp8CudaBackend& fp8_cuda_backend(const char* who) {
  const Fp8CudaBackend& b = cuda_backend_slot();
  MT_CHECK(b.gemm != nullptr && b.update != nullptr, who, ": this build has no CUDA backend (configure with "
           "-DMIXTAPE_CUDA=ON)");
  return b;
}

std::shared_ptr<const Fp8RegionSettings> capture_fp8_region() {
  if (tls_region == nullptr) return nullptr;
  auto c = std::make_shared<Fp8RegionSettings>(*tls_region);
  if (c->metas != nullptr && c->device_type == DeviceType::CUDA) {
    if (!c->forward_scales_device.defined() && c->metas->size() > 0) {
      // Device copies (cat copies), so a later update does not reach the recompute.
      TensorList s, si;
      for (const Fp8Meta& m : c->metas->metas()) {
        s.push_back(m.scale);
        si.push_back(m.scale_inv);
      }
      c->forward_scales_device = cat(s);
      c->forward_scale_invs_device = cat(si);
    }
  } else if (c->metas != nullptr && !c->forward_scales) {
    // Inside a recompute (a checkpoint in a checkpoint) the scales are the outer forward's already.
    auto scales = std::make_shared<std::vector<float>>();
    for (const Fp8Meta& m : c->metas->metas())
      for (int r = 0; r < 3; ++r) scales->push_back(m.scale_of(static_cast<Fp8Role>(r)));
    c->forward_scales = std::move(scales);
  }
  return c;
}

Fp8RecomputeRegion::Fp8RecomputeRegion(std::shared_ptr<const Fp8RegionSettings> forward) : prev_(tls_region) {
  if (forward) {
    auto r = std::make_shared<Fp8RegionSettings>(*forward);
    r->record_amaxes = false;
    forward_ = std::move(r);
  }
  tls_region = forward_.get();
}

Fp8RecomputeRegion::~Fp8RecomputeRegion() { tls_region = prev_; }
}  // namespace detail

}  // namespace mixtape::amp
