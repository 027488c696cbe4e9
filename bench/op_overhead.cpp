// bench/op_overhead.cpp — the fixed cost mixtape adds to every op call, measured on 1-element
// f32 tensors where the arithmetic itself is one instruction: dispatch, type promotion, output
// allocation, and (with grad) building the tape node and saving its inputs. One large `add`
// shows the other end: elementwise throughput in GB/s once the fixed cost is amortised.
// Invariant: every benchmark body does the same work each iteration (grads are cleared, no
// graph is kept between iterations), so per-iteration times are comparable across runs.
//
// Target from the issue (context, not a test): < 1 µs per op forward with grad recording.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "mixtape/mixtape.h"

namespace {

using mixtape::Tensor;
using mixtape::TensorOptions;

constexpr int64_t kLarge = 1'000'000;  // elements of the throughput case

// (1,) f32 holding `v`; a leaf that requires grad when `grad` is set.
Tensor one_element(float v, bool grad) {
  return mixtape::full({1}, v, TensorOptions().with_requires_grad(grad));
}

// Reference point: what an output allocation alone costs (every op below makes one).
void BM_empty_1(benchmark::State& state) {
  for (auto _ : state) {
    Tensor t = Tensor::empty({1});
    benchmark::DoNotOptimize(t.data_ptr());
  }
}
BENCHMARK(BM_empty_1);

// (a) inputs do not require grad: nothing is recorded.
void BM_add_1_no_grad(benchmark::State& state) {
  Tensor a = one_element(1.f, false), b = one_element(2.f, false);
  for (auto _ : state) {
    Tensor y = mixtape::add(a, b);
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
BENCHMARK(BM_add_1_no_grad);

// (a') inputs require grad but NoGradGuard is active: the grad-mode check's own cost.
void BM_add_1_no_grad_guard(benchmark::State& state) {
  Tensor a = one_element(1.f, true), b = one_element(2.f, true);
  mixtape::NoGradGuard no_grad;
  for (auto _ : state) {
    Tensor y = mixtape::add(a, b);
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
BENCHMARK(BM_add_1_no_grad_guard);

// (b) forward with grad recording: the node is built, then freed when y goes out of scope.
void BM_add_1_grad_forward(benchmark::State& state) {
  Tensor a = one_element(1.f, true), b = one_element(2.f, true);
  for (auto _ : state) {
    Tensor y = mixtape::add(a, b);
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
BENCHMARK(BM_add_1_grad_forward);

// (c) forward + backward; .grad is cleared each iteration so accumulation never adds an op.
void BM_add_1_grad_forward_backward(benchmark::State& state) {
  Tensor a = one_element(1.f, true), b = one_element(2.f, true);
  for (auto _ : state) {
    Tensor y = mixtape::add(a, b);
    y.backward();
    benchmark::DoNotOptimize(a.grad().data_ptr());
    a.set_grad(Tensor());
    b.set_grad(Tensor());
  }
}
BENCHMARK(BM_add_1_grad_forward_backward);

// (d) other ops forward with grad: mul saves both inputs, relu computes and saves a 1-bit mask.
void BM_mul_1_grad_forward(benchmark::State& state) {
  Tensor a = one_element(1.f, true), b = one_element(2.f, true);
  for (auto _ : state) {
    Tensor y = mixtape::mul(a, b);
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
BENCHMARK(BM_mul_1_grad_forward);

void BM_relu_1_grad_forward(benchmark::State& state) {
  Tensor x = one_element(1.f, true);
  for (auto _ : state) {
    Tensor y = mixtape::relu(x);
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
BENCHMARK(BM_relu_1_grad_forward);

// (e) throughput: (1e6,) f32 + (1e6,) f32 -> (1e6,) f32, 12 MB moved per call (2 reads, 1 write).
void BM_add_1M_no_grad(benchmark::State& state) {
  Tensor a = mixtape::rand({kLarge}), b = mixtape::rand({kLarge});
  for (auto _ : state) {
    Tensor y = mixtape::add(a, b);
    benchmark::DoNotOptimize(y.data_ptr());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * kLarge * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_add_1M_no_grad)->UseRealTime();

// Ceiling for (e): the same loop written by hand, output freshly allocated like add's.
void BM_add_1M_raw_loop(benchmark::State& state) {
  std::vector<float> a(kLarge, 1.f), b(kLarge, 2.f);
  for (auto _ : state) {
    auto y = std::make_unique_for_overwrite<float[]>(kLarge);  // uninitialised, like Tensor::empty
    for (int64_t i = 0; i < kLarge; ++i) y[i] = a[i] + b[i];
    benchmark::DoNotOptimize(y.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * kLarge * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_add_1M_raw_loop)->UseRealTime();

}  // namespace
