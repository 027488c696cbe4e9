// tests/core/test_tensor.cpp — tensors, views, factories, element access, printing, allocator
// statistics, RNG determinism, and the errors bad input must produce.
#include <gtest/gtest.h>
#include <omp.h>

#include <mixtape/mixtape.h>

#include "common/error_of.h"
#include "core/cuda_api.h"

namespace mixtape {
namespace {

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

using testing::error_of;

TEST(Tensor, FactoriesAndMetadata) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.dim(), 2);
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.strides(), (IntList{3, 1}));
  EXPECT_EQ(z.dtype(), DType::Float32);
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(vals(ones({2}, DType::Float16)), (std::vector<double>{1, 1}));
  EXPECT_EQ(vals(full({3}, 2.5, DType::BFloat16)), (std::vector<double>{2.5, 2.5, 2.5}));
  EXPECT_EQ(vals(arange(5, DType::Int64)), (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(0, 5).dtype(), DType::Int64);
  EXPECT_EQ(arange(0.0, 1.0, 0.25).dtype(), DType::Float32);
  EXPECT_EQ(vals(arange(0.0, 1.0, 0.25)), (std::vector<double>{0, 0.25, 0.5, 0.75}));
  auto ls = vals(linspace(0, 1, 5, DType::Float64));
  EXPECT_EQ(ls, (std::vector<double>{0, 0.25, 0.5, 0.75, 1.0}));
  Tensor t = tensor({{1.0, 2.0}, {3.0, 4.0}});
  EXPECT_EQ(t.sizes(), (IntList{2, 2}));
}

TEST(Tensor, FromVectorAndBlob) {
  std::vector<float> data{1, 2, 3, 4, 5, 6};
  bool freed = false;
  {
    Tensor t = from_blob(data.data(), {2, 3}, DType::Float32, [&](void*) { freed = true; });
    EXPECT_EQ(get_element(t, 4), 5.0);
    set_element(t, 0, 9.0);
    EXPECT_EQ(data[0], 9.0f);  // shares the caller's memory
  }
  EXPECT_TRUE(freed);
  Tensor v = tensor_from(std::vector<int32_t>{1, 2, 3}, {3}, DType::Float16);
  EXPECT_EQ(v.dtype(), DType::Float16);
  EXPECT_EQ(vals(v), (std::vector<double>{1, 2, 3}));
}

TEST(Tensor, ViewsShareStorage) {
  Tensor a = arange(0.0, 12.0, 1.0).reshape({3, 4});
  Tensor t = a.t();
  EXPECT_EQ(t.sizes(), (IntList{4, 3}));
  EXPECT_EQ(t.strides(), (IntList{1, 4}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.storage().get(), a.storage().get());
  Tensor row = a.select(0, 1);
  EXPECT_EQ(vals(row), (std::vector<double>{4, 5, 6, 7}));
  Tensor sl = a.slice(1, 0, 4, 2);
  EXPECT_EQ(vals(sl), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  Tensor e = tensor({1.0, 2.0}).unsqueeze(1).expand({2, 3});
  EXPECT_EQ(e.strides(), (IntList{1, 0}));
  EXPECT_EQ(vals(e), (std::vector<double>{1, 1, 1, 2, 2, 2}));
  // Writes through a view reach the base and bump the shared version.
  uint32_t v0 = a.version();
  row.fill_(-1.0);
  EXPECT_EQ(get_element(a, 5), -1.0);
  EXPECT_GT(a.version(), v0);
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage().get(), a.storage().get());
  EXPECT_EQ(get_element(c, 1), get_element(a, 4));
  EXPECT_EQ(a.permute({1, 0}).sizes(), (IntList{4, 3}));
  EXPECT_EQ(a.flatten().sizes(), (IntList{12}));
  EXPECT_EQ(a.view({2, -1}).sizes(), (IntList{2, 6}));
  EXPECT_EQ(a.narrow(1, 1, 2).sizes(), (IntList{3, 2}));
  EXPECT_EQ(a.unsqueeze(0).squeeze(0).sizes(), (IntList{3, 4}));
}

// As in PyTorch (c10's contiguity rule): a tensor with no elements is contiguous whatever its
// strides, so it views and reshapes to any shape with no elements.
TEST(Tensor, EmptyTensorsAreContiguousAndReshape) {
  Tensor e = Tensor::empty({3, 0});
  EXPECT_EQ(e.strides(), (IntList{1, 1}));  // PyTorch's strides for (3, 0)
  EXPECT_TRUE(e.is_contiguous());
  EXPECT_TRUE(Tensor::empty({2, 0, 3}).is_contiguous());
  EXPECT_TRUE(e.t().is_contiguous());
  EXPECT_EQ(e.reshape({0, 5}).sizes(), (IntList{0, 5}));
  EXPECT_EQ(e.view({5, 0, 2}).sizes(), (IntList{5, 0, 2}));
  EXPECT_EQ(Tensor::empty({2, 0, 3}).reshape({6, 0}).sizes(), (IntList{6, 0}));
  EXPECT_EQ(e.contiguous().sizes(), (IntList{3, 0}));
  EXPECT_NE(error_of([&] { e.view({1}); }), "");  // still 0 elements only
}

TEST(Tensor, ItemAndCasts) {
  EXPECT_EQ(tensor({2.5}).item<double>(), 2.5);
  EXPECT_EQ(full({}, 3.0, DType::Int32).item<int>(), 3);
  Tensor h = tensor({0.1}).to(DType::Float16);
  EXPECT_EQ(h.item<Half>().bits, 0x2E66);  // RNE of 0.1f (docs/amp-behaviours.md, Conversion facts)
  Tensor b = tensor({0.1}).to(DType::BFloat16);
  EXPECT_EQ(b.item<BFloat16>().bits, 0x3DCD);
  EXPECT_EQ(tensor({70000.0}).to(DType::Float16).item<float>(), INFINITY);
  EXPECT_EQ(vals(tensor({-1.7, 2.2}).to(DType::Int64)), (std::vector<double>{-1, 2}));  // truncation
  EXPECT_EQ(vals(tensor({0.0, 2.0}).to(DType::Bool)), (std::vector<double>{0, 1}));
  Tensor same = tensor({1.0});
  EXPECT_TRUE(same.to(DType::Float32).is_same(same));
}

TEST(Tensor, PrintingLikePyTorch) {
  EXPECT_EQ(to_string(tensor({{1.0, 2.0}, {3.0, 4.0}})),
            "tensor([[1., 2.],\n        [3., 4.]], shape=[2, 2], dtype=f32)");
  EXPECT_EQ(to_string(tensor({0.5, -1.25}, DType::Float16)), "tensor([0.5000, -1.2500], shape=[2], dtype=f16)");
  Tensor x = tensor({1.0}).requires_grad_();
  EXPECT_EQ(to_string(x), "tensor([1.], shape=[1], dtype=f32, requires_grad=true)");
  EXPECT_EQ(to_string(x * 2.0), "tensor([2.], shape=[1], dtype=f32, grad_fn=<MulBackward>)");
  EXPECT_EQ(to_string(full({}, 7.0, DType::Int64)), "tensor(7, shape=[], dtype=i64)");
  std::string big = to_string(zeros({2000}));
  EXPECT_NE(big.find("..."), std::string::npos);
}

TEST(Allocator, StatisticsTrackCurrentPeakAndCount) {
  reset_peak_memory();
  AllocatorStats s0 = memory_stats();
  {
    Tensor t = empty({1024}, DType::Float32);  // 4 KiB
    AllocatorStats s1 = memory_stats();
    EXPECT_EQ(s1.current_bytes - s0.current_bytes, 4096);
    EXPECT_EQ(s1.allocation_count - s0.allocation_count, 1);
    EXPECT_GE(s1.peak_bytes, s0.current_bytes + 4096);
  }
  AllocatorStats s2 = memory_stats();
  EXPECT_EQ(s2.current_bytes, s0.current_bytes);
  EXPECT_GE(s2.peak_bytes, s0.current_bytes + 4096);
  reset_peak_memory();
  EXPECT_EQ(memory_stats().peak_bytes, memory_stats().current_bytes);
  // Half the bytes for 16-bit storage: what AMP's memory saving rests on.
  Tensor h = empty({1024}, DType::Float16);
  EXPECT_EQ(memory_stats().current_bytes - s2.current_bytes, 2048);
}

TEST(Rng, SeededAndIndependentOfThreadCount) {
  manual_seed(42);
  Tensor a = randn({100000});
  manual_seed(42);
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  Tensor b = randn({100000});
  omp_set_num_threads(saved);
  EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0);
  Tensor c = randn({100000});  // the stream moved on
  EXPECT_NE(std::memcmp(a.data_ptr(), c.data_ptr(), a.nbytes()), 0);
  // Moments of 1e5 normals: mean within ~4 sigma (4/sqrt(n) = 0.013), variance likewise.
  double m = mean(a.to(DType::Float64)).item<double>();
  double var = mean(pow(a.to(DType::Float64) - m, 2.0)).item<double>();
  EXPECT_NEAR(m, 0.0, 0.013);
  EXPECT_NEAR(var, 1.0, 0.02);
  Tensor u = rand({100000});
  EXPECT_GE(amax(u, 0).item<float>(), 0.999f);
  EXPECT_LT(amax(u, 0).item<float>(), 1.0f);
  EXPECT_GE(-amax(-u, 0).item<float>(), 0.0f);
  Generator g1(7), g2(7);
  EXPECT_EQ(std::memcmp(rand({10}, {}, &g1).data_ptr(), rand({10}, {}, &g2).data_ptr(), 40), 0);
}

TEST(Philox, KnownAnswer) {
  // Random123's published known-answer vector for philox4x32-10, counter = key = 0.
  auto r = philox4x32_10(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
}

TEST(BadInput, ClearErrors) {
  Tensor a = zeros({2, 3}), b = zeros({4, 3});
  EXPECT_NE(error_of([&] { a + b; }).find("add: shapes [2, 3] and [4, 3] cannot be broadcast"), std::string::npos);
  EXPECT_NE(error_of([&] { a.item<float>(); }).find("item: only one-element tensors"), std::string::npos);
  EXPECT_NE(error_of([&] { a.size(2); }).find("dimension out of range (expected to be in range of [-2, 1], but got 2)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { a.select(0, 5); }).find("select: index 5 is out of bounds for dimension 0 with size 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { a.narrow(1, 2, 2); }).find("narrow: start (2) + length (2) exceeds dimension size (3)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { a.view({4, 2}); }).find("view: shape [4, 2] is invalid for input f32[2, 3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { a.t().view({6}); }).find("not contiguous; use reshape()"), std::string::npos);
  EXPECT_NE(error_of([&] { a.expand({3, 3}); }).find("expand: the expanded size (3) must match the existing size (2)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { zeros({2}, DType::Float32).matmul(zeros({2}, DType::Float64)); })
                .find("matmul: expected both operands to have the same dtype, got f32[1, 2] @ f64[2, 1]"),
            std::string::npos);
  Tensor i = zeros({2}, DType::Int64);
  EXPECT_NE(error_of([&] { i.add_(zeros({2}, DType::Float32)); })
                .find("add_: result type Float32 can't be cast to the desired output type Int64"),
            std::string::npos);
  EXPECT_NE(error_of([&] { a.permute({0, 0}); }).find("permute: dim 0 repeated"), std::string::npos);
  EXPECT_NE(error_of([&] { zeros({-1}); }).find("sizes must be non-negative"), std::string::npos);
  EXPECT_NE(error_of([&] { tensor({1.0, 2.0}, {3}); }).find("tensor: 2 values do not fill shape [3]"), std::string::npos);
  EXPECT_NE(error_of([&] { randn({2}, DType::Int64); }).find("randn: expected a floating dtype, got Int64"),
            std::string::npos);
  // A device that does not exist, whether or not this machine has a GPU (gpu-check runs this too).
  EXPECT_NE(error_of([&] { zeros({2}).to(Device::CUDA(cuda::device_count())); }).find("to_device"),
            std::string::npos);
}

}  // namespace
}  // namespace mixtape
