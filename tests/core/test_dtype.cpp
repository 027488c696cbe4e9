// tests/core/test_dtype.cpp — dtype traits and PyTorch's promotion rules.
#include <gtest/gtest.h>

#include <mixtape/mixtape.h>

namespace mixtape {
namespace {

TEST(DType, TraitsTable) {
  EXPECT_EQ(element_size(DType::Float16), 2u);
  EXPECT_EQ(element_size(DType::BFloat16), 2u);
  EXPECT_EQ(element_size(DType::Float64), 8u);
  EXPECT_EQ(element_size(DType::Bool), 1u);
  EXPECT_TRUE(is_floating(DType::BFloat16));
  EXPECT_FALSE(is_floating(DType::Int64));
  EXPECT_TRUE(is_reduced_float(DType::Float16));
  EXPECT_EQ(dtype_name(DType::BFloat16), "BFloat16");
  EXPECT_EQ(dtype_short(DType::Float16), "f16");
  EXPECT_EQ(dtype_v<Half>, DType::Float16);
  EXPECT_EQ(dtype_v<int64_t>, DType::Int64);
}

// Rows checked against torch.promote_types (PyTorch 1.13).
TEST(DType, PromoteTypesMatchesPyTorch) {
  struct Row {
    DType a, b, want;
  } rows[] = {
      {DType::Float16, DType::BFloat16, DType::Float32}, {DType::Float16, DType::Float32, DType::Float32},
      {DType::BFloat16, DType::Float64, DType::Float64}, {DType::Int64, DType::Float16, DType::Float16},
      {DType::UInt8, DType::Int32, DType::Int32},        {DType::Bool, DType::UInt8, DType::UInt8},
      {DType::Bool, DType::Float16, DType::Float16},     {DType::Int32, DType::Int64, DType::Int64},
      {DType::Float32, DType::Float64, DType::Float64},  {DType::Bool, DType::Bool, DType::Bool},
  };
  for (auto& r : rows) {
    EXPECT_EQ(promote_types(r.a, r.b), r.want) << r.a << " + " << r.b;
    EXPECT_EQ(promote_types(r.b, r.a), r.want) << r.b << " + " << r.a;
  }
}

TEST(DType, ResultTypeWithScalarsAndZeroDim) {
  Tensor h = zeros({2}, DType::Float16);
  Tensor i = zeros({2}, DType::Int64);
  EXPECT_EQ(result_type(h, wrapped_scalar(2.5)), DType::Float16);   // weak scalar keeps f16
  EXPECT_EQ(result_type(i, wrapped_scalar(2.5)), DType::Float32);   // int * float -> default float
  EXPECT_EQ(result_type(i, wrapped_scalar(int64_t(3))), DType::Int64);
  EXPECT_EQ(result_type(h, zeros({}, DType::Float64)), DType::Float16);  // 0-d same category is weak
  EXPECT_EQ(result_type(i, zeros({}, DType::Float64)), DType::Float64);  // higher category wins
  EXPECT_EQ(result_type(h, zeros({2}, DType::Float32)), DType::Float32);
  EXPECT_EQ((h * 2.5).dtype(), DType::Float16);
  EXPECT_EQ((i * 2.5).dtype(), DType::Float32);
  EXPECT_EQ((h + zeros({2}, DType::Float32)).dtype(), DType::Float32);
}

TEST(Device, ParseAndPrint) {
  EXPECT_EQ(Device::parse("cpu"), Device::CPU());
  EXPECT_EQ(Device::parse("cuda:1"), Device::CUDA(1));
  EXPECT_EQ(Device::CUDA(2).str(), "cuda:2");
  EXPECT_THROW(Device::parse("tpu"), Error);
  EXPECT_THROW(Device::parse("cuda:x"), Error);
}

}  // namespace
}  // namespace mixtape
