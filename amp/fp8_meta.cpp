// amp/fp8_meta.cpp — see amp/fp8_meta.h.
#include "amp/fp8_meta.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "amp/fp8_cuda_route.h"
#include "amp/fp8_scaling.h"
#include "core/error.h"
#include "ops/cast.h"
#include "ops/creation.h"
#include "ops/shape_ops.h"

namespace mixtape::amp {

namespace {
constexpr const char* kFields[] = {"amax_history", "scale", "scale_inv"};
std::string key_of(const std::string& name, const char* field) { return name.empty() ? field : name + "." + field; }
}  // namespace

namespace {
void check_host(const Fp8Meta& m, const char* fn) {
  MT_CHECK(m.scale.device().is_cpu(), "Fp8Meta::", fn, ": '", m.name, "' lives on ", m.scale.device(),
           "; read its tensors there (a host read of a device scale would wait for the GPU)");
}
}  // namespace

float Fp8Meta::scale_of(Fp8Role r) const {
  check_host(*this, "scale_of");
  return scale.data_ptr<float>()[static_cast<int>(r)];
}
float Fp8Meta::scale_inv_of(Fp8Role r) const {
  check_host(*this, "scale_inv_of");
  return scale_inv.data_ptr<float>()[static_cast<int>(r)];
}
void Fp8Meta::record_amax(Fp8Role r, float amax) {
  check_host(*this, "record_amax");
  float& slot = amax_history.data_ptr<float>()[static_cast<int>(r)];
  slot = std::fmax(slot, amax);
}

Fp8Metas::Fp8Metas(const DelayedScaling& recipe, const std::vector<std::pair<std::string, Tensor>>& named_parameters)
    : recipe_(recipe) {
  check_recipe(recipe, "Fp8Metas");
  const std::string suffix = ".weight";
  for (const auto& [pname, w] : named_parameters) {
    const bool is_weight = pname == "weight" || (pname.size() > suffix.size() &&
                                                 pname.compare(pname.size() - suffix.size(), suffix.size(), suffix) == 0);
    if (!is_weight || !w.defined() || (w.dim() != 2 && w.dim() != 4)) continue;  // linear, conv2d
    MT_CHECK(w.device().is_cpu() || w.device().is_cuda(), "Fp8Metas: FP8 runs on cpu and cuda; parameter ", pname,
             " is on ", w.device());
    MT_CHECK(metas_.empty() || metas_[0].scale.device() == w.device(), "Fp8Metas: every FP8 weight must be on one "
             "device; '", metas_.empty() ? std::string() : metas_[0].name, "' is on ",
             metas_.empty() ? Device::CPU() : metas_[0].scale.device(), ", ", pname, " on ", w.device());
    Fp8Meta m;
    m.name = pname == "weight" ? std::string() : pname.substr(0, pname.size() - suffix.size());
    m.amax_history = zeros({recipe.amax_history_len, kFp8Roles}, TensorOptions(DType::Float32).with_device(w.device()));
    m.scale = full({kFp8Roles}, 1.0, TensorOptions(DType::Float32).with_device(w.device()));
    m.scale_inv = full({kFp8Roles}, 1.0, TensorOptions(DType::Float32).with_device(w.device()));
    index_[w.impl()] = Key{w.impl_ptr(), metas_.size()};
    metas_.push_back(std::move(m));
  }
}

Fp8Meta* Fp8Metas::find(const Tensor& weight) {
  auto it = index_.find(weight.impl());
  if (it == index_.end() || it->second.weight.lock() != weight.impl_ptr()) return nullptr;
  return &metas_[it->second.index];
}

const Fp8Meta& Fp8Metas::at(const std::string& name) const {
  for (const Fp8Meta& m : metas_)
    if (m.name == name) return m;
  std::ostringstream os;
  for (const Fp8Meta& m : metas_) os << (os.tellp() ? ", " : "") << '\'' << m.name << '\'';
  MT_ERROR("Fp8Metas: no FP8 metadata named '", name, "' (have ", os.str(), ")");
}

void Fp8Metas::update_scales(const AmaxReducer& reducer) {
  const int64_t len = recipe_.amax_history_len;
  const bool on_device = !metas_.empty() && metas_[0].amax_history.device().is_cuda();
  if (on_device) {
    update_on_device(reducer);
    return;
  }
  if (reducer && !metas_.empty()) {
    const int64_t n = static_cast<int64_t>(metas_.size()) * kFp8Roles;
    Tensor current = Tensor::empty({n}, TensorOptions(DType::Float32));
    float* c = current.data_ptr<float>();
    for (size_t i = 0; i < metas_.size(); ++i)
      std::memcpy(c + i * kFp8Roles, metas_[i].amax_history.data_ptr<float>(), sizeof(float) * kFp8Roles);
    Tensor reduced = current;
    reducer(reduced);
    MT_CHECK(reduced.defined() && reduced.dtype() == DType::Float32 && reduced.sizes() == current.sizes(),
             "Fp8Metas::update_scales: the amax reducer must leave an f32[", n, "] tensor, got ",
             reduced.defined() ? reduced.describe() : std::string("an undefined tensor"));
    const Tensor r = contiguous(to_device(reduced, Device::CPU()));
    for (size_t i = 0; i < metas_.size(); ++i)
      std::memcpy(metas_[i].amax_history.data_ptr<float>(), r.data_ptr<float>() + i * kFp8Roles,
                  sizeof(float) * kFp8Roles);
  }
  for (Fp8Meta& m : metas_) {
    float* h = m.amax_history.data_ptr<float>();
    float* s = m.scale.data_ptr<float>();
    float* si = m.scale_inv.data_ptr<float>();
    for (int role = 0; role < kFp8Roles; ++role) {
      const float newest = h[role];
      float amax = newest;
      if (recipe_.amax_compute_algo == AmaxComputeAlgo::Max)
        for (int64_t i = 1; i < len; ++i) amax = std::fmax(amax, h[i * kFp8Roles + role]);
      // Roll: row i takes row i + 1, the last row takes row 0, row 0 starts over at 0.
      for (int64_t i = 1; i + 1 < len; ++i) h[i * kFp8Roles + role] = h[(i + 1) * kFp8Roles + role];
      if (len > 1) h[(len - 1) * kFp8Roles + role] = newest;
      h[role] = 0.0f;
      const DType dt = fp8_dtype_for(recipe_.fp8_format, static_cast<Fp8Role>(role));
      s[role] = scale_from_amax(amax, fp8_max(dt), recipe_.margin, recipe_.power_of_2_scales, s[role]);
      si[role] = 1.0f / s[role];
    }
  }
}

// The metas on a GPU: the reducer sees one device tensor of every row 0 (gathered by cat, written
// back by copy_), each meta's update is one kernel (amp/cuda/fp8_delayed_scaling.h); no value
// is read on the host.
void Fp8Metas::update_on_device(const AmaxReducer& reducer) {
  const detail::Fp8CudaBackend& backend = detail::fp8_cuda_backend("Fp8Metas::update_scales");
  if (reducer) {
    TensorList rows;
    for (const Fp8Meta& m : metas_) rows.push_back(m.amax_history.select(0, 0));
    const Tensor current = cat(rows);
    const int64_t n = current.numel();
    Tensor reduced = current;
    reducer(reduced);
    MT_CHECK(reduced.defined() && reduced.dtype() == DType::Float32 && reduced.sizes() == current.sizes(),
             "Fp8Metas::update_scales: the amax reducer must leave an f32[", n, "] tensor, got ",
             reduced.defined() ? reduced.describe() : std::string("an undefined tensor"));
    const Tensor r = to_device(reduced, metas_[0].amax_history.device());
    for (size_t i = 0; i < metas_.size(); ++i) {
      Tensor row0 = metas_[i].amax_history.select(0, 0);
      row0.copy_(r.narrow(0, static_cast<int64_t>(i) * kFp8Roles, kFp8Roles));
    }
  }
  for (Fp8Meta& m : metas_) backend.update(m, recipe_);
}

StateDict Fp8Metas::state_dict() const {
  StateDict sd;
  for (const Fp8Meta& m : metas_) {
    sd[key_of(m.name, kFields[0])] = clone(m.amax_history);
    sd[key_of(m.name, kFields[1])] = clone(m.scale);
    sd[key_of(m.name, kFields[2])] = clone(m.scale_inv);
  }
  return sd;
}

void Fp8Metas::load_state_dict(const StateDict& state) {
  std::vector<std::string> problems;
  std::map<std::string, std::pair<const Tensor*, int>> mine;  // key -> (tensor, field)
  for (const Fp8Meta& m : metas_) {
    mine[key_of(m.name, kFields[0])] = {&m.amax_history, 0};
    mine[key_of(m.name, kFields[1])] = {&m.scale, 1};
    mine[key_of(m.name, kFields[2])] = {&m.scale_inv, 2};
  }
  for (const auto& [key, entry] : mine) {
    const Tensor* dst = entry.first;
    auto it = state.find(key);
    if (it == state.end()) {
      problems.push_back("missing " + key);
      continue;
    }
    const Tensor& src = it->second;
    if (!src.defined() || src.dtype() != DType::Float32 || src.sizes() != dst->sizes()) {
      problems.push_back(key + ": expected " + dst->describe() + ", the checkpoint holds " +
                         (src.defined() ? src.describe() : std::string("an undefined tensor")));
      continue;
    }
    if (entry.second > 0) {  // scale or scale_inv
      for (float v : to_device(src, Device::CPU()).to_vector<float>())
        if (!(std::isfinite(v) && v > 0.0f)) {
          problems.push_back(key + ": every scale must be finite and > 0, the checkpoint holds " + std::to_string(v));
          break;
        }
    }
  }
  for (const auto& [key, t] : state)
    if (!mine.count(key)) problems.push_back("unexpected " + key + " (" + (t.defined() ? t.describe() : "undefined") + ")");
  if (!problems.empty()) {
    std::ostringstream os;
    for (size_t i = 0; i < problems.size(); ++i) os << (i ? "; " : "") << problems[i];
    MT_ERROR("Fp8Metas::load_state_dict: the checkpoint's FP8 metadata does not match this model (",
             metas_.size(), " metas, amax_history_len ", recipe_.amax_history_len, "): ", os.str());
  }
  for (const auto& [key, entry] : mine) {
    const Tensor* dst = entry.first;
    const Tensor src = contiguous(to_device(state.at(key), dst->device()));
    if (dst->device().is_cpu()) {
      std::memcpy(dst->data_ptr(), src.data_ptr(), dst->nbytes());
    } else {
      Tensor d = *dst;  // a handle on the meta's storage: copy_ moves the bits on the device
      d.copy_(src);
    }
  }
}

}  // namespace mixtape::amp
