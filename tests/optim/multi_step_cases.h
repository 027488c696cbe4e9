// tests/optim/multi_step_cases.h — the configurations and operands the multi-tensor step tests
// share (tests/optim/test_multi_tensor_step.cpp on the CPU, tests/cuda_ops/test_optim_multi_tensor.cpp
// on the device): every optimizer variant x every parameter dtype, a list of tensors of odd sizes
// (0 and 1 among them), and the two ways of running them — the single-tensor op once per tensor
// (the reference) and the multi-tensor op once for all.
// Invariant: the operands depend only on the case, the sizes and the seed, never on the device,
// so one set can be cloned to each device and each path and the results compared bit for bit.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/dispatcher.h"
#include "mixtape/mixtape.h"

namespace mixtape::testing::multi_step {

struct Case {
  std::string name;
  bool adam = false;
  // SGD
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  // Adam / AdamW
  bool amsgrad = false, decoupled = false;
  // The parameter's dtype: f32/f64 are their own masters; f16/bf16 get an FP32 master and a
  // model copy, with 16-bit gradients (scaled by 512, unscaled by inv_scale) unless grad32.
  DType param = DType::Float32;
  bool grad32 = false;
  bool stochastic = false;
  size_t num_state() const { return adam ? (amsgrad ? 3 : 2) : (momentum != 0 ? 1 : 0); }
  const char* single_op() const { return adam ? "adam_step_" : "sgd_step_"; }
  const char* multi_op() const { return adam ? "adam_step_multi_" : "sgd_step_multi_"; }
};

inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

inline std::vector<Case> cases() {
  std::vector<Case> out;
  const DType dts[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  for (DType dt : dts) {
    const bool master = dt == DType::Float16 || dt == DType::BFloat16;
    const std::string t(dtype_short(dt));
    for (int variant = 0; variant < (master ? 3 : 1); ++variant) {
      // variant 0: 16-bit grads, round to nearest; 1: stochastic rounding; 2: FP32 grads
      Case base;
      base.param = dt;
      base.stochastic = variant == 1;
      base.grad32 = variant == 2;
      const std::string v = variant == 1 ? "_stochastic" : variant == 2 ? "_grad32" : "";
      Case c = base;
      c.name = "sgd_" + t + v;
      out.push_back(c);
      c.name = "sgd_momentum_dampening_wd_" + t + v;
      c.momentum = 0.9, c.dampening = 0.1, c.weight_decay = 1e-2;
      out.push_back(c);
      c.name = "sgd_nesterov_wd_" + t + v;
      c.dampening = 0, c.nesterov = true;
      out.push_back(c);
      for (int a = 0; a < 4; ++a) {
        Case d = base;
        d.adam = true;
        d.decoupled = a >= 2;
        d.amsgrad = a % 2 == 1;
        d.weight_decay = a == 0 ? 0.0 : 1e-2;
        d.name = std::string(d.decoupled ? "adamw" : "adam") + (d.amsgrad ? "_amsgrad" : "") + "_" + t + v;
        out.push_back(d);
      }
    }
  }
  return out;
}

// Tensor sizes: every CPU-loop and CUDA-task boundary (1024, 2048) and its neighbours, 0 and 1,
// repeated to `count` tensors.
inline std::vector<int64_t> sizes(size_t count) {
  const int64_t pattern[] = {5, 0, 1, 3001, 7, 1023, 1024, 1025, 2047, 2048, 2049, 1, 0, 33, 4097, 2};
  std::vector<int64_t> out;
  for (size_t k = 0; k < count; ++k) out.push_back(pattern[k % (sizeof(pattern) / sizeof(pattern[0]))]);
  return out;
}

// One tensor's operands (w, grad, model, state...) and its per-tensor attrs.
struct Tensors {
  TensorList ops;
  int64_t first_or_step = 0;  // SGD: first (0/1); Adam: step
  int64_t seed = 0, offset = 0;
};
struct Operands {
  std::vector<Tensors> tensors;
  Attrs shared;  // the hyperparameters and inv_scale, stochastic
};

inline Tensor random_values(std::mt19937_64& rng, int64_t n, DType dt, double lo, double hi, bool positive = false) {
  std::uniform_real_distribution<double> mag(lo, hi);
  std::bernoulli_distribution neg(0.5);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = (!positive && neg(rng)) ? -mag(rng) : mag(rng);
  return tensor(v, {n}, TensorOptions(DType::Float64)).to(dt);
}

// CPU operands of `c` for tensors of `ns` elements. The stochastic stream's seed changes once
// along the list (so a device launch ends there); offsets follow one another as an optimizer's.
inline Operands make(const Case& c, const std::vector<int64_t>& ns, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const bool master = c.param == DType::Float16 || c.param == DType::BFloat16;
  const DType wdt = c.param == DType::Float64 ? DType::Float64 : DType::Float32;
  Operands o;
  o.shared = c.adam ? Attrs{{"lr", 1e-3},
                            {"beta1", 0.9},
                            {"beta2", 0.999},
                            {"eps", 1e-8},
                            {"weight_decay", c.weight_decay},
                            {"amsgrad", c.amsgrad},
                            {"decoupled", c.decoupled}}
                    : Attrs{{"lr", 0.05},
                            {"momentum", c.momentum},
                            {"dampening", c.dampening},
                            {"weight_decay", c.weight_decay},
                            {"nesterov", c.nesterov}};
  const bool grad16 = master && !c.grad32;
  o.shared.set("inv_scale", grad16 ? 1.0 / 512.0 : 1.0).set("stochastic", master && c.stochastic);
  int64_t offset = 11;
  for (size_t k = 0; k < ns.size(); ++k) {
    const int64_t n = ns[k];
    Tensors t;
    // The master holds values a 16-bit model cannot (an FP32 master after some updates).
    Tensor w = random_values(rng, n, wdt, 0.01, 1.0);
    Tensor grad = random_values(rng, n, DType::Float64, 0.001, 2.0);
    grad = grad16 ? (grad * 512.0).to(c.param) : grad.to(wdt);
    t.ops = {w, grad, master ? w.to(c.param) : Tensor()};
    if (c.adam) {
      t.ops.push_back(random_values(rng, n, wdt, 0.001, 0.1));
      t.ops.push_back(random_values(rng, n, wdt, 1e-6, 1e-3, true));
      if (c.amsgrad) t.ops.push_back(random_values(rng, n, wdt, 1e-6, 1e-3, true));
      t.first_or_step = 1 + static_cast<int64_t>(k % 7) * 3;  // different bias corrections
    } else {
      if (c.momentum != 0) t.ops.push_back(random_values(rng, n, wdt, 0.01, 1.0));
      t.first_or_step = k % 5 == 1 ? 1 : 0;  // some buffers are being created
    }
    t.seed = k < ns.size() / 2 ? 20261202 : 777;
    t.offset = offset;
    offset += (n + 3) / 4 + 1;
    o.tensors.push_back(std::move(t));
  }
  return o;
}

// A copy of every operand on `device` (fresh storage: the runs must not share any).
inline Operands copy_to(const Operands& o, Device device) {
  Operands out = o;
  for (Tensors& t : out.tensors)
    for (Tensor& x : t.ops)
      if (x.defined()) x = x.to(device).clone();
  return out;
}

inline const char* per_tensor_name(const Case& c) { return c.adam ? "step" : "first"; }

// The reference: the single-tensor op once per tensor.
inline void run_single(const Case& c, const Operands& o) {
  for (const Tensors& t : o.tensors) {
    Attrs a = o.shared;
    if (c.adam)
      a.set("step", t.first_or_step);
    else
      a.set("first", t.first_or_step != 0);
    a.set("seed", t.seed).set("offset", t.offset);
    dispatch(*find_op(c.single_op()), t.ops, a);
  }
}

// The multi-tensor op's inputs (list-major) and attrs for `o`.
inline std::pair<TensorList, Attrs> multi_call(const Case& c, const Operands& o) {
  const size_t n = o.tensors.size(), lists = 3 + c.num_state();
  TensorList in(lists * n);
  IntList per, seeds, offsets;
  for (size_t k = 0; k < n; ++k) {
    for (size_t l = 0; l < lists; ++l) in[l * n + k] = o.tensors[k].ops[l];
    per.push_back(o.tensors[k].first_or_step);
    seeds.push_back(o.tensors[k].seed);
    offsets.push_back(o.tensors[k].offset);
  }
  Attrs a = o.shared;
  a.set("count", static_cast<int64_t>(n)).set(per_tensor_name(c), per).set("seed", seeds).set("offset", offsets);
  return {in, a};
}
inline void run_multi(const Case& c, const Operands& o) {
  auto [in, a] = multi_call(c, o);
  dispatch(*find_op(c.multi_op()), in, a);
}

// Bit-exact equality of two tensors (on any devices), the first mismatches named.
inline ::testing::AssertionResult same_bits(const Tensor& got0, const Tensor& want0) {
  const Tensor got = got0.to(Device::CPU()).contiguous(), want = want0.to(Device::CPU()).contiguous();
  if (got.dtype() != want.dtype() || got.sizes() != want.sizes())
    return ::testing::AssertionFailure() << "got " << got.describe() << ", want " << want.describe();
  const size_t es = got.element_size();
  int64_t bad = 0;
  auto r = ::testing::AssertionFailure();
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (std::memcmp(static_cast<const char*>(got.data_ptr()) + i * es, static_cast<const char*>(want.data_ptr()) + i * es,
                    es) == 0)
      continue;
    if (bad++ < 4) r << "\n  element " << i << ": got " << get_element(got, i) << ", want " << get_element(want, i);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return r << "\n  " << bad << " of " << got.numel() << " elements differ";
}

// Every written operand of `got` equals `want`'s, bit for bit (the grads are only read).
inline ::testing::AssertionResult same_written(const Operands& got, const Operands& want) {
  for (size_t k = 0; k < got.tensors.size(); ++k)
    for (size_t l = 0; l < got.tensors[k].ops.size(); ++l) {
      if (l == 1 || !got.tensors[k].ops[l].defined()) continue;
      if (auto r = same_bits(got.tensors[k].ops[l], want.tensors[k].ops[l]); !r)
        return r << "\n  (tensor " << k << " of " << got.tensors.size() << ", operand " << l << ")";
    }
  return ::testing::AssertionSuccess();
}

}  // namespace mixtape::testing::multi_step
