// core/attrs.cpp — printing attributes for traces and the tape.
#include "core/attrs.h"

namespace mixtape {

std::ostream& operator<<(std::ostream& os, const Attrs& a) {
  bool first = true;
  for (auto& [name, v] : a.items()) {
    os << (first ? "" : ", ") << name << '=';
    first = false;
    std::visit(
        [&](const auto& x) {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<X, bool>)
            os << (x ? "true" : "false");
          else if constexpr (std::is_same_v<X, DType>)
            os << dtype_short(x);
          else
            os << x;
        },
        v);
  }
  return os;
}

}  // namespace mixtape
