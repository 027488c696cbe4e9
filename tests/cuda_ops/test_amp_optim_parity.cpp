// tests/cuda_ops/test_amp_optim_parity.cpp — CUDA vs CPU for the GradScaler ops (multi-tensor
// unscale + non-finite check, scale update) and the optimizer ops (fused SGD/Adam/AdamW steps with
// FP32 masters and 16-bit write-back, RNE and stochastic; norm_pow_sum).
// Every one is expected bit-identical: the kernels run the same functors with the same IEEE
// operations (fused multiply-adds spelled out as fma on both sides), except norm_pow_sum, a
// double-precision sum in another order (bound: 2 (n - 1) 2^-53 sum|terms|).
#include "amp/scaler_kernels.h"
#include "cuda_test_util.h"

namespace mixtape {
namespace {
using namespace cuda_test;

Tensor scalar_f32(float v, Device d) { return to_device(full({1}, v, TensorOptions(DType::Float32)), d); }

TEST(CudaAmpParity, UnscaleAndCheckOneLaunchOverEveryGradient) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (bool with_inf : {false, true}) {
    std::vector<Tensor> cpu, dev;
    for (int i = 0; i < 150; ++i) {  // more than one launch's worth of descriptors
      const DType dt = std::vector<DType>{DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}[i % 4];
      Tensor g = random_input(rng, {1 + (i * 37) % 300}, dt, 1.0, 3000.0);
      if (with_inf && i == 77) set_element(g, 0, i % 2 ? INFINITY : NAN);
      cpu.push_back(g);
      dev.push_back(on_cuda(g));
    }
    for (float inv : {1.0f / 1024.0f, 1.0f, 3.0f}) {
      std::vector<Tensor> c2, d2;
      for (size_t i = 0; i < cpu.size(); ++i) {
        c2.push_back(cpu[i].clone());
        d2.push_back(dev[i].clone());
      }
      Tensor found_c = scalar_f32(0, Device::CPU()), found_d = scalar_f32(0, gpu());
      amp::non_finite_check_and_unscale_(c2, found_c, scalar_f32(inv, Device::CPU()), 100);
      amp::non_finite_check_and_unscale_(d2, found_d, scalar_f32(inv, gpu()), 100);
      EXPECT_TRUE(exact(found_c, found_d, "found_inf"));
      for (size_t i = 0; i < c2.size(); ++i) EXPECT_TRUE(exact(c2[i], d2[i], "grad " + std::to_string(i)));
    }
  }
}

TEST(CudaAmpParity, ScaleUpdateOnTheDevice) {
  MT_REQUIRE_CUDA();
  Tensor scale_c = scalar_f32(65536.0f, Device::CPU()), scale_d = scalar_f32(65536.0f, gpu());
  Tensor tr_c = zeros({1}, TensorOptions(DType::Int32)), tr_d = zeros({1}, TensorOptions(DType::Int32).with_device(gpu()));
  const float flags[] = {0, 0, 0, 1, 0, 0, 0, NAN, 0, 0, 0, 0, 0, 0, INFINITY, 0, 0, 0};
  for (float f : flags) {
    amp::update_scale_(scale_c, tr_c, scalar_f32(f, Device::CPU()), 2.0, 0.5, 3);
    amp::update_scale_(scale_d, tr_d, scalar_f32(f, gpu()), 2.0, 0.5, 3);
    EXPECT_TRUE(exact(scale_c, scale_d, "scale"));
    EXPECT_TRUE(exact(tr_c, tr_d, "growth_tracker"));
  }
}

// Runs a fused step op on CPU copies and CUDA copies of the same operands; all outputs must match.
void check_step(const char* op, const TensorList& operands, const Attrs& attrs, const std::string& what) {
  TensorList c, d;
  for (const Tensor& t : operands) {
    c.push_back(t.defined() ? t.clone() : Tensor());
    d.push_back(t.defined() ? on_cuda(t) : Tensor());
  }
  dispatch(*find_op(op), c, attrs);
  dispatch(*find_op(op), d, attrs);
  for (size_t i = 0; i < c.size(); ++i) {
    if (c[i].defined() && i != 1) {
      EXPECT_TRUE(exact(c[i], d[i], what + " operand " + std::to_string(i)));
    }
  }
}

TEST(CudaOptimParity, FusedSgdAndAdamStepsAreBitIdentical) {
  MT_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const int64_t n = 3001;
  for (DType model_dt : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    const bool master = is_reduced_float(model_dt);
    const DType wdt = model_dt == DType::Float64 ? DType::Float64 : DType::Float32;
    Tensor w = random_input(rng, {n}, wdt, 0.01, 1.0);
    Tensor model = master ? to_dtype(w, model_dt) : Tensor();
    Tensor grad = random_input(rng, {n}, master ? model_dt : wdt, 0.001, 2.0);
    const double inv_scale = master ? 1.0 / 512.0 : 1.0;  // the inverse of the loss scale 512
    if (master) grad = to_dtype(to_dtype(grad, DType::Float32) * 512.0, model_dt);
    const std::string t = short_name(model_dt);
    for (bool stochastic : {false, true}) {
      if (stochastic && !master) continue;
      Attrs common{{"inv_scale", inv_scale}, {"stochastic", stochastic}, {"seed", int64_t(seed & 0xffffff)},
                   {"offset", int64_t(7)}};
      for (bool momentum : {false, true}) {
        Attrs a = common;
        a.set("lr", 0.05).set("momentum", momentum ? 0.9 : 0.0).set("dampening", 0.1).set("weight_decay", 1e-2);
        a.set("nesterov", false).set("first", false);
        TensorList ops{w, grad, model};
        if (momentum) ops.push_back(random_input(rng, {n}, wdt, 0.01, 1.0));
        check_step("sgd_step_", ops, a, "sgd " + t + (momentum ? " momentum" : "") + (stochastic ? " stochastic" : ""));
      }
      for (bool decoupled : {false, true}) {
        for (bool amsgrad : {false, true}) {
          Attrs a = common;
          a.set("lr", 1e-3).set("beta1", 0.9).set("beta2", 0.999).set("eps", 1e-8).set("weight_decay", 0.01);
          a.set("amsgrad", amsgrad).set("decoupled", decoupled).set("step", int64_t(5));
          // Built in one go (a push_back after an initializer list trips a GCC 12 -Warray-bounds
          // false positive).
          TensorList ops;
          ops.reserve(6);
          for (const Tensor& t : {w, grad, model}) ops.push_back(t);
          ops.push_back(random_input(rng, {n}, wdt, 0.001, 0.1));
          ops.push_back(random_input(rng, {n}, wdt, 1e-6, 1e-3, true));
          if (amsgrad) ops.push_back(random_input(rng, {n}, wdt, 1e-6, 1e-3, true));
          check_step("adam_step_", ops, a,
                     std::string(decoupled ? "adamw " : "adam ") + t + (amsgrad ? " amsgrad" : "") +
                         (stochastic ? " stochastic" : ""));
        }
      }
    }
  }
}

TEST(CudaOptimParity, NormPowSum) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    Tensor x = random_input(rng, {100003}, dt, 0.01, 3.0);
    for (double p : {1.0, 2.0, 3.0, double(INFINITY)}) {
      const Tensor c = dispatch1(*find_op("norm_pow_sum"), {x}, {{"p", p}});
      const Tensor d = dispatch1(*find_op("norm_pow_sum"), {on_cuda(x)}, {{"p", p}});
      // |terms| summed: c itself (all terms >= 0); pow adds 1-2 ulp per term.
      const double s = get_element(c, 0);
      const double tol = std::isinf(p) ? 0.0 : 2.0 * 100003 * std::ldexp(1.0, -53) * s * (p == 3.0 ? 3 : 1);
      EXPECT_TRUE(close(c, d, tol, 0.0, std::string("norm_pow_sum ") + short_name(dt) + " p=" + std::to_string(p)));
    }
  }
}

}  // namespace
}  // namespace mixtape
