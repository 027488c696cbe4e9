// bench/layers.cpp — forward and forward + backward time of each SmallCNN layer at batch 128,
// in f32 and under f16 / bf16 autocast: the mixtape half of bench/suite.sh's table (b)
// (bench/torch_suite.py times PyTorch's same layers on the same shapes).
//
//   build-bench/bench/bench_layers --benchmark_repetitions=5     # names: layer/<layer>/<mode>/<pass>
//
// Layers and the inputs they get in SmallCNN's training step (batch B = 128):
//   conv1  Conv2d(1, 32, 3, pad 1) on (B, 1, 28, 28) f32, input needs no grad (it is the batch)
//   pool   max_pool2d(2) on (B, 32, 28, 28), conv1's output: the first pooling
//   conv2  Conv2d(32, 64, 3, pad 1) on (B, 32, 14, 14)
//   fc1    Linear(3136, 128) on (B, 3136)
//   loss   cross_entropy on (B, 10) logits and (B) Int64 targets
// Under autocast an input that a 16-bit layer would hand on arrives in that dtype (pool, conv2,
// fc1, and the logits); conv1's input stays f32, as the batch does. Every input but conv1's
// requires grad, as in training, so backward computes both the input and the weight gradients.
// `fwd` is forward with grad recording (the tape is freed each iteration); `fwdbwd` adds
// backward with a ones gradient (the loss: its own seed) and clears .grad afterwards, so every
// iteration does the same work; backward alone is fwdbwd - fwd. Threads: OMP_NUM_THREADS.
#include <benchmark/benchmark.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mixtape/mixtape.h"

namespace {

using namespace mixtape;

constexpr int64_t kBatch = 128;

struct Mode {
  const char* name;
  std::optional<DType> autocast;
};

// One layer, ready to run: its parameters, its input and the forward call.
struct Layer {
  std::vector<Tensor> params;
  Tensor input, target;  // target: the loss only
  std::function<Tensor(const Tensor&)> forward;
};

// Builds `name` with the input it sees in training; 16-bit where autocast would hand it on so.
Layer make_layer(const std::string& name, const Mode& mode) {
  manual_seed(0);
  Generator g(1);
  const DType act = mode.autocast.value_or(DType::Float32);
  auto input = [&](IntList shape, DType dt, bool grad) {
    Tensor t = randn(shape, {}, &g).to(dt);
    if (grad) t.requires_grad_(true);
    return t;
  };
  Layer l;
  if (name == "conv1" || name == "conv2") {
    const bool first = name == "conv1";
    auto conv = std::make_shared<nn::Conv2d>(first ? 1 : 32, first ? 32 : 64, 3, nn::Conv2dOptions{.padding = {1}});
    l.params = conv->parameters();
    l.input = first ? input({kBatch, 1, 28, 28}, DType::Float32, false) : input({kBatch, 32, 14, 14}, act, true);
    l.forward = [conv](const Tensor& x) { return conv->forward(x); };
  } else if (name == "fc1") {
    auto fc = std::make_shared<nn::Linear>(64 * 7 * 7, 128);
    l.params = fc->parameters();
    l.input = input({kBatch, 64 * 7 * 7}, act, true);
    l.forward = [fc](const Tensor& x) { return fc->forward(x); };
  } else if (name == "pool") {
    l.input = input({kBatch, 32, 28, 28}, act, true);
    l.forward = [](const Tensor& x) { return max_pool2d(x, {2, 2}); };
  } else {  // loss
    l.input = input({kBatch, 10}, act, true);
    l.target = (rand({kBatch}, {}, &g) * 10.0).to(DType::Int64);
    l.forward = [t = l.target](const Tensor& x) { return cross_entropy(x, t); };
  }
  return l;
}

void clear_grads(const Layer& l) {
  for (const Tensor& p : l.params) p.set_grad(Tensor());
  if (l.input.requires_grad()) l.input.set_grad(Tensor());
}

void BM_layer(benchmark::State& state, const std::string& name, Mode mode, bool backward) {
  Layer l = make_layer(name, mode);
  auto run = [&] {
    std::optional<amp::AutocastGuard> guard;
    if (mode.autocast) guard.emplace(DeviceType::CPU, *mode.autocast);
    return l.forward(l.input);
  };
  const Tensor seed = name == "loss" ? Tensor() : ones_like(run());  // (shape of y), y's dtype
  for (auto _ : state) {
    Tensor y = run();
    if (backward) {
      y.backward(seed);
      clear_grads(l);
    }
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);  // images/s of this layer alone
}

// Registered at static-initialisation time, like BENCHMARK(), in a fixed order.
const bool registered = [] {
  const Mode modes[] = {{"f32", std::nullopt}, {"f16", DType::Float16}, {"bf16", DType::BFloat16}};
  for (const char* layer : {"conv1", "pool", "conv2", "fc1", "loss"})
    for (const Mode& m : modes)
      for (bool bwd : {false, true}) {
        const std::string n = std::string("layer/") + layer + "/" + m.name + (bwd ? "/fwdbwd" : "/fwd");
        benchmark::RegisterBenchmark(n.c_str(), BM_layer, std::string(layer), m, bwd)->Unit(benchmark::kMicrosecond)->UseRealTime();
      }
  return true;
}();

}  // namespace
