// autograd/op_calls.cpp — by-name op calls with a clear error when ops/ is not linked.
#include "autograd/op_calls.h"

#include <array>

namespace mixtape::autograd::op_calls {
namespace {
// The engine calls a handful of ops on every backward; looking each up by name in the registry
// (a lock and a string map) cost more than a 1-element add. Registry entries live for the whole
// program, so a per-thread cache keyed by the name literal's address is safe; a miss (another
// literal with the same text) only costs a lookup.
const OpSchema* lookup(const char* op) {
  thread_local std::array<std::pair<const char*, const OpSchema*>, 8> cache{};
  for (auto& [name, schema] : cache)
    if (name == op) return schema;
  const OpSchema* s = find_op(op);
  if (!s) return nullptr;
  for (auto& entry : cache)
    if (!entry.first) {
      entry = {op, s};
      break;
    }
  return s;
}
}  // namespace

TensorList call(const char* op, TensorList inputs, Attrs attrs) {
  const OpSchema* s = lookup(op);
  MT_CHECK(s != nullptr && s->has_kernel(device_type_of(inputs)), "autograd: op '", op,
           "' is not registered (link mixtape::ops, or mixtape::mixtape)");
  return dispatch(*s, std::move(inputs), std::move(attrs));
}

}  // namespace mixtape::autograd::op_calls
