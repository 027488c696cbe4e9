// autograd/op_calls.cpp — by-name op calls with a clear error when ops/ is not linked.
#include "autograd/op_calls.h"

namespace mixtape::autograd::op_calls {

TensorList call(const char* op, TensorList inputs, Attrs attrs) {
  const OpSchema* s = find_op(op);
  MT_CHECK(s != nullptr && s->has_kernel(call_device_type(OpCall{inputs, {}, nullptr})), "autograd: op '", op,
           "' is not registered (link mixtape::ops, or mixtape::mixtape)");
  return dispatch(*s, std::move(inputs), std::move(attrs));
}

}  // namespace mixtape::autograd::op_calls
