// tests/distributed/dist_test_util.h — what the one-process and the two-process data-parallel
// tests share: a small model without batch norm, seeded data, a reference step on the whole
// batch, and a hash of a training state.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "mixtape/mixtape.h"

namespace mixtape::dist_test {

// MLP 20 -> 32 -> 10 (two Linear layers; no batch norm), the same weights for a given seed.
inline std::shared_ptr<models::MLP> make_mlp(uint64_t seed, DType dt = DType::Float32, int64_t hidden = 32) {
  manual_seed(seed);
  auto m = std::make_shared<models::MLP>(20, std::vector<int64_t>{hidden}, 10);
  m->to(dt);
  return m;
}

// Three Linear(4, 3) layers for the unused-parameter tests: "a" is used by every rank, "b" only
// where use_b is set (a test sets it on rank 0), "c" by none.
class PartlyUsed : public nn::Module {
 public:
  explicit PartlyUsed(DType dt = DType::Float32) : nn::Module("PartlyUsed") {
    manual_seed(5);
    a = register_module("a", std::make_shared<nn::Linear>(4, 3));
    b = register_module("b", std::make_shared<nn::Linear>(4, 3));
    c = register_module("c", std::make_shared<nn::Linear>(4, 3));
    if (dt != DType::Float32) to(dt);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = (*a)(x);
    return use_b ? y + (*b)(x) : y;
  }
  std::shared_ptr<nn::Linear> a, b, c;
  bool use_b = true;
};

// Step `step`'s global batch (n x 20 inputs, n class targets), the same on every rank.
struct GlobalBatch {
  Tensor x, y;
};
inline GlobalBatch global_batch(int64_t n, int step, DType dt = DType::Float32) {
  Generator g(1000 + static_cast<uint64_t>(step));
  Tensor x = randn({n, 20}, TensorOptions(DType::Float64), &g).to(dt);
  std::vector<double> u = rand({n}, TensorOptions(DType::Float64), &g).to_vector<double>();
  std::vector<double> cls;
  for (double v : u) cls.push_back(std::floor(v * 10.0));
  return {x, tensor(cls, {n}, TensorOptions(DType::Int64))};
}

// FNV-1a over the bytes of every tensor in name order: equal hashes = bit-identical states.
inline void hash_tensor(uint64_t& h, const Tensor& t0) {
  Tensor t = t0.to(Device::CPU()).contiguous();
  const auto* p = static_cast<const unsigned char*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
}
inline std::string hash_state(const StateDict& sd) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, t] : sd) {
    for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    if (t.defined()) hash_tensor(h, t);
  }
  std::ostringstream os;
  os << std::hex << std::setw(16) << std::setfill('0') << h;
  return os.str();
}

inline double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::fabs(v));
  return m;
}
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = va.size() == vb.size() ? 0 : INFINITY;
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i) m = std::max(m, std::fabs(va[i] - vb[i]));
  return m;
}

}  // namespace mixtape::dist_test
