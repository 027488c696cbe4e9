// tests/common/op_sample_run.h — how the derived tests make and run an op's declared samples
// (core/op_sample.h): the inputs of a sample in a given floating dtype on a given device, and
// the call. Header-only: the CPU suite (tests/ops) and the GPU suite (tests/cuda_ops) share it.
// Invariant: the values of a sample's inputs depend only on the op and sample names (FNV-1a seeds),
// never on the dtype, device or test order: every dtype is the same f64 values, rounded.
#pragma once
#include <cctype>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <mixtape/mixtape.h>

#include "core/dispatcher.h"

namespace mixtape::testing {

struct SampleRef {
  const OpSchema* op;
  const OpSample* sample;
};

// Every sample of every op in the registry, in op-name order.
inline std::vector<SampleRef> registry_samples() {
  std::vector<SampleRef> out;
  for (const OpSchema* op : all_ops())
    for (const OpSample& s : op->samples) out.push_back({op, &s});
  return out;
}

inline uint64_t sample_seed(const std::string& name, size_t arg) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return (h ^ (arg + 1)) * 1099511628211ull;
}

// Input `i` of sample `s`: Float/Values arguments in `float_dtype`; on `device`; floating
// differentiable ones require grad when `requires_grad`.
inline Tensor make_sample_arg(const OpSample& s, size_t i, DType float_dtype, Device device, bool requires_grad) {
  const SampleArg& a = s.args[i];
  Generator g(sample_seed(s.name, i));
  Tensor t;
  switch (a.kind) {
    case SampleArg::Kind::Float: t = (rand(a.sizes, DType::Float64, &g) * (a.hi - a.lo) + a.lo).to(float_dtype); break;
    case SampleArg::Kind::Values: t = tensor(a.values, a.sizes, TensorOptions(DType::Float64)).to(float_dtype); break;
    case SampleArg::Kind::Index: {
      Tensor u = rand(a.sizes, DType::Float64, &g) * (a.hi - a.lo);
      Tensor r = Tensor::empty(a.sizes, TensorOptions(DType::Int64));
      for (int64_t k = 0; k < u.numel(); ++k)
        set_element(r, k, std::floor(get_element(u, k)) + a.lo);
      t = r;
      break;
    }
    case SampleArg::Kind::Bool: t = eq(sign(rand(a.sizes, DType::Float64, &g) - 0.5), ones({}, DType::Float64)); break;
    case SampleArg::Kind::Scalar: return wrapped_scalar(a.lo);
  }
  t = t.to(device).detach();
  if (requires_grad && a.differentiable && t.is_floating_point()) t.requires_grad_(true);
  return t;
}

inline TensorList make_sample_inputs(const OpSample& s, DType float_dtype, Device device, bool requires_grad) {
  TensorList in;
  for (size_t i = 0; i < s.args.size(); ++i) in.push_back(make_sample_arg(s, i, float_dtype, device, requires_grad));
  return in;
}

inline TensorList run_sample(const OpSchema& op, const OpSample& s, const TensorList& inputs) {
  if (s.fn) return s.fn(inputs);
  return dispatch(op, inputs, s.attrs);
}

// The float64 gradcheck of a sample with respect to its differentiable inputs (the others are
// held fixed), over its floating outputs.
inline autograd::GradcheckResult gradcheck_sample(const OpSchema& op, const OpSample& s,
                                                  autograd::GradcheckOptions opts = {}) {
  const TensorList all = make_sample_inputs(s, DType::Float64, Device::CPU(), /*requires_grad=*/true);
  TensorList wrt;
  std::vector<size_t> where;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].requires_grad()) {
      wrt.push_back(all[i]);
      where.push_back(i);
    }
  opts.eps = s.checks.gradcheck_eps;
  opts.atol = s.checks.gradcheck_atol;
  opts.rtol = s.checks.gradcheck_rtol;
  return autograd::gradcheck(
      [&](const TensorList& x) {
        TensorList in = all;
        for (size_t k = 0; k < where.size(); ++k) in[where[k]] = x[k];
        TensorList outs;
        for (const Tensor& t : run_sample(op, s, in))
          if (t.defined() && t.is_floating_point()) outs.push_back(t);
        return outs;
      },
      wrt, opts);
}

inline bool sample_rounds_once(const OpSchema& op, const OpSample& s) {
  return s.checks.rounds_once_16.value_or(op.pointwise);
}

inline void PrintTo(const SampleRef& r, std::ostream* os) { *os << r.sample->name; }

inline std::string gtest_name(const std::string& sample_name) {
  std::string n;
  for (char c : sample_name) n += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return n;
}

}  // namespace mixtape::testing
