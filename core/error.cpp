// core/error.cpp — out-of-line throw keeps MT_CHECK's fast path small.
#include "core/error.h"

namespace mixtape::detail {
void throw_error(const std::string& msg) { throw Error(msg); }
}  // namespace mixtape::detail
