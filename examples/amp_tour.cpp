// examples/amp_tour.cpp — one mixed-precision training step, narrated from the inside:
// the autocast decisions, the tape with its dtypes, the loss scale, the unscale, the skip
// decision and the master-weight update; then a step with an overflow, which is skipped.
//
//   build/examples/amp_tour
//
// docs/AMP.md follows the same step through the source code.
#include <cstdio>
#include <cstring>
#include <iostream>

#include "amp/grad_scaler.h"
#include "mixtape/mixtape.h"

using namespace mixtape;

namespace {

void section(const char* title) { std::printf("\n==== %s ====\n", title); }

std::string bits_of(const Tensor& t, int64_t i) {
  char buf[64];
  Tensor c = t.contiguous();
  if (c.dtype() == DType::Float16) {
    Half h = c.data_ptr<Half>()[i];
    std::snprintf(buf, sizeof buf, "%.8g (f16 0x%04X)", static_cast<double>(static_cast<float>(h)), h.bits);
  } else {
    float f = c.to(DType::Float32).data_ptr<float>()[i];
    uint32_t u;
    std::memcpy(&u, &f, 4);
    std::snprintf(buf, sizeof buf, "%.9g (f32 0x%08X)", static_cast<double>(f), u);
  }
  return buf;
}

}  // namespace

int main() {
  manual_seed(0);
  nn::Sequential model(std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Linear>(8, 3));
  Tensor x = randn({5, 4});
  Tensor y = tensor({0.0, 2.0, 1.0, 1.0, 0.0}, DType::Int64);
  optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  amp::GradScaler scaler;  // init 65536, growth x2 every 2000 clean steps, backoff x0.5
  Tensor w0 = model.parameters()[0];

  section("1. forward + loss inside autocast (CPU, Float16)");
  std::puts("Each line is one autocast decision (MIXTAPE_TRACE=amp prints them in any program):");
  Tensor logits, loss;
  {
    amp::AutocastGuard autocast(DeviceType::CPU, DType::Float16);
    ScopedTrace trace(static_cast<uint32_t>(TraceKind::Amp));
    logits = model.forward(x);        // linear: lower precision; relu: runs in f16 as given
    loss = cross_entropy(logits, y);  // fp32 policy: the logits are cast up
  }
  std::printf("logits came out %s, the loss %s; weight-cast cache emptied at the region's end (size %zu)\n",
              std::string(dtype_short(logits.dtype())).c_str(), std::string(dtype_short(loss.dtype())).c_str(),
              amp::autocast_cache_size());

  section("2. the tape (what backward will replay), with dtypes");
  std::cout << autograd::tape_string(loss);

  section("3. scale the loss, backward outside the region");
  Tensor scaled = scaler.scale(loss);
  std::printf("loss = %.6f, scale S = %.0f, scaled loss = %.1f\n", loss.item<double>(), scaler.get_scale(),
              scaled.item<double>());
  scaled.backward();
  std::printf("w0.grad is %s (f32 leaf -> f32 grad, cast back at the cast node); w0.grad[0] = %s (scaled by S)\n",
              w0.grad().describe().c_str(), bits_of(w0.grad(), 0).c_str());

  section("4. unscale_: one fused pass, grad *= float(1/double(S)), and an inf/NaN check");
  scaler.unscale_(opt);
  std::printf("w0.grad[0] = %s (true units now; clip_grad_norm_ would go here)\n", bits_of(w0.grad(), 0).c_str());

  section("5. step: skipped if any gradient was inf/NaN, else the optimizer runs");
  std::string before = bits_of(w0, 0);
  bool stepped = scaler.step(opt);
  std::printf("stepped = %s; w0[0]: %s -> %s\n", stepped ? "yes" : "no", before.c_str(), bits_of(w0, 0).c_str());
  scaler.update();
  std::printf("update(): clean step, growth tracker %lld of %lld, S stays %.0f\n",
              static_cast<long long>(scaler.get_growth_tracker()), static_cast<long long>(scaler.get_growth_interval()),
              scaler.get_scale());

  section("6. a 16-bit model: the optimizer keeps FP32 master weights");
  model.to(DType::Float16);
  optim::SGD opt16(model.parameters(), {.lr = 0.1});
  Tensor p16 = model.parameters()[0];
  std::printf("model parameter %s; its master in the optimizer %s, value %s; grad_dtype %s\n",
              p16.describe().c_str(), opt16.master(p16).describe().c_str(), bits_of(opt16.master(p16), 0).c_str(),
              std::string(dtype_name(p16.grad_dtype())).c_str());
  Tensor loss16;
  {
    amp::AutocastGuard autocast(DeviceType::CPU, DType::Float16);
    loss16 = cross_entropy(model.forward(x), y);
  }
  scaler.scale(loss16).backward();
  std::printf("backward computes each gradient in f16; AccumulateGrad widens it into p.grad, %s (FP32, so\n"
              "micro-batches would add up in FP32); step() unscales it in place, updates the master\n",
              p16.grad().describe().c_str());
  stepped = scaler.step(opt16);
  scaler.update();
  std::printf("stepped = %s; master %s; model = RNE(master) = %s\n", stepped ? "yes" : "no",
              bits_of(opt16.master(p16), 0).c_str(), bits_of(p16, 0).c_str());

  section("7. an overflow: the step is skipped and S is halved");
  opt16.zero_grad();
  Tensor huge;
  {
    amp::AutocastGuard autocast(DeviceType::CPU, DType::Float16);
    huge = cross_entropy(model.forward(x * 1e4), y) * 1e4;  // gradients far beyond 65504 once scaled
  }
  scaler.scale(huge).backward();
  before = bits_of(p16, 0);
  stepped = scaler.step(opt16);
  scaler.update();
  std::printf("stepped = %s; p[0] unchanged: %s -> %s; S = %.0f; skipped so far: %lld\n", stepped ? "yes" : "no",
              before.c_str(), bits_of(p16, 0).c_str(), scaler.get_scale(),
              static_cast<long long>(scaler.skipped_steps()));
  return 0;
}
