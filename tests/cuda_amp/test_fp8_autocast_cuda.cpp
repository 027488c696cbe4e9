// tests/cuda_amp/test_fp8_autocast_cuda.cpp — amp::Fp8Autocast(CUDA) against the CPU's
// Fp8Autocast: the same recipe, inputs and starting metadata on both devices.
// - Exact data (values of a few bits in a narrow range, power-of-two scales): every FP32 sum of
//   every GEMM is exact, so no accumulation order can show, and the outputs, the gradients, the
//   amax histories, the scales and the weights after a few SGD steps of a conv+linear model must
//   equal the CPU's bit for bit — on the cuBLASLt path (compute capability 9.0) and on the
//   BF16-widened one (8.0).
// - Random data: the outputs and gradients of linear, matmul and conv2d within the bound of two
//   FP32 summation orders (cuda_test_util.h: 2 (k - 1) u32 sum |a_l b_l| over the dequantized
//   FP8 operands, plus a rounding of the output each), and the metadata bit for bit.
// - No host wait in a delayed-scaling step; misplaced metadata refused by name.
// - MXFP8 (emulated through BF16 on every GPU): the device block casts equal the CPU's
//   mx_quantize_widened bit for bit (codes, FP8 elements, widening; tails, zero, NaN and inf
//   blocks, BF16's range edges); SGD steps of the conv+linear model on exact data give the CPU's
//   losses and weights bit for bit; random linear, matmul and conv2d within the summation-order
//   bound over the CPU's MX operands; non-finite blocks as on the CPU; conv2d's input changed in
//   place refused; no host wait in a step.
// MIXTAPE_CUDA_TEST_SELFCHECK=1 runs the "GPU" side on the CPU (a CPU region).
#include <gtest/gtest.h>

#include <tuple>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "amp/fp8_autocast.h"
#include "amp/fp8_meta.h"
#include "amp/fp8_im2col.h"
#include "amp/fp8_scaling.h"
#include "amp/mx_block.h"
#if defined(MIXTAPE_WITH_CUDA)
#include "amp/cuda/mx_block_cuda.h"
#endif
#include "autograd/checkpoint.h"
#include "common/error_of.h"
#include "cuda_ops/cuda_test_util.h"
#include "mixtape/mixtape.h"

namespace mixtape {
namespace {
using namespace cuda_test;
using namespace amp;
using testing::error_of;

DeviceType gpu_type() { return gpu().type(); }

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor d = on_cpu(b).contiguous(), c = on_cpu(a).contiguous();
  return d.dtype() == c.dtype() && d.sizes() == c.sizes() &&
         std::memcmp(d.data_ptr(), c.data_ptr(), size_t(c.nbytes())) == 0;
}

::testing::AssertionResult same_metas(const Fp8Metas& cpu, const Fp8Metas& dev, const std::string& what) {
  const StateDict a = cpu.state_dict(), b = dev.state_dict();
  for (const auto& [key, t] : a)
    if (!same_bits(t, b.at(key)))
      return ::testing::AssertionFailure() << what << ": " << key << " CPU " << t << " CUDA " << on_cpu(b.at(key));
  return ::testing::AssertionSuccess();
}

// Each compute capability the GEMM has a path for (the emulator can be either; a GPU is its own).
void for_each_gemm_path(const std::function<void(const std::string&)>& body) {
#if defined(MIXTAPE_CUDA_EMULATOR)
  if (!selfcheck()) {
    for (int cc : {90, 80}) {
      cuda_emulator::set_compute_capability(cc / 10, cc % 10);
      body("sm_" + std::to_string(cc));
    }
    cuda_emulator::set_compute_capability(8, 0);
    return;
  }
#endif
  body("this device");
}

// Values k * 2^e with |k| in {1, 2, 3} and e in [e_lo, e_hi] (few bits, a narrow range).
Tensor dyadic(std::mt19937_64& rng, const IntList& shape, int e_lo, int e_hi) {
  Tensor t = Tensor::empty(shape, TensorOptions(DType::Float32));
  std::uniform_int_distribution<int> k(1, 3), e(e_lo, e_hi), sign(0, 1);
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = (sign(rng) ? -1.0f : 1.0f) * std::ldexp(float(k(rng)), e(rng));
  return t;
}

// A fresh leaf on d (a copy: training it leaves t alone).
Tensor leaf(const Tensor& t, Device d) { return clone(t).to(d).detach().requires_grad_(true); }

// A small conv + linear model's parameters, on one device.
struct Net {
  Tensor cw, fw, fb;  // conv 2 -> 4, 3x3, pad 1; linear 4*4*4 -> 4 with bias
  std::vector<std::pair<std::string, Tensor>> named() const { return {{"conv.weight", cw}, {"fc.weight", fw}, {"fc.bias", fb}}; }
  Net to(Device d) const { return {leaf(cw, d), leaf(fw, d), leaf(fb, d)}; }
  Tensor forward(const Tensor& x) const { return linear(relu(conv2d(x, cw, {}, {1, 1}, {1, 1})).flatten(1), fw, fb); }
};

// Exact data for three steps (few bits, narrow range: every FP32 sum is exact): the model's
// starting weights on the CPU, the inputs and the loss weights r.
std::tuple<Net, std::vector<Tensor>, std::vector<Tensor>> exact_steps(std::mt19937_64& rng) {
  Net net{dyadic(rng, {4, 2, 3, 3}, -4, -3), dyadic(rng, {4, 64}, -5, -4), dyadic(rng, {4}, -3, -2)};
  std::vector<Tensor> xs, rs;
  for (int s = 0; s < 3; ++s) {
    xs.push_back(dyadic(rng, {2, 2, 4, 4}, 0, 1));
    rs.push_back(dyadic(rng, {2, 4}, -5, -4));
  }
  return {net, xs, rs};
}

// A few SGD steps of the model on one device under one recipe: the loss is sum(y * r), so the
// output gradient is r itself. Calls `after_step` with the metas (delayed) after each step.
// `losses` (optional) receives each step's loss.
void train(const Net& net, Fp8Metas* metas, const Fp8Recipe& recipe, DeviceType dt, const std::vector<Tensor>& xs,
           const std::vector<Tensor>& rs, const std::function<void(int)>& after_step, DType out = DType::Float32,
           std::vector<float>* losses = nullptr) {
  const Device d = net.cw.device();
  for (size_t step = 0; step < xs.size(); ++step) {
    Tensor y;
    {
      Fp8Autocast fp8(recipe, metas, {out}, dt);
      y = net.forward(xs[step].to(d));
    }
    const Tensor loss = sum(y.to(DType::Float32) * rs[step].to(d));
    loss.backward();
    if (losses != nullptr) losses->push_back(on_cpu(loss).item<float>());
    NoGradGuard no_grad;
    for (const Tensor* p : {&net.cw, &net.fw, &net.fb}) {
      Tensor w = *p;
      w.add_(w.grad(), -std::ldexp(1.0, -8));  // small: no weight nears 0 (the sums stay exact)
      w.grad().zero_();
    }
    after_step(static_cast<int>(step));
  }
}

TEST(CudaFp8Autocast, TrainingStepsGiveTheCpusMetadataAndWeightsBitForBit) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  const auto [cpu0, xs, rs] = exact_steps(rng);
  DelayedScaling delayed;
  delayed.amax_history_len = 4;
  delayed.power_of_2_scales = true;
  CurrentScaling current;
  current.power_of_2_scales = true;
  for_each_gemm_path([&](const std::string& path) {
    for (const Fp8Recipe& recipe : {Fp8Recipe(delayed), Fp8Recipe(current)}) {
      const bool is_delayed = std::holds_alternative<DelayedScaling>(recipe);
      const Net c = cpu0.to(Device::CPU()), g = cpu0.to(gpu());
      std::optional<Fp8Metas> mc, mg;
      if (is_delayed) {
        mc.emplace(delayed, c.named());
        mg.emplace(delayed, g.named());
      }
      std::vector<StateDict> cpu_metas;
      std::vector<Net> cpu_weights;
      train(c, mc ? &*mc : nullptr, recipe, DeviceType::CPU, xs, rs, [&](int) {
        if (mc) cpu_metas.push_back(mc->state_dict());
        cpu_weights.push_back({clone(c.cw), clone(c.fw), clone(c.fb)});
      });
      train(g, mg ? &*mg : nullptr, recipe, gpu_type(), xs, rs, [&](int step) {
        const std::string what = path + " " + recipe_string(recipe) + " step " + std::to_string(step);
        if (mg) {
          const StateDict got = mg->state_dict();
          for (const auto& [key, t] : cpu_metas[size_t(step)])
            EXPECT_TRUE(same_bits(t, got.at(key))) << what << ": " << key << " CPU " << t << " CUDA " << on_cpu(got.at(key));
        }
        const Net& w = cpu_weights[size_t(step)];
        EXPECT_TRUE(same_bits(w.cw, g.cw.detach())) << what << ": conv weight";
        EXPECT_TRUE(same_bits(w.fw, g.fw.detach())) << what << ": linear weight";
        EXPECT_TRUE(same_bits(w.fb, g.fb.detach())) << what << ": linear bias";
      });
      if (mg) {
        // The histories really moved: the update rolled three steps of amaxes in.
        const Tensor h = on_cpu(mg->at("conv").amax_history);
        EXPECT_GT(h.select(0, 3).abs().sum().item<float>(), 0.0f) << path;
      }
    }
  });
}

// The bound of two FP32 summation orders of out = s * sum_l a_l b_l (cuda_test_util.h):
// 2 (k - 1) u32 (|A| @ |B|) over the dequantized operands, plus each side's rounding of the
// result: 2 u32 |cpu| (f32 output and bias add) and u(out) |cpu| per final rounding.
Tensor order_bound(const Tensor& abs_product, int64_t k, const Tensor& cpu, DType out) {
  const double u = std::ldexp(1.0, -24);
  return abs_product.to(DType::Float64) * (2.0 * double(std::max<int64_t>(k - 1, 1)) * u) +
         cpu.to(DType::Float64).abs() * (4.0 * u + 2.0 * unit_roundoff(out)) + 1e-30;
}

// The dequantized per-tensor cast the CPU makes of t for `role` under current scaling.
Tensor dequantized(const Tensor& t, DType fp8) {
  const Tensor t32 = t.detach().to(DType::Float32).contiguous();
  const float scale = scale_from_amax(amax_of(t32), fp8_max(fp8), 0.0f, false, 1.0f);
  return from_float8(to_float8(t32, fp8, {scale, Fp8Saturation::Finite}), 1.0f / scale);
}

TEST(CudaFp8Autocast, RandomLinearMatmulConvWithinTheSummationOrderBound) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  const CurrentScaling recipe;  // HYBRID: E4M3 operands, E5M2 output gradient
  const DType e4 = DType::Float8_e4m3fn, e5 = DType::Float8_e5m2;
  for_each_gemm_path([&](const std::string& path) {
    for (int op = 0; op < 3; ++op) {
      // linear x (3, 5, 40) w (24, 40); matmul a (12, 40) b (40, 24); conv x (2, 3, 6, 5) w (8, 3, 3, 3).
      const Tensor x = op == 0 ? random_input(rng, {3, 5, 40}, DType::BFloat16)
                     : op == 1 ? random_input(rng, {12, 40}, DType::Float32)
                               : random_input(rng, {2, 3, 6, 5}, DType::Float32);
      const Tensor w = op == 0 ? random_input(rng, {24, 40}, DType::Float32, 0.01, 0.5)
                     : op == 1 ? random_input(rng, {40, 24}, DType::Float32, 0.01, 0.5)
                               : random_input(rng, {8, 3, 3, 3}, DType::Float32, 0.01, 0.5);
      const Tensor b = op == 1 ? Tensor() : random_input(rng, {op == 0 ? 24 : 8}, DType::Float32);
      auto run = [&](Device d, DeviceType dt, Tensor& gx, Tensor& gw, Tensor& r) {
        Tensor xl = leaf(x, d), wl = leaf(w, d), bl = b.defined() ? leaf(b, d) : Tensor();
        Tensor y;
        {
          Fp8Autocast fp8(recipe, nullptr, {DType::BFloat16}, dt);
          y = op == 0 ? linear(xl, wl, bl) : op == 1 ? matmul(xl, wl) : conv2d(xl, wl, bl, {2, 1}, {1, 1});
        }
        if (!r.defined()) r = random_input(rng, y.sizes(), DType::BFloat16);
        sum(y * r.to(d)).backward();
        gx = xl.grad();
        gw = wl.grad();
        return y;
      };
      Tensor r, cgx, cgw, dgx, dgw;
      const Tensor cy = run(Device::CPU(), DeviceType::CPU, cgx, cgw, r);
      const Tensor dy = run(gpu(), gpu_type(), dgx, dgw, r);
      const std::string what = path + " op " + std::to_string(op);
      // The dequantized operands, as both devices cast them (the casts are bit-exact).
      const Tensor xq = dequantized(x, e4).to(DType::Float64).abs(), wq = dequantized(w, e4).to(DType::Float64).abs();
      const Tensor gq = dequantized(r, e5).to(DType::Float64).abs();  // the output gradient is r
      Tensor fwd, dgrad, wgrad;
      int64_t kf, kd, kw;
      if (op == 0) {
        fwd = linear(xq, wq);
        dgrad = matmul(gq.reshape({15, 24}), wq).reshape(x.sizes());
        wgrad = matmul(gq.reshape({15, 24}).t(), xq.reshape({15, 40}));
        kf = 40, kd = 24, kw = 15;
      } else if (op == 1) {
        fwd = matmul(xq, wq);
        dgrad = matmul(gq, wq.t());
        wgrad = matmul(xq.t(), gq);
        kf = 40, kd = 24, kw = 12;
      } else {
        fwd = conv2d(xq, wq, {}, {2, 1}, {1, 1});
        dgrad = conv2d_input_grad(gq, wq, x.sizes(), {2, 1}, {1, 1}, {1, 1}, 1);
        wgrad = conv2d_weight_grad(xq, gq, w.sizes(), {2, 1}, {1, 1}, {1, 1}, 1);
        kf = 27, kd = 8 * 9, kw = gq.numel() / 8;  // dgrad: the GEMM's k (O) plus col2im's taps
      }
      EXPECT_TRUE(within(cy, dy, order_bound(fwd, kf, cy, DType::BFloat16), what + " forward"));
      EXPECT_TRUE(within(cgx, dgx, order_bound(dgrad, kd, cgx, x.dtype()), what + " dgrad"));
      EXPECT_TRUE(within(cgw, dgw, order_bound(wgrad, kw, cgw, w.dtype()), what + " wgrad"));
    }
  });
}

// Delayed scaling on random data: the amaxes recorded by the casts (input and weight in forward,
// the output gradient in backward), the reducer's result and the update's scales equal the CPU's
// bit for bit.
TEST(CudaFp8Autocast, DelayedScalingRecordsTheCpusAmaxesOnTheDevice) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  DelayedScaling recipe;
  recipe.amax_history_len = 3;
  recipe.margin = 0.5f;
  const Tensor x = random_input(rng, {6, 32}, DType::BFloat16, 0.1, 300.0);
  const Tensor w = random_input(rng, {16, 32}, DType::Float32, 0.01, 2.0);
  const Tensor r = random_input(rng, {6, 16}, DType::Float32, 1e-3, 1.0);
  for_each_gemm_path([&](const std::string& path) {
    const Tensor wc = leaf(w, Device::CPU()), wg = leaf(w, gpu());
    Fp8Metas mc(recipe, {{"fc.weight", wc}}), mg(recipe, {{"fc.weight", wg}});
    EXPECT_EQ(mg.metas()[0].scale.device(), gpu()) << "the metadata lives on the weight's device";
    for (int step = 0; step < 3; ++step) {
      for (auto [metas, wl, dt] : {std::tuple{&mc, wc, DeviceType::CPU}, std::tuple{&mg, wg, gpu_type()}}) {
        // A stand-in for DDP's all-reduce (max): it sees every row 0 on the metas' device, and
        // what it leaves is what the update uses.
        Fp8AutocastOptions opt;
        const Device dev = wl.device();
        opt.amax_reducer = [dev](Tensor& amaxes) {
          EXPECT_EQ(amaxes.device(), dev);
          EXPECT_EQ(amaxes.sizes(), (IntList{3}));
          amaxes = amaxes * 2.0;
        };
        Tensor y;
        {
          Fp8Autocast fp8(recipe, metas, opt, dt);
          y = linear(x.to(wl.device()), wl);
        }
        sum(y * r.to(wl.device())).backward();
      }
      EXPECT_TRUE(same_metas(mc, mg, path + " step " + std::to_string(step)));
    }
  });
}

TEST(CudaFp8Autocast, ADelayedStepWaitsForNothingOnTheHostAndRunsCublasLtFromSm89) {
  MT_REQUIRE_EMULATED_STREAM_ORDER();
#if defined(MIXTAPE_CUDA_EMULATOR)
  std::mt19937_64 rng(fresh_seed());
  const Net net = Net{random_input(rng, {4, 2, 3, 3}, DType::Float32), random_input(rng, {4, 64}, DType::Float32),
                      random_input(rng, {4}, DType::Float32)}
                      .to(gpu());
  DelayedScaling recipe;
  recipe.amax_history_len = 4;
  Fp8Metas metas(recipe, net.named());
  const Tensor x = random_input(rng, {2, 2, 4, 4}, DType::Float32).to(gpu());
  const Tensor r = random_input(rng, {2, 4}, DType::Float32).to(gpu());
  for (int cc : {90, 80}) {
    cuda_emulator::set_compute_capability(cc / 10, cc % 10);
    cuda_emulator::reset_launch_sites();
    const uint64_t before = cuda_emulator::host_waits();
    for (int step = 0; step < 2; ++step) {
      Tensor y;
      {
        Fp8Autocast fp8(recipe, &metas, {}, DeviceType::CUDA);  // the update runs here, on the device
        y = net.forward(x);
      }
      sum(y * r).backward();
    }
    EXPECT_EQ(cuda_emulator::host_waits(), before) << "sm_" << cc;
    // Which library ran the GEMMs: cuBLASLt's FP8 matmul on 9.0 (conv2d's wgrad, whose F32 output
    // rows of K = 18 are no 16-byte multiple, takes the widened path there too), never below 8.9;
    // no cuDNN convolution either way.
    uint64_t lt = 0, cudnn = 0;
    for (const cuda_emulator::LaunchSite& site : cuda_emulator::launch_sites()) {
      if (site.site == "cublasLtMatmul") lt += site.count;
      if (site.site.rfind("cudnnConvolution", 0) == 0) cudnn += site.count;
    }
    EXPECT_EQ(lt, cc == 90 ? 8u : 0u) << "sm_" << cc << ": per step conv2d forward, linear forward, dgrad, wgrad";
    EXPECT_EQ(cudnn, 0u) << "sm_" << cc;
  }
  cuda_emulator::set_compute_capability(8, 0);
#endif
}

// Only some operands need a gradient: a frozen weight (linear, conv2d), a constant second matmul
// operand, only the bias. The backward gives the CPU's gradients (exact sums: dyadic values), and
// the ones nobody asked for stay undefined. (It dereferenced the unsaved weight operand before.)
TEST(CudaFp8Autocast, PartialGradientsEqualTheCpus) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the CUDA route's node";
  std::mt19937_64 rng(7);
  const Tensor x = dyadic(rng, {4, 2, 4, 4}, -3, 0), cw = dyadic(rng, {4, 2, 3, 3}, -3, 0);
  const Tensor a = dyadic(rng, {4, 32}, -3, 0), lw = dyadic(rng, {8, 32}, -3, 0), lb = dyadic(rng, {8}, -3, 0);
  const Tensor bm = dyadic(rng, {32, 8}, -3, 0);
  enum Need { kInput, kBias };
  auto run = [&](Device d, int op, Need need) {
    const Tensor in = op == 0 ? x : a;
    const Tensor xi = need == kInput ? leaf(in, d) : clone(in).to(d);
    const Tensor bias = op == 1 ? (need == kBias ? leaf(lb, d) : clone(lb).to(d)) : Tensor();
    Tensor y;
    {
      Fp8Autocast fp8(CurrentScaling{Fp8Format::Hybrid, true}, nullptr, {DType::Float32}, d.type());
      y = op == 0 ? conv2d(xi, cw.to(d), {}, {1, 1}, {1, 1}) : op == 1 ? linear(xi, lw.to(d), bias) : matmul(xi, bm.to(d));
    }
    sum(y * y).backward();
    return std::pair<Tensor, Tensor>{xi.grad(), bias.defined() ? bias.grad() : Tensor()};
  };
  for_each_gemm_path([&](const std::string& path) {
    for (int op : {0, 1, 2})
      for (Need need : {kInput, kBias}) {
        if (need == kBias && op != 1) continue;
        const auto [cx, cb] = run(Device::CPU(), op, need);
        const auto [gx, gb] = run(gpu(), op, need);
        const std::string at = path + ", op " + std::to_string(op) + (need == kInput ? ", input" : ", bias only");
        EXPECT_EQ(gx.defined(), cx.defined()) << at;
        EXPECT_EQ(gb.defined(), cb.defined()) << at;
        if (cx.defined() && gx.defined()) {
          EXPECT_TRUE(same_bits(cx, gx)) << at;
        }
        if (cb.defined() && gb.defined()) {
          EXPECT_TRUE(same_bits(cb, gb)) << at;
        }
      }
  });
}

TEST(CudaFp8Autocast, RefusesWhatItCannotRunByName) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the refusals are the CUDA route's";
  const Tensor x = randn({4, 32}).to(gpu()), w = randn({8, 32}).to(gpu());
  // MXFP8 without pad_tail: a reduction dim its blocks do not divide, by the CPU's message.
  MXFP8BlockScaling no_tail;
  no_tail.pad_tail = false;
  std::string e = error_of([&] {
    Fp8Autocast fp8(no_tail, nullptr, {}, DeviceType::CUDA);
    linear(randn({4, 40}).to(gpu()), randn({8, 40}).to(gpu()));
  });
  EXPECT_TRUE(e.find("linear (Fp8Autocast, cuda): MXFP8 block size 32 does not divide the reduction dim (40 values "
                     "along dim 1 of ") != std::string::npos)
      << e;
  e = error_of([&] {
    Fp8Autocast fp8(no_tail, nullptr, {}, DeviceType::CUDA);
    conv2d(randn({1, 2, 4, 4}).to(gpu()), randn({3, 2, 3, 3}).to(gpu()));
  });
  EXPECT_TRUE(e.find("conv2d (Fp8Autocast, cuda): MXFP8 block size 32 does not divide the reduction dim (2 values "
                     "along dim 1 of ") != std::string::npos)
      << e;
  // Metadata made from the CPU model, a region on CUDA.
  Fp8Metas cpu_metas(DelayedScaling{}, {{"fc.weight", randn({8, 32})}});
  e = error_of([&] { Fp8Autocast fp8(DelayedScaling{}, &cpu_metas, {}, DeviceType::CUDA); });
  EXPECT_TRUE(e.find("Fp8Autocast(cuda): the FP8 metadata 'fc' is on cpu") != std::string::npos) << e;
  // A host read of device metadata.
  Fp8Metas dev_metas(DelayedScaling{}, {{"fc.weight", w}});
  e = error_of([&] { (void)dev_metas.metas()[0].scale_of(Fp8Role::Input); });
  EXPECT_TRUE(e.find("Fp8Meta::scale_of: 'fc' lives on cuda:0") != std::string::npos) << e;
  // A CUDA weight the metas do not know.
  e = error_of([&] {
    Fp8Autocast fp8(DelayedScaling{}, &dev_metas, {}, DeviceType::CUDA);
    linear(x, randn({8, 32}).to(gpu()));
  });
  EXPECT_TRUE(e.find("linear (Fp8Autocast, cuda): under DelayedScaling(") != std::string::npos &&
              e.find("has no FP8 metadata") != std::string::npos)
      << e;
}

// autograd::checkpoint inside a CUDA region: the recompute casts with the forward's scales (kept
// on the device) and records nothing, so the gradients and the metadata equal the plain graph's
// bit for bit, step after step.
TEST(CudaFp8Autocast, CheckpointedSegmentsEqualThePlainGraphBitForBit) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  const Net net0{random_input(rng, {4, 2, 3, 3}, DType::Float32), random_input(rng, {4, 64}, DType::Float32, 0.05, 0.5),
                 random_input(rng, {4}, DType::Float32)};
  const Tensor x = random_input(rng, {2, 2, 4, 4}, DType::Float32).to(gpu());
  const Tensor r = random_input(rng, {2, 4}, DType::Float32).to(gpu());
  DelayedScaling delayed;
  delayed.amax_history_len = 2;
  const char* names[] = {"delayed", "current", "delayed, region inside the segment"};
  for (int which = 0; which < 3; ++which)
    for (bool reentrant : {false, true}) {
      SCOPED_TRACE(std::string(names[which]) + (reentrant ? ", reentrant" : ", non-reentrant"));
      const Net plain = net0.to(gpu()), ckpt = net0.to(gpu());
      Fp8Metas plain_metas(delayed, plain.named()), ckpt_metas(delayed, ckpt.named());
      auto step = [&](const Net& n, Fp8Metas& metas, bool checkpointed) {
        auto segment = [&](const Tensor& in) {
          std::optional<Fp8Autocast> inner;
          if (which == 2) inner.emplace(delayed, &metas, Fp8AutocastOptions{}, gpu_type());
          return relu(conv2d(in, n.cw, {}, {1, 1}, {1, 1}));
        };
        Tensor y;
        {
          std::optional<Fp8Autocast> fp8;
          if (which == 0) fp8.emplace(delayed, &metas, Fp8AutocastOptions{}, gpu_type());
          if (which == 1) fp8.emplace(CurrentScaling{}, nullptr, Fp8AutocastOptions{}, gpu_type());
          autograd::CheckpointOptions co;
          co.use_reentrant = reentrant;
          const Tensor h = checkpointed ? autograd::checkpoint(segment, x, co) : segment(x);
          // (The segment's own region returns BF16: the last layer, outside it, runs in f32.)
          y = linear((which == 2 ? h.to(DType::Float32) : h).flatten(1), n.fw, n.fb);
        }
        sum(y.to(DType::Float32) * r).backward();
      };
      for (int s = 0; s < 3; ++s) {
        step(plain, plain_metas, false);
        step(ckpt, ckpt_metas, true);
        EXPECT_TRUE(same_bits(plain.cw.grad(), ckpt.cw.grad())) << "step " << s;
        EXPECT_TRUE(same_bits(plain.fw.grad(), ckpt.fw.grad())) << "step " << s;
        EXPECT_TRUE(same_metas(plain_metas, ckpt_metas, "step " + std::to_string(s)));
        NoGradGuard no_grad;
        for (const Net* n : {&plain, &ckpt})
          for (const Tensor* p : {&n->cw, &n->fw, &n->fb}) {
            Tensor w = *p;
            w.add_(w.grad(), -0.05);
            w.grad().zero_();
          }
      }
      if (which != 1) {  // the metas took part: the scales moved from 1
        EXPECT_NE(on_cpu(plain_metas.at("conv").scale).to_vector<float>()[0], 1.0f);
      }
    }
}

// Device metadata through a checkpoint: state_dict copies come back to the device bit for bit.
TEST(CudaFp8Autocast, DeviceMetadataLoadsBackBitForBit) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  DelayedScaling recipe;
  recipe.amax_history_len = 2;
  const Tensor w = leaf(random_input(rng, {8, 32}, DType::Float32), gpu());
  Fp8Metas a(recipe, {{"fc.weight", w}}), b(recipe, {{"fc.weight", w}});
  for (int step = 0; step < 2; ++step) {
    Tensor y;
    {
      Fp8Autocast fp8(recipe, &a, {}, gpu_type());
      y = linear(random_input(rng, {4, 32}, DType::Float32).to(gpu()), w);
    }
    sum(y).backward();
  }
  StateDict sd = a.state_dict();
  for (auto& [key, t] : sd) t = on_cpu(t);  // as a checkpoint file holds it
  b.load_state_dict(sd);
  EXPECT_TRUE(same_metas(b, a, "loaded"));
  EXPECT_EQ(b.metas()[0].scale.device(), gpu());
}

// ---- MXFP8 (the device block casts, widened to BF16) ----

// Values for the block casts: random binades with whole blocks of zeros, NaN and inf in some
// blocks, f32 subnormals, values near FLT_MAX (an E4M3 element times a scale near 2^120 lands at
// 2^128: the widening saturates) and tiny ones (the widening rounds into BF16's subnormals).
[[maybe_unused]] Tensor mx_values(std::mt19937_64& rng, const IntList& shape, int64_t len, int64_t inner) {
  Tensor t = Tensor::empty(shape, TensorOptions(DType::Float32));
  float* p = t.data_ptr<float>();
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-30, 30), kind(0, 39), sign(0, 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t along = (i / inner) % len, block = along / 32;
    const int64_t col = i % inner, row = i / (inner * len);
    float v = std::ldexp(mant(rng), expo(rng));
    const int b = static_cast<int>((row * 7 + col * 3 + block * 5) % 9);  // the block's kind
    if (b == 0) v = 0.0f;                                                 // an all-zero block
    if (b == 1) v = along % 32 == 0 ? FLT_MAX : std::ldexp(mant(rng), 125 + static_cast<int>(i % 3));  // near FLT_MAX
    if (b == 2) v = std::ldexp(mant(rng), -140 + static_cast<int>(i % 12));  // f32 subnormals, tiny
    if (b == 3) v = std::ldexp(mant(rng), -120);
    const int k = kind(rng);
    if (b > 3 && k == 0) v = NAN;
    if (b > 3 && k == 1) v = INFINITY;
    p[i] = sign(rng) ? -v : v;
  }
  return t;
}

TEST(CudaMxAutocast, DeviceBlockCastsEqualTheCpusBitForBit) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "mx_quantize_cuda takes CUDA tensors only";
#if defined(MIXTAPE_WITH_CUDA)
  std::mt19937_64 rng(fresh_seed());
  struct Case {
    IntList shape;
    int64_t dim;
  };
  // Tails: 40 = 32 + 8 along dim 1 and dim 0, 70 = 2 x 32 + 6 between outer and inner dims, and
  // conv2d's image blocked along 35 channels.
  const Case cases[] = {{{5, 40}, 1}, {{40, 5}, 0}, {{2, 70, 3}, 1}, {{2, 35, 3, 2}, 1}, {{3, 16}, 1}};
  for (const Case& c : cases) {
    int64_t inner = 1;
    for (size_t d = size_t(c.dim) + 1; d < c.shape.size(); ++d) inner *= c.shape[d];
    const Tensor x32 = mx_values(rng, c.shape, c.shape[size_t(c.dim)], inner);
    for (DType src : {DType::Float32, DType::BFloat16, DType::Float16})
      for (DType elem : {DType::Float8_e4m3fn, DType::Float8_e5m2})
        for (MxScaleRounding rounding : {MxScaleRounding::Up, MxScaleRounding::Spec}) {
          MXFP8BlockScaling recipe;
          recipe.scale_rounding = rounding;
          const Tensor x = x32.to(src);
          const std::string what = x.describe() + " dim " + std::to_string(c.dim) + " " + std::string(dtype_name(elem)) +
                                   (rounding == MxScaleRounding::Up ? " up" : " spec");
          const Fp8Operand cpu = mx_quantize_widened(x, c.dim, elem, recipe, "cpu");
          const Fp8Operand dev = amp::cuda::mx_quantize_cuda(x.to(gpu()), c.dim, elem, recipe, "cuda");
          EXPECT_TRUE(same_bits(cpu.block_scales, dev.block_scales)) << what << ": codes";
          EXPECT_TRUE(same_bits(cpu.data, dev.data)) << what << ": FP8 elements";
          EXPECT_TRUE(same_bits(cpu.widened, dev.widened)) << what << ": BF16 widening";
          EXPECT_TRUE(same_bits(cpu.widened, amp::cuda::mx_widen_cuda(dev))) << what << ": widened again from the bytes";
        }
  }
  // The data really holds every kind of block: NaN codes, code 127 for zeros, and saturation of
  // the widening at BF16's largest value.
  MXFP8BlockScaling up;
  const Tensor x = mx_values(rng, {64, 40}, 40, 1);
  const Fp8Operand op = mx_quantize_widened(x, 1, DType::Float8_e4m3fn, up, "cpu");
  const Tensor codes = op.block_scales.to(DType::Int32), wide = op.widened.to(DType::Float32).abs();
  EXPECT_GT(eq(codes, full_like(codes, 255)).sum().item<int64_t>(), 0);
  EXPECT_GT(eq(codes, full_like(codes, 127)).sum().item<int64_t>(), 0);
  EXPECT_GT(eq(wide, full_like(wide, static_cast<float>(BFloat16::max()))).sum().item<int64_t>(), 0);
#endif
}

// The CPU's MX operand of t (blocked along dim) as |values| in f64: the bound's factors.
Tensor mx_abs(const Tensor& t, int64_t dim, DType elem) {
  return mx_quantize_widened(on_cpu(t).detach(), dim, elem, MXFP8BlockScaling{}, "ref").widened.to(DType::Float64).abs();
}

// Random values over 2^-14 .. 2^1 (random signs), in dtype dt: a block's small values fall among
// E4M3's subnormals or flush, by how far below its amax they lie, so a block along another dim
// than the CPU's gives other values (far outside the summation-order bound), where values of one
// binade would not show it (a power-of-two scale changes no normal element's rounding).
Tensor spread(std::mt19937_64& rng, const IntList& shape, DType dt) {
  Tensor t = Tensor::empty(shape, TensorOptions(DType::Float32));
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> e(-14, 0), sign(0, 1);
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = (sign(rng) ? -1.0f : 1.0f) * std::ldexp(mant(rng), e(rng));
  return t.to(dt);
}

TEST(CudaMxAutocast, RandomLinearMatmulConvWithinTheSummationOrderBound) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  const MXFP8BlockScaling recipe;  // E4M3 for every role
  const DType e4 = DType::Float8_e4m3fn;
  for (DType out : {DType::BFloat16, DType::Float32})
    for (int op = 0; op < 4; ++op) {
      // linear x (3, 5, 40) w (24, 40); matmul a (12, 40) b (40, 24); conv x (2, 3, 6, 5) w (8, 3, 3, 3)
      // stride (2, 1) (blocks of 3 channels); conv x (2, 40, 4, 3) w (6, 40, 3, 3) (32 + 8 channels).
      const Tensor x = op == 0 ? spread(rng, {3, 5, 40}, DType::BFloat16)
                     : op == 1 ? spread(rng, {12, 40}, DType::Float32)
                     : op == 2 ? spread(rng, {2, 3, 6, 5}, DType::Float32)
                               : spread(rng, {2, 40, 4, 3}, DType::BFloat16);
      const Tensor w = op == 0 ? spread(rng, {24, 40}, DType::Float32)
                     : op == 1 ? spread(rng, {40, 24}, DType::Float32)
                     : op == 2 ? spread(rng, {8, 3, 3, 3}, DType::Float32)
                               : spread(rng, {6, 40, 3, 3}, DType::Float32);
      const Tensor b = op == 1 ? Tensor() : spread(rng, {w.size(0)}, DType::Float32);
      const IntList stride = op == 2 ? IntList{2, 1} : IntList{1, 1};
      auto run = [&](Device d, DeviceType dt, Tensor& gx, Tensor& gw, Tensor& r) {
        Tensor xl = leaf(x, d), wl = leaf(w, d), bl = b.defined() ? leaf(b, d) : Tensor();
        Tensor y;
        {
          Fp8Autocast fp8(recipe, nullptr, {out}, dt);
          y = op == 0 ? linear(xl, wl, bl) : op == 1 ? matmul(xl, wl) : conv2d(xl, wl, bl, stride, {1, 1});
        }
        if (!r.defined()) r = spread(rng, y.sizes(), DType::BFloat16);
        sum(y.to(DType::Float32) * r.to(d)).backward();
        gx = xl.grad();
        gw = wl.grad();
        return y;
      };
      Tensor r, cgx, cgw, dgx, dgw;
      const Tensor cy = run(Device::CPU(), DeviceType::CPU, cgx, cgw, r);
      const Tensor dy = run(gpu(), gpu_type(), dgx, dgw, r);
      const std::string what = std::string(dtype_name(out)) + " op " + std::to_string(op);
      // The bound's products of |operands|, each blocked as the CPU blocks it for that GEMM (the
      // output gradient is r, cast as the output's dtype gives it).
      const Tensor g = r.to(out).to(DType::Float32);
      Tensor fwd, dgrad, wgrad;
      int64_t kf, kd, kw;
      if (op == 0) {
        const Tensor x2 = x.reshape({15, 40}), g2 = g.reshape({15, 24});
        fwd = matmul(mx_abs(x2, 1, e4), mx_abs(w, 1, e4).t()).reshape({3, 5, 24});
        dgrad = matmul(mx_abs(g2, 1, e4), mx_abs(w, 0, e4)).reshape(x.sizes());
        wgrad = matmul(mx_abs(g2, 0, e4).t(), mx_abs(x2, 0, e4));
        kf = 40, kd = 24, kw = 15;
      } else if (op == 1) {
        fwd = matmul(mx_abs(x, 1, e4), mx_abs(w, 0, e4));
        dgrad = matmul(mx_abs(g, 1, e4), mx_abs(w, 1, e4).t());
        wgrad = matmul(mx_abs(x, 0, e4).t(), mx_abs(g, 0, e4));
        kf = 40, kd = 24, kw = 12;
      } else {
        const ConvGeom geom = check_conv_geometry("conv2d", Shown::of(x), Shown::of(w), stride, {1, 1}, {1, 1}, 1);
        const int64_t M = geom.N * geom.L(), O = geom.O;
        fwd = conv2d(mx_abs(x, 1, e4), mx_abs(w, 1, e4), {}, stride, {1, 1});
        dgrad = conv2d_input_grad(mx_abs(g, 1, e4), mx_abs(w, 0, e4), x.sizes(), stride, {1, 1}, {1, 1}, 1);
        const Tensor gm = g.permute({0, 2, 3, 1}).contiguous().reshape({M, O});
        const Tensor cols = im2col_f32(x.to(DType::Float32).contiguous(), geom);  // blocked along its rows
        wgrad = matmul(mx_abs(gm, 0, e4).t(), mx_abs(cols, 0, e4)).reshape(w.sizes());
        kf = geom.K(), kd = O * geom.kH * geom.kW, kw = M;  // dgrad: the GEMM's k (O) plus col2im's taps
      }
      EXPECT_TRUE(within(cy, dy, order_bound(fwd, kf, cy, out), what + " forward"));
      EXPECT_TRUE(within(cgx, dgx, order_bound(dgrad, kd, cgx, x.dtype()), what + " dgrad"));
      EXPECT_TRUE(within(cgw, dgw, order_bound(wgrad, kw, cgw, w.dtype()), what + " wgrad"));
    }
}

// Exact data (few bits, narrow range): every FP32 sum is exact, so a few SGD steps of the
// conv + linear model under MXFP8 give the CPU's losses and weights bit for bit, either output dtype.
TEST(CudaMxAutocast, TrainingStepsGiveTheCpusLossesAndWeightsBitForBit) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  const auto [cpu0, xs, rs] = exact_steps(rng);
  for (MxScaleRounding rounding : {MxScaleRounding::Up, MxScaleRounding::Spec})
    for (DType out : {DType::Float32, DType::BFloat16}) {
      MXFP8BlockScaling recipe;
      recipe.scale_rounding = rounding;
      const std::string what = recipe_string(recipe) + " " + std::string(dtype_name(out));
      const Net c = cpu0.to(Device::CPU()), g = cpu0.to(gpu());
      std::vector<Net> cpu_weights;
      std::vector<float> cpu_losses, dev_losses;
      train(c, nullptr, recipe, DeviceType::CPU, xs, rs,
            [&](int) { cpu_weights.push_back({clone(c.cw), clone(c.fw), clone(c.fb)}); }, out, &cpu_losses);
      train(g, nullptr, recipe, gpu_type(), xs, rs, [&](int step) {
        const Net& w = cpu_weights[size_t(step)];
        EXPECT_TRUE(same_bits(w.cw, g.cw.detach())) << what << " step " << step << ": conv weight";
        EXPECT_TRUE(same_bits(w.fw, g.fw.detach())) << what << " step " << step << ": linear weight";
        EXPECT_TRUE(same_bits(w.fb, g.fb.detach())) << what << " step " << step << ": linear bias";
      }, out, &dev_losses);
      EXPECT_EQ(cpu_losses, dev_losses) << what;
      EXPECT_FALSE(same_bits(cpu0.cw, g.cw.detach())) << what << ": the steps moved the weights";
    }
}

// A block holding a NaN or an inf dequantizes to NaN (E8M0's NaN code), an all-zero block to
// zeros: the outputs that read them are NaN on both devices, the others equal the CPU's (exact data).
TEST(CudaMxAutocast, NonFiniteAndZeroBlocksGiveTheCpusOutputs) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  Tensor x = dyadic(rng, {6, 72}, -2, 0), w = dyadic(rng, {5, 72}, -3, -2);
  float* p = x.data_ptr<float>();
  p[0 * 72 + 3] = NAN;        // row 0, block 0
  p[1 * 72 + 40] = INFINITY;  // row 1, block 1
  p[2 * 72 + 70] = -INFINITY; // row 2, the short block (64..71)
  for (int j = 0; j < 32; ++j) p[3 * 72 + j] = 0.0f;  // row 3, an all-zero block
  for (DType out : {DType::Float32, DType::BFloat16}) {
    Tensor yc, yd;
    {
      Fp8Autocast fp8(MXFP8BlockScaling{}, nullptr, {out}, DeviceType::CPU);
      yc = linear(x, w);
    }
    {
      Fp8Autocast fp8(MXFP8BlockScaling{}, nullptr, {out}, gpu_type());
      yd = on_cpu(linear(x.to(gpu()), w.to(gpu())));
    }
    const std::vector<float> vc = yc.to(DType::Float32).to_vector<float>(), vd = yd.to(DType::Float32).to_vector<float>();
    int nans = 0;
    for (size_t i = 0; i < vc.size(); ++i) {
      EXPECT_EQ(std::isnan(vc[i]), std::isnan(vd[i])) << dtype_name(out) << " [" << i << "]";
      nans += std::isnan(vc[i]) ? 1 : 0;
    }
    EXPECT_EQ(nans, 15) << dtype_name(out) << ": rows 0-2 are NaN";
    EXPECT_TRUE(same_bits(yc.narrow(0, 3, 3), yd.narrow(0, 3, 3))) << dtype_name(out);
  }
}

// conv2d keeps its input for the wgrad (its blocks run along N OH OW): an in-place change between
// forward and backward is refused, as on the CPU (Fp8Autocast.MxConv2dRefusesAnInputChangedInPlace...).
TEST(CudaMxAutocast, Conv2dRefusesAnInputChangedInPlaceAfterTheForward) {
  MT_REQUIRE_CUDA();
  for (DType dt : {DType::BFloat16, DType::Float32}) {
    Tensor x = randn({2, 3, 6, 6}).to(dt).to(gpu());
    const Tensor w = randn({4, 3, 3, 3}).to(gpu()).requires_grad_();
    Tensor y;
    {
      Fp8Autocast fp8(MXFP8BlockScaling{}, nullptr, {}, gpu_type());
      y = conv2d(x, w, {}, {1, 1}, {1, 1});
    }
    {
      NoGradGuard no_grad;
      x.add_(ones_like(x));
    }
    const std::string e = error_of([&] { sum(y).backward(); });
    EXPECT_NE(e.find("modified by an in-place operation: input 0 of conv2d"), std::string::npos) << dtype_name(dt) << ": " << e;
  }
}

TEST(CudaMxAutocast, AStepWaitsForNothingOnTheHost) {
  MT_REQUIRE_EMULATED_STREAM_ORDER();
#if defined(MIXTAPE_CUDA_EMULATOR)
  std::mt19937_64 rng(fresh_seed());
  const Net net = Net{random_input(rng, {4, 2, 3, 3}, DType::Float32), random_input(rng, {4, 64}, DType::Float32),
                      random_input(rng, {4}, DType::Float32)}
                      .to(gpu());
  const Tensor x = random_input(rng, {2, 2, 4, 4}, DType::Float32).to(gpu());
  const Tensor r = random_input(rng, {2, 4}, DType::Float32).to(gpu());
  const uint64_t before = cuda_emulator::host_waits();
  for (int step = 0; step < 2; ++step) {
    Tensor y;
    {
      Fp8Autocast fp8(MXFP8BlockScaling{}, nullptr, {}, DeviceType::CUDA);
      y = net.forward(x);
    }
    sum(y.to(DType::Float32) * r).backward();
  }
  EXPECT_EQ(cuda_emulator::host_waits(), before);
  EXPECT_GT(on_cpu(net.cw.grad()).abs().sum().item<float>(), 0.0f);
#endif
}

// ---- The weight for the dgrad: a leaf is cast again, not saved (amp/fp8_ops.cpp's rule) ----

// dx on the device of conv2d (x (2, 5, 6, 6)) or linear (x (6, 40)) under `recipe`, for the weight
// `w` as given (a leaf, or a computed w * 1, which keeps its FP8 copy); `between` runs between the
// forward and the backward.
Tensor device_dx(const Fp8Recipe& recipe, bool conv, DType out, const Tensor& w, Fp8Metas* metas = nullptr,
                 const std::function<void()>& between = {}) {
  std::mt19937_64 rng(7);  // the same x and output gradient on every call
  const Tensor x = leaf(random_input(rng, conv ? IntList{2, 5, 6, 6} : IntList{6, 40}, DType::Float32), gpu());
  Tensor y;
  {
    Fp8Autocast fp8(recipe, metas, {out}, gpu_type());
    y = conv ? conv2d(x, w, {}, {1, 1}, {1, 1}) : linear(x, w);
  }
  if (between) between();
  sum(y.to(DType::Float32) * random_input(rng, y.sizes(), DType::Float32).to(gpu())).backward();
  return x.grad();
}

Tensor device_weight(bool conv, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return leaf(random_input(rng, conv ? IntList{4, 5, 3, 3} : IntList{7, 40}, DType::Float32, 0.01, 0.5), gpu());
}

TEST(CudaFp8Autocast, TheDgradCastsALeafWeightAgainToTheBytesACopyWouldHold) {
  MT_REQUIRE_CUDA();
  for (bool conv : {true, false})
    for (DType out : {DType::BFloat16, DType::Float32})
      for (const Fp8Recipe& recipe : {Fp8Recipe{CurrentScaling{}}, Fp8Recipe{MXFP8BlockScaling{}}}) {
        const Tensor w = device_weight(conv, 11);
        EXPECT_TRUE(same_bits(device_dx(recipe, conv, out, w), device_dx(recipe, conv, out, w * 1.0)))
            << (conv ? "conv2d " : "linear ") << dtype_name(out) << ' ' << recipe_string(recipe);
      }
}

TEST(CudaFp8Autocast, TheDgradCastsTheWeightWithTheForwardsScaleAfterAnUpdate) {
  MT_REQUIRE_CUDA();
  // Delayed scaling, history 1: an update between forward and backward moves the input's and the
  // weight's scales (the output gradient's has no amax yet and keeps 1); the recast must use the
  // scale the forward cast with (a device copy), not the meta's new one.
  for (bool conv : {true, false})
    for (DType out : {DType::BFloat16, DType::Float32}) {
      const Tensor w = device_weight(conv, 12);
      DelayedScaling recipe;
      recipe.amax_history_len = 1;
      Fp8Metas plain(recipe, {{"l.weight", w}}), updated(recipe, {{"l.weight", w}});
      const Tensor want = device_dx(recipe, conv, out, w, &plain);
      const Tensor got = device_dx(recipe, conv, out, w, &updated, [&] { updated.update_scales(); });
      EXPECT_FALSE(same_bits(plain.metas()[0].scale, updated.metas()[0].scale)) << "the update moved the scales";
      EXPECT_TRUE(same_bits(want, got)) << (conv ? "conv2d " : "linear ") << dtype_name(out);
    }
}

TEST(CudaFp8Autocast, AWeightChangedInPlaceBetweenForwardAndBackwardIsRefused) {
  MT_REQUIRE_CUDA();
  for (bool conv : {true, false})
    for (const Fp8Recipe& recipe : {Fp8Recipe{CurrentScaling{}}, Fp8Recipe{MXFP8BlockScaling{}}}) {
      Tensor w = device_weight(conv, 13);
      const std::string e = error_of([&] {
        device_dx(recipe, conv, DType::BFloat16, w, nullptr, [&] {
          NoGradGuard no_grad;
          w.mul_(2.0);
        });
      });
      EXPECT_NE(e.find(std::string("modified by an in-place operation: input 1 (the weight) of ") +
                       (conv ? "conv2d" : "linear")),
                std::string::npos)
          << recipe_string(recipe) << ": " << e;
    }
}

TEST(CudaFp8Autocast, ALeafWeightIsNotSavedForTheBackward) {
  MT_REQUIRE_CUDA();
  // What the graph keeps on the device besides the output: the input cast for the wgrad (one byte a
  // value; MX: plus its codes) and no copy of the leaf weight (a few one-element scale copies).
  std::mt19937_64 rng(fresh_seed());
  const Tensor xl = leaf(random_input(rng, {64, 256}, DType::Float32), gpu());
  const Tensor wl = leaf(random_input(rng, {128, 256}, DType::Float32, 0.01, 0.5), gpu());
  const Tensor xc = leaf(random_input(rng, {8, 16, 14, 14}, DType::Float32), gpu());
  const Tensor wc = leaf(random_input(rng, {128, 16, 3, 3}, DType::Float32, 0.01, 0.5), gpu());
  Fp8Metas metas(DelayedScaling{}, {{"conv.weight", wc}, {"fc.weight", wl}});
  auto forward = [&](bool conv, int mode) {
    std::optional<Fp8Autocast> fp8;
    if (mode == 0) fp8.emplace(CurrentScaling{}, nullptr, Fp8AutocastOptions{}, gpu_type());
    if (mode == 1) fp8.emplace(DelayedScaling{}, &metas, Fp8AutocastOptions{}, gpu_type());
    if (mode == 2) fp8.emplace(MXFP8BlockScaling{}, nullptr, Fp8AutocastOptions{}, gpu_type());
    return conv ? conv2d(xc, wc, {}, {1, 1}, {1, 1}) : linear(xl, wl);
  };
  // Once untimed first: a library's first call allocates what it keeps for the process (cuBLAS's
  // workspace), which is not the graph's.
  for (bool conv : {true, false})
    for (int mode = 0; mode < 3; ++mode) (void)forward(conv, mode);
  for (bool conv : {true, false})
    for (int mode = 0; mode < 3; ++mode) {
      const int64_t before = memory_stats(gpu()).current_bytes;
      const Tensor y = forward(conv, mode);
      const int64_t kept = memory_stats(gpu()).current_bytes - before - static_cast<int64_t>(y.nbytes());
      const int64_t inputs = conv ? xc.numel() : xl.numel(), weights = conv ? wc.numel() : wl.numel();
      const std::string what = std::string(conv ? "conv2d" : "linear") + " mode " + std::to_string(mode);
      if (mode != 2 || !conv) {  // (MX conv2d keeps the input itself)
        EXPECT_GE(kept, inputs) << what;
      }
      EXPECT_LT(kept, inputs + weights) << what;
      // MX conv2d keeps its input by reference (no bytes): a copy of the weight would show.
      if (mode == 2 && conv) {
        EXPECT_LT(kept, weights) << what;
      }
    }
}

}  // namespace
}  // namespace mixtape
