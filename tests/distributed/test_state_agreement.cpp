// tests/distributed/test_state_agreement.cpp — distributed/state_agreement.h in one process:
// tensor_digest sees values, dtype and shape but not the memory layout; the all-ranks check of a
// world of one passes. (Ranks that differ: ctest example_train_ranks_agree, under mpirun.)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "distributed/state_agreement.h"
#include "mixtape/mixtape.h"

namespace mixtape {
namespace {

TEST(TensorDigest, EqualValuesEqualDigestsAndOneBitChangesIt) {
  Tensor a = arange(0, 12, 1, TensorOptions(DType::Float32)).reshape({3, 4});
  Tensor b = a.clone();
  EXPECT_EQ(distributed::tensor_digest(a), distributed::tensor_digest(b));
  EXPECT_EQ(distributed::tensor_digest(a).substr(0, 11), "f32[3, 4] #");
  // A transposed copy made contiguous digests like the transposed view (values, not strides).
  EXPECT_EQ(distributed::tensor_digest(a.t()), distributed::tensor_digest(a.t().contiguous()));
  EXPECT_NE(distributed::tensor_digest(a.t()), distributed::tensor_digest(a));
  // One bit of any element, in a full 8-byte word or in the byte-by-byte tail (13 floats: 52
  // bytes, the last 4 a tail).
  Tensor v = arange(0, 13, 1, TensorOptions(DType::Float32));
  for (int64_t i : {0, 5, 11, 12}) {
    Tensor c = v.clone();
    uint32_t bits;
    std::memcpy(&bits, c.data_ptr<float>() + i, 4);
    bits ^= 1u;
    std::memcpy(c.data_ptr<float>() + i, &bits, 4);
    EXPECT_NE(distributed::tensor_digest(c), distributed::tensor_digest(v)) << i;
  }
  // Same bytes, other shape or dtype: other digests.
  EXPECT_NE(distributed::tensor_digest(a.reshape({4, 3})), distributed::tensor_digest(a));
  EXPECT_EQ(distributed::tensor_digest(Tensor()), "undefined");
}

TEST(StateAgreement, AWorldOfOneAgreesWithItself) {
  distributed::ProcessGroup& pg = distributed::init_process_group();
  ASSERT_EQ(pg.world_size(), 1);
  distributed::check_same_on_all_ranks(pg, {{"epoch", "2"}}, "state");
}

}  // namespace
}  // namespace mixtape
