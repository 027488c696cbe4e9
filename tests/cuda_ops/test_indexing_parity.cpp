// tests/cuda_ops/test_indexing_parity.cpp — CUDA vs CPU for gather, scatter_add, index_select,
// index_select_backward, cat and slice_backward, on fresh inputs. Gathers, copies and concatenations
// move values: exact. Scatters with unique targets add one value to a zero: exact; with repeated
// targets the atomic additions run in another order than the CPU's: the sum bound
// 2 (n - 1) u(acc) sum|terms| + 2 u(storage) |result| (cuda_test_util.h), n <= 3 here.
#include "cuda_test_util.h"

#include <functional>

#include "common/error_of.h"

namespace mixtape {
namespace {
using namespace cuda_test;

Tensor index_tensor(std::mt19937_64& rng, const IntList& shape, int64_t n) {
  std::uniform_int_distribution<int64_t> d(0, n - 1);
  Tensor t = Tensor::empty(shape, TensorOptions(DType::Int64));
  for (int64_t i = 0; i < t.numel(); ++i) set_element(t, i, static_cast<double>(d(rng)));
  return t;
}

TEST(CudaIndexingParity, GatherScatterIndexSelectCatSlice) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (DType dt : kFloatTypes) {
    const std::string t = short_name(dt);
    // Repeated targets: at most 6 terms of |x| <= 2 each: 2 * 5 * u(acc) * 12 < 128 u(acc) absolute.
    const double atol = 128 * acc_roundoff(dt), rtol = 2 * unit_roundoff(dt);
    const Tensor x = random_input(rng, {5, 7, 4}, dt);
    const Tensor xs = random_input(rng, {4, 7, 5}, dt).transpose(0, 2);  // strided (5, 7, 4)
    for (int64_t dim : {0, 1, 2}) {
      IntList ishape{5, 3, 4};
      ishape[static_cast<size_t>(dim)] = 6;
      if (dim == 1) ishape = {5, 6, 4};
      const Tensor idx = index_tensor(rng, ishape, x.size(dim));
      const std::string what = t + " dim " + std::to_string(dim);
      EXPECT_TRUE(exact(gather(x, dim, idx), gather(on_cuda(x), dim, on_cuda(idx)), "gather " + what));
      EXPECT_TRUE(exact(gather(xs, dim, idx), gather(on_cuda(xs), dim, on_cuda(idx)), "gather strided " + what));
      const Tensor src = random_input(rng, ishape, dt);
      EXPECT_TRUE(close(scatter_add_into_zeros(src, dim, idx, x.sizes()),
                        scatter_add_into_zeros(on_cuda(src), dim, on_cuda(idx), x.sizes()), atol, rtol,
                        "scatter_add " + what));
      const Tensor i1 = index_tensor(rng, {9}, x.size(dim));
      const Tensor sel = index_select(x, dim, i1);
      EXPECT_TRUE(exact(sel, index_select(on_cuda(x), dim, on_cuda(i1)),
                        "index_select " + what));
      const Tensor g = random_input(rng, sel.sizes(), dt);
      EXPECT_TRUE(close(index_select_backward(g, x.sizes(), dim, i1),
                        index_select_backward(on_cuda(g), x.sizes(), dim, on_cuda(i1)), atol, rtol,
                        "index_select_backward " + what));
      const Tensor y = random_input(rng, x.sizes(), DType::Float32);
      EXPECT_TRUE(exact(cat({x, y, xs}, dim), cat({on_cuda(x), on_cuda(y), on_cuda(xs)}, dim), "cat promote " + what));
      // slice's backward: slice_backward through autograd.
      Tensor xc = x.clone().requires_grad_(), xg = on_cuda(x).detach().requires_grad_();
      const Tensor gs = random_input(rng, slice(x, dim, 1, 5, 2).sizes(), dt);
      slice(xc, dim, 1, 5, 2).backward(gs);
      slice(xg, dim, 1, 5, 2).backward(on_cuda(gs));
      EXPECT_TRUE(exact(xc.grad(), xg.grad(), "slice_backward " + what));
    }
  }
  // Out-of-range indices are located errors on CUDA too, with the CPU's messages: found by the
  // kernels, reported at the next synchronisation (core/cuda/deferred_check.h); meanwhile the
  // element reads 0. Each of index_select and gather, forward and backward.
  Tensor bad = Tensor::empty({2}, TensorOptions(DType::Int64));
  set_element(bad, 0, 0);
  set_element(bad, 1, 9);
  const Tensor x = random_input(rng, {3, 2}, DType::Float32);
  struct Case {
    std::string what;
    std::function<Tensor()> run;
    std::string message;
  };
  Tensor bad2 = Tensor::empty({2, 1}, TensorOptions(DType::Int64));
  set_element(bad2, 0, 1);
  set_element(bad2, 1, -1);
  const std::vector<Case> cases = {
      {"index_select", [&] { return index_select(on_cuda(x), 0, on_cuda(bad)); },
       "index_select: index 9 at position 1 is out of bounds for dimension 0 with size 3"},
      {"index_select_backward",
       [&] { return index_select_backward(on_cuda(ones({2, 2}, TensorOptions(DType::Float32))), {3, 2}, 0, on_cuda(bad)); },
       "index_select_backward: index 9 at position 1 is out of bounds for dimension 0 with size 3"},
      {"index_select of an empty selection",  // no element moves, the indices are still checked (as the CPU)
       [&] { return index_select(on_cuda(Tensor::empty({3, 0}, TensorOptions(DType::Float32))), 0, on_cuda(bad)); },
       "index_select: index 9 at position 1 is out of bounds for dimension 0 with size 3"},
      {"gather", [&] { return gather(on_cuda(x), 1, on_cuda(bad2)); },
       "gather: index -1 is out of bounds for dimension 1 with size 2 (at index position 1)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Tensor out;
    const std::string e = ::mixtape::testing::error_of([&] {
      out = c.run();
      out.to(Device::CPU());
    });
    EXPECT_NE(e.find(c.message), std::string::npos) << e;
    if (!selfcheck()) {
      EXPECT_NE(e.find("(found on the device, reported at the next synchronisation)"), std::string::npos) << e;
      EXPECT_NO_THROW(out.to(Device::CPU()));
    }
  }
}

}  // namespace
}  // namespace mixtape
