// tests/ops/op_samples.h — gradcheck samples, registered by each op's test file. The coverage
// test runs every sample and checks that every registered op with a backward was gradchecked.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <mixtape/mixtape.h>

namespace mixtape::testing {

struct GradSample {
  std::string name;                                         // "add/broadcast"
  std::function<TensorList()> make_inputs;                  // fresh f64 leaves
  std::function<TensorList(const TensorList&)> fn;          // the function under test
  autograd::GradcheckOptions options{};
};

std::vector<GradSample>& grad_samples();
bool register_sample(GradSample s);

// A seeded f64 tensor of `sizes`, values in (lo, hi), requiring grad.
Tensor leaf(const IntList& sizes, double lo = -1.0, double hi = 1.0, uint64_t seed = 1);

}  // namespace mixtape::testing

#define MT_CONCAT_INNER(a, b) a##b
#define MT_CONCAT(a, b) MT_CONCAT_INNER(a, b)
// MT_GRAD_SAMPLE("op/case", inputs-lambda, fn-lambda [, options])
#define MT_GRAD_SAMPLE(...) \
  static const bool MT_CONCAT(mt_sample_, __LINE__) = ::mixtape::testing::register_sample({__VA_ARGS__})
