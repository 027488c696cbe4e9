// autograd/op_calls.h — the few ops the engine itself needs (sum gradients, cast them, copy
// them), called through the dispatcher by name: autograd sits below ops/ in the build, so it
// may not link to them, but every op is reachable through the registry at run time.
#pragma once
#include "core/dispatcher.h"

namespace mixtape::autograd::op_calls {

TensorList call(const char* op, TensorList inputs, Attrs attrs = {});
inline Tensor add(const Tensor& a, const Tensor& b) { return call("add", {a, b})[0]; }
inline Tensor clone(const Tensor& t) { return call("clone", {t})[0]; }
inline Tensor cast(const Tensor& t, DType d) { return call("to_dtype", {t}, {{"dtype", d}})[0]; }
inline Tensor ones_like(const Tensor& t) { return call("full_like", {t}, {{"value", 1.0}})[0]; }
inline Tensor zeros_like(const Tensor& t) { return call("full_like", {t}, {{"value", 0.0}})[0]; }

}  // namespace mixtape::autograd::op_calls
