// core/error.h — the one exception type of mixtape and the checks that throw it.
// Invariant: bad input never crashes or corrupts; it throws mixtape::Error whose message names
// the op, what was expected and what was given, e.g.
//   "matmul: inner dimensions must match, got [2, 3] @ [4, 5]".
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace mixtape {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
[[noreturn]] void throw_error(const std::string& msg);
}  // namespace detail

}  // namespace mixtape

// MT_CHECK(cond, "op", ": expected ... got ", x): throws mixtape::Error with the streamed message.
#define MT_CHECK(cond, ...)                                                     \
  do {                                                                          \
    if (!(cond)) [[unlikely]]                                                   \
      ::mixtape::detail::throw_error(::mixtape::detail::str_cat(__VA_ARGS__)); \
  } while (0)

#define MT_ERROR(...) ::mixtape::detail::throw_error(::mixtape::detail::str_cat(__VA_ARGS__))
