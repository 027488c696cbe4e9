// tests/common/numerics_error_of.h — the NumericsError (core/numerics_check.h) a callable throws,
// for the NaN locator's tests to read its finding; a test that throws none fails.
#pragma once
#include <gtest/gtest.h>

#include "core/numerics_check.h"

namespace mixtape::testing {

template <class F>
numerics::NumericsError numerics_error_of(F&& f) {
  try {
    f();
  } catch (const numerics::NumericsError& e) {
    return e;
  }
  ADD_FAILURE() << "no NumericsError was thrown";
  return numerics::NumericsError("", false, "");
}

}  // namespace mixtape::testing
