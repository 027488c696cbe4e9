// tests/common/error_of.h — the message of the mixtape::Error a callable throws, so tests can
// assert on what an error says ("(no error)" when nothing was thrown).
#pragma once
#include <string>

#include "core/error.h"

namespace mixtape::testing {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace mixtape::testing
