// bench/torch_op_overhead.cpp — PyTorch's C++ API (Debian's libtorch-dev 1.13) running the
// bodies of bench/op_overhead.cpp, name for name, so suite.sh can set mixtape's fixed cost per
// op beside libtorch's (table (c)). Built only with -DMIXTAPE_BENCH_TORCH=ON and a Torch CMake
// package (bench/CMakeLists.txt); nothing in mixtape links libtorch.
//
//   build-bench/bench/bench_torch_op_overhead --benchmark_repetitions=5
//
// Invariant, as in op_overhead.cpp: every iteration does the same work (.grad is reset to an
// undefined tensor, no graph survives an iteration). Only the headers of ATen and the autograd
// variable API are included, not <torch/torch.h>: the same calls compile in a third of the time.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/csrc/autograd/variable.h>

namespace {

// (1,) f32 holding `v`; a leaf that requires grad when `grad` is set.
at::Tensor one_element(float v, bool grad) {
  return torch::full({1}, v, at::TensorOptions().dtype(at::kFloat).requires_grad(grad));
}

void BM_empty_1(benchmark::State& state) {
  for (auto _ : state) {
    at::Tensor t = at::empty({1});
    benchmark::DoNotOptimize(t.data_ptr());
  }
}
BENCHMARK(BM_empty_1);

void BM_add_1_no_grad(benchmark::State& state) {
  at::Tensor a = one_element(1.f, false), b = one_element(2.f, false);
  for (auto _ : state) {
    at::Tensor y = at::add(a, b);
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
BENCHMARK(BM_add_1_no_grad);

void BM_add_1_no_grad_guard(benchmark::State& state) {
  at::Tensor a = one_element(1.f, true), b = one_element(2.f, true);
  at::NoGradGuard no_grad;
  for (auto _ : state) {
    at::Tensor y = at::add(a, b);
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
BENCHMARK(BM_add_1_no_grad_guard);

void BM_add_1_grad_forward(benchmark::State& state) {
  at::Tensor a = one_element(1.f, true), b = one_element(2.f, true);
  for (auto _ : state) {
    at::Tensor y = at::add(a, b);
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
BENCHMARK(BM_add_1_grad_forward);

void BM_add_1_grad_forward_backward(benchmark::State& state) {
  at::Tensor a = one_element(1.f, true), b = one_element(2.f, true);
  for (auto _ : state) {
    at::Tensor y = at::add(a, b);
    y.backward();
    benchmark::DoNotOptimize(a.grad().data_ptr());
    a.mutable_grad().reset();
    b.mutable_grad().reset();
  }
}
BENCHMARK(BM_add_1_grad_forward_backward);

void BM_mul_1_grad_forward(benchmark::State& state) {
  at::Tensor a = one_element(1.f, true), b = one_element(2.f, true);
  for (auto _ : state) {
    at::Tensor y = at::mul(a, b);
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
BENCHMARK(BM_mul_1_grad_forward);

void BM_relu_1_grad_forward(benchmark::State& state) {
  at::Tensor x = one_element(1.f, true);
  for (auto _ : state) {
    at::Tensor y = at::relu(x);
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
BENCHMARK(BM_relu_1_grad_forward);

}  // namespace
