// autograd/print.cpp — tensor and tape printing.
#include "autograd/print.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <functional>
#include <set>
#include <sstream>

#include "autograd/node.h"
#include "autograd/op_calls.h"

namespace mixtape {
namespace {

std::string format_value(double v, DType dtype, bool int_like, int decimals) {
  char buf[64];
  if (dtype == DType::Bool) return v != 0 ? "True" : "False";
  if (is_integral(dtype)) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else if (std::isnan(v)) {
    return "nan";
  } else if (std::isinf(v)) {
    return v > 0 ? "inf" : "-inf";
  } else if (int_like) {
    std::snprintf(buf, sizeof buf, "%.0f.", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  }
  return buf;
}

void print_values(std::ostream& os, const Tensor& t) {
  int64_t n = t.numel();
  std::vector<double> vals(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) vals[static_cast<size_t>(i)] = get_element(t, i);
  bool int_like = std::all_of(vals.begin(), vals.end(), [](double v) { return !std::isfinite(v) || v == std::floor(v); });
  double max_abs = 0;
  for (double v : vals)
    if (std::isfinite(v)) max_abs = std::max(max_abs, std::fabs(v));
  bool sci = !int_like && (max_abs >= 1e8 || (max_abs > 0 && max_abs < 1e-4));
  auto fmt = [&](double v) {
    if (sci && std::isfinite(v) && (is_floating(t.dtype()) || is_float8(t.dtype()))) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.4e", v);
      return std::string(buf);
    }
    return format_value(v, t.dtype(), int_like, 4);
  };
  if (t.dim() == 0) {
    os << fmt(vals[0]);
    return;
  }
  // Nested brackets, one level per dim (depth = t.dim(), so recursion is bounded); long dims
  // are summarised as "first 3, ..., last 3" like PyTorch.
  const auto& sizes = t.sizes();
  IntList row_len(sizes.size(), 1);
  for (size_t k = sizes.size() - 1; k-- > 0;) row_len[k] = row_len[k + 1] * sizes[k + 1];
  bool summarize = n > 1000;
  std::function<void(size_t, int64_t)> rec = [&](size_t dim, int64_t base) {
    os << '[';
    int64_t len = sizes[dim];
    for (int64_t j = 0; j < len; ++j) {
      if (summarize && len > 6 && j == 3) {
        os << (dim + 1 == sizes.size() ? "..., " : "...,\n" + std::string(7 + dim + 1, ' '));
        j = len - 3;
      }
      if (dim + 1 == sizes.size()) {
        os << fmt(vals[static_cast<size_t>(base + j)]);
        if (j + 1 < len) os << ", ";
      } else {
        rec(dim + 1, base + j * row_len[dim]);
        if (j + 1 < len) os << ',' << std::string(sizes.size() - dim - 1, '\n') << std::string(7 + dim + 1, ' ');
      }
    }
    os << ']';
  };
  rec(0, 0);
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  os << "tensor(";
  if (t.device().is_cpu())
    print_values(os, t);
  else
    print_values(os, autograd::op_calls::call("to_device", {t}, {{"device", int64_t(-1)}})[0]);
  os << ", shape=" << t.sizes() << ", dtype=" << dtype_short(t.dtype());
  if (!t.device().is_cpu()) os << ", device=" << t.device();
  if (t.grad_fn())
    os << ", grad_fn=<" << t.grad_fn()->name() << '>';
  else if (t.requires_grad())
    os << ", requires_grad=true";
  return os << ')';
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

namespace autograd {

std::string tape_string(const Tensor& t) {
  std::ostringstream os;
  if (!t.defined() || !t.grad_fn()) {
    os << "(no tape: " << (t.defined() ? t.describe() : "undefined") << " has no grad_fn)\n";
    return os.str();
  }
  // Collect every node reachable from t, then print in sequence order.
  std::vector<Node*> nodes;
  std::set<Node*> seen;
  std::vector<Node*> stack{t.grad_fn().get()};
  seen.insert(stack.back());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    nodes.push_back(n);
    for (const Edge& e : n->next_edges())
      if (e.valid() && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  std::vector<Node*> ops;
  for (Node* n : nodes)
    if (n->seq_nr() != std::numeric_limits<uint64_t>::max()) ops.push_back(n);
  std::sort(ops.begin(), ops.end(), [](Node* a, Node* b) { return a->seq_nr() < b->seq_nr(); });
  uint64_t base = ops.empty() ? 0 : ops.front()->seq_nr();
  os << "tape of " << t.describe() << " (" << ops.size() << " ops; backward runs them bottom-up)\n";
  for (Node* n : ops) {
    os << "  #" << (n->seq_nr() - base) << "  " << n->describe() << '\n';
    os << "        <- ";
    bool first = true;
    for (const Edge& e : n->next_edges()) {
      os << (first ? "" : ", ");
      first = false;
      if (!e.valid())
        os << "(no grad)";
      else if (e.node->seq_nr() == std::numeric_limits<uint64_t>::max())
        os << e.node->describe();
      else
        os << '#' << (e.node->seq_nr() - base) << ' ' << e.node->name();
    }
    os << '\n';
  }
  return os.str();
}

void print_tape(const Tensor& t, std::ostream& os) { os << tape_string(t); }

}  // namespace autograd
}  // namespace mixtape
