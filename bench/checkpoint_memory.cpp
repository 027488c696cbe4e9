// bench/checkpoint_memory.cpp — what autograd::checkpoint saves, in allocator bytes (exact and
// deterministic, unlike times): for a plain and a checkpointed forward, the peak inside the
// forward, the bytes kept for backward when it returns, and the peak of the backward, each over
// what was allocated before the forward began.
//
//   build/bench/checkpoint_memory [--batch 256] [--width 512] [--layers 8] [--resnet-batch 64] [--threads 2]
//
// Two setups, each in FP32 and under autocast FP16:
//   segment   one segment of `layers` x (linear width->width, relu) on a [batch, width] input,
//             checkpointed as a whole: the peak inside one segment's forward (the working set
//             of one op versus every activation the graph would save)
//   resnet20  ResNet-20 on [resnet-batch, 1, 28, 28] with checkpoint_activations (one segment
//             per residual block)
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mixtape/mixtape.h"

using namespace mixtape;

namespace {

struct Bytes {
  int64_t forward_peak = 0, kept = 0, backward_peak = 0;
};

// Runs forward() under the precision's region and backward on its result, measuring each phase
// from the bytes allocated when forward began.
Bytes measure(const std::function<Tensor()>& forward, std::optional<DType> autocast) {
  Bytes b;
  const int64_t start = memory_stats().current_bytes;
  reset_peak_memory();
  Tensor loss;
  {
    std::optional<amp::AutocastGuard> ac;
    if (autocast) ac.emplace(DeviceType::CPU, *autocast);
    loss = forward();
  }
  b.forward_peak = memory_stats().peak_bytes - start;
  b.kept = memory_stats().current_bytes - start;
  reset_peak_memory();
  loss.backward();
  b.backward_peak = memory_stats().peak_bytes - start;
  return b;
}

void print_row(const char* setup, const char* precision, const Bytes& plain, const Bytes& ckpt) {
  auto mib = [](int64_t n) { return static_cast<double>(n) / 1048576.0; };
  auto ratio = [](int64_t a, int64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0; };
  std::printf("%-9s %-6s  forward peak %12lld -> %12lld B (%7.2f -> %7.2f MiB, x%.2f)\n", setup, precision,
              static_cast<long long>(plain.forward_peak), static_cast<long long>(ckpt.forward_peak),
              mib(plain.forward_peak), mib(ckpt.forward_peak), ratio(ckpt.forward_peak, plain.forward_peak));
  std::printf("%-9s %-6s  kept         %12lld -> %12lld B (%7.2f -> %7.2f MiB, x%.2f)\n", "", "",
              static_cast<long long>(plain.kept), static_cast<long long>(ckpt.kept), mib(plain.kept), mib(ckpt.kept),
              ratio(ckpt.kept, plain.kept));
  std::printf("%-9s %-6s  backward peak%12lld -> %12lld B (%7.2f -> %7.2f MiB, x%.2f)\n", "", "",
              static_cast<long long>(plain.backward_peak), static_cast<long long>(ckpt.backward_peak),
              mib(plain.backward_peak), mib(ckpt.backward_peak), ratio(ckpt.backward_peak, plain.backward_peak));
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 256, width = 512, layers = 8, resnet_batch = 64;
  int threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--batch") batch = std::stoll(v);
    else if (a == "--width") width = std::stoll(v);
    else if (a == "--layers") layers = std::stoll(v);
    else if (a == "--resnet-batch") resnet_batch = std::stoll(v);
    else if (a == "--threads") threads = std::stoi(v);
    else {
      std::fprintf(stderr,
                   "usage: checkpoint_memory [--batch N] [--width N] [--layers N] [--resnet-batch N] [--threads N]\n");
      return 2;
    }
  }
  set_num_threads(threads);
  std::printf("plain -> checkpointed; bytes over what was allocated before the forward\n");
  try {
    const std::vector<std::pair<const char*, std::optional<DType>>> precisions = {{"fp32", std::nullopt},
                                                                                  {"fp16", DType::Float16}};
    // One segment of `layers` linear + relu.
    Generator g(1);
    std::vector<Tensor> ws;
    for (int64_t i = 0; i < layers; ++i)
      ws.push_back((randn({width, width}, {}, &g) * (1.0 / std::sqrt(static_cast<double>(width)))).requires_grad_());
    Tensor x = randn({batch, width}, {}, &g).requires_grad_();
    auto segment = [&](const Tensor& t) {
      Tensor h = t;
      for (const Tensor& w : ws) h = relu(linear(h, w));
      return h;
    };
    std::printf("segment: %lld x (linear %lld->%lld, relu) on [%lld, %lld]\n", static_cast<long long>(layers),
                static_cast<long long>(width), static_cast<long long>(width), static_cast<long long>(batch),
                static_cast<long long>(width));
    for (auto& [name, ac] : precisions) {
      Bytes plain = measure([&] { return sum(segment(x).to(DType::Float32)); }, ac);
      Bytes ckpt = measure([&] { return sum(autograd::checkpoint(segment, x).to(DType::Float32)); }, ac);
      print_row("segment", name, plain, ckpt);
    }

    // ResNet-20, one segment per residual block.
    std::printf("resnet20: batch %lld, [1, 28, 28]\n", static_cast<long long>(resnet_batch));
    manual_seed(0);
    models::ResNet net(20, 10, 1);
    Tensor img = randn({resnet_batch, 1, 28, 28}, {}, &g);
    Tensor y = (rand({resnet_batch}, {}, &g) * 10.0).to(DType::Int64);
    for (auto& [name, ac] : precisions) {
      Bytes r[2];
      for (int c = 0; c < 2; ++c) {
        net.checkpoint_activations = c == 1;
        net.zero_grad();
        // The first backward creates the .grad buffers; measure a step that finds them there.
        measure([&] { return cross_entropy(net.forward(img), y); }, ac);
        r[c] = measure([&] { return cross_entropy(net.forward(img), y); }, ac);
      }
      print_row("resnet20", name, r[0], r[1]);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "checkpoint_memory: %s\n", e.what());
    return 1;
  }
  return 0;
}
