// tests/ops/test_lane_sum.cpp — the CPU reductions' four-lane accumulator (ops/cpu/lane_sum.h):
// a value's lane is its logical position mod 4 however the sequence is cut into pieces, and
// sum() over a strided layout gives each value the lane its contiguous copy gives it.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "ops/cpu/lane_sum.h"
#include "ops/creation.h"
#include "ops/reduce.h"

namespace mixtape::testing {
namespace {

// Lane 0 (positions 0, 4, 8, ...) gets 1e16, -1e16, 1e16, ... and cancels exactly; every other
// value is 1 and the ones add up exactly in lanes 1-3. Any other assignment puts ones next to
// 1e16, where they are lost to rounding (1e16 + 1 == 1e16).
double pattern(int64_t k) { return k % 4 != 0 ? 1.0 : (k / 4) % 2 == 0 ? 1e16 : -1e16; }

TEST(LaneSum, LanesFollowTheLogicalPositionWhateverThePieces) {
  const int64_t n = 104;  // 26 values in lane 0 (they cancel), 78 ones
  for (int64_t piece : {1, 2, 3, 5, 7, 64, 104}) {
    cpu::LaneSum<double> s;
    for (int64_t start = 0; start < n; start += piece) {
      const int64_t m = std::min(piece, n - start);
      s.add(m, [&](int64_t j) { return pattern(start + j); });
    }
    EXPECT_EQ(s.total(), 78.0) << "pieces of " << piece;
  }
}

TEST(LaneSum, StridedSumGivesEachValueItsContiguousLane) {
  // x (8, 13): row-major values follow the pattern; x.t().contiguous().t() has the same values
  // with column-major strides, so sum() walks it in runs of 1 instead of one run of 104.
  std::vector<double> v(8 * 13);
  for (size_t k = 0; k < v.size(); ++k) v[k] = pattern(static_cast<int64_t>(k));
  Tensor x = tensor(v, {8, 13}, DType::Float64);
  Tensor strided = x.t().contiguous().t();
  ASSERT_FALSE(strided.is_contiguous());
  EXPECT_EQ(sum(x).item<double>(), 78.0);
  EXPECT_EQ(sum(strided).item<double>(), 78.0);
}

}  // namespace
}  // namespace mixtape::testing
