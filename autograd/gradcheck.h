// autograd/gradcheck.h — compare an op's analytic backward with central finite differences.
//
// Inputs must be Float64 leaves with requires_grad. For every output element j, one backward
// pass with a one-hot gradient gives row j of the analytic Jacobian; every input element k is
// moved by ±eps to get the numeric column k: (f(x+eps) - f(x-eps)) / (2 eps).
//
// Tolerances (PyTorch's defaults): |analytic - numeric| <= atol + rtol * |numeric| with
// eps = 1e-6, atol = 1e-5, rtol = 1e-3. In float64 the central difference has truncation error
// ~ eps^2 |f'''| / 6 ~ 1e-13 and rounding error ~ u |f| / eps ~ 1e-10 (u = 2^-53) for |f| ~ 1,
// so a correct backward passes with five orders of magnitude to spare, and a wrong one (a
// missing factor, a transposed term) fails by O(1). Samples must avoid kinks (relu at 0).
#pragma once
#include <functional>
#include <set>
#include <string>

#include "core/tensor.h"

namespace mixtape::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  std::string report;                 // first mismatches, or a summary
  std::set<std::string> ops_on_tape;  // every op the function recorded
  explicit operator bool() const { return ok; }
};

using GradcheckFn = std::function<TensorList(const TensorList&)>;
GradcheckResult gradcheck(const GradcheckFn& fn, const TensorList& inputs, GradcheckOptions opts = {});

// Ops that some gradcheck in this process saw on the tape with a passing result (for the
// coverage table).
const std::set<std::string>& gradchecked_ops();

}  // namespace mixtape::autograd
