// autograd/gradcheck.cpp — Jacobians by backward passes and by central differences.
#include "autograd/gradcheck.h"

#include <cmath>
#include <mutex>
#include <sstream>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/op_node.h"

namespace mixtape::autograd {
namespace {
std::mutex g_mu;
std::set<std::string>& covered() {
  static std::set<std::string> s;
  return s;
}

void collect_ops(const TensorList& outs, std::set<std::string>& names) {
  std::vector<Node*> stack;
  std::set<Node*> seen;
  for (const Tensor& o : outs)
    if (o.defined() && o.grad_fn() && seen.insert(o.grad_fn().get()).second) stack.push_back(o.grad_fn().get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (auto* op = dynamic_cast<OpNode*>(n)) names.insert(op->op().name);
    for (const Edge& e : n->next_edges())
      if (e.valid() && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
}
}  // namespace

const std::set<std::string>& gradchecked_ops() { return covered(); }

GradcheckResult gradcheck(const GradcheckFn& fn, const TensorList& inputs, GradcheckOptions opts) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    MT_CHECK(x.defined() && x.dtype() == DType::Float64 && x.device().is_cpu(), "gradcheck: input ", i,
             " must be a Float64 CPU tensor, got ", x.describe());
  }
  GradcheckResult res;
  TensorList outs = fn(inputs);
  collect_ops(outs, res.ops_on_tape);

  // Numeric Jacobian columns first (no graph needed).
  std::vector<std::vector<double>> out_base;
  for (auto& o : outs) {
    MT_CHECK(o.dtype() == DType::Float64, "gradcheck: outputs must be Float64, got ", o.describe());
    out_base.emplace_back(o.to_vector<double>());
  }
  // numeric[i][k][o][j] stored flat: for input i, element k -> per-output vectors.
  std::vector<std::vector<std::vector<std::vector<double>>>> numeric(inputs.size());
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].requires_grad()) continue;
      int64_t n = inputs[i].numel();
      numeric[i].resize(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) {
        double x0 = get_element(inputs[i], k);
        set_element(inputs[i], k, x0 + opts.eps);
        TensorList plus = fn(inputs);
        set_element(inputs[i], k, x0 - opts.eps);
        TensorList minus = fn(inputs);
        set_element(inputs[i], k, x0);
        for (size_t o = 0; o < outs.size(); ++o) {
          auto p = plus[o].to_vector<double>(), m = minus[o].to_vector<double>();
          std::vector<double> col(p.size());
          for (size_t j = 0; j < p.size(); ++j) col[j] = (p[j] - m[j]) / (2 * opts.eps);
          numeric[i][static_cast<size_t>(k)].push_back(std::move(col));
        }
      }
    }
  }

  std::ostringstream report;
  int mismatches = 0;
  for (size_t o = 0; o < outs.size(); ++o) {
    if (!outs[o].requires_grad()) continue;
    int64_t m = outs[o].numel();
    for (int64_t j = 0; j < m; ++j) {
      for (const Tensor& x : inputs)
        if (x.requires_grad()) x.set_grad(Tensor());
      Tensor onehot = Tensor::empty(outs[o].sizes(), TensorOptions(DType::Float64));
      for (int64_t q = 0; q < m; ++q) set_element(onehot, q, q == j ? 1.0 : 0.0);
      backward({outs[o]}, {onehot}, /*retain_graph=*/true);
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (!inputs[i].requires_grad()) continue;
        Tensor g = inputs[i].grad();
        for (int64_t k = 0; k < inputs[i].numel(); ++k) {
          double a = g.defined() ? get_element(g, k) : 0.0;
          double nmr = numeric[i][static_cast<size_t>(k)][o][static_cast<size_t>(j)];
          if (!(std::fabs(a - nmr) <= opts.atol + opts.rtol * std::fabs(nmr))) {
            if (mismatches++ < 8)
              report << "output " << o << " element " << j << " wrt input " << i << " element " << k
                     << ": analytic " << a << " vs numeric " << nmr << '\n';
          }
        }
      }
    }
  }
  for (const Tensor& x : inputs)
    if (x.requires_grad()) x.set_grad(Tensor());
  res.ok = mismatches == 0;
  if (res.ok) {
    report << "gradcheck passed";
    std::lock_guard<std::mutex> lock(g_mu);
    covered().insert(res.ops_on_tape.begin(), res.ops_on_tape.end());
  } else {
    report << mismatches << " Jacobian entries differ";
  }
  res.report = report.str();
  return res;
}

}  // namespace mixtape::autograd
