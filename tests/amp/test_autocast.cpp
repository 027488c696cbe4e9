// tests/amp/test_autocast.cpp — the Autocast layer: behaviours 1-14 of docs/amp-behaviours.md.
// CPU and CUDA share one policy list (PyTorch's CUDA lists; docs/autocast-policy.md, checked
// against the registry by tests/amp/policy_doc), so the CPU with Float16 shows every rule; the
// CUDA-only ban is checked through check_autocast_ban.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "common/error_of.h"
#include "common/bit_equal.h"
#include "mixtape/mixtape.h"

namespace mixtape::testing {
namespace {

using amp::AutocastGuard;
constexpr DeviceType CPU = DeviceType::CPU;

Tensor rnd(const IntList& sizes, uint64_t seed, DType dt = DType::Float32) {
  Generator g(seed);
  return randn(sizes, TensorOptions(dt), &g);
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]) / std::max(1e-3, std::abs(y[i])));
  return m;
}

// ---- 1. lower-precision policy ----
TEST(Autocast, B01_LowerPrecisionPolicyCastsToTheRegionDtype) {
  Tensor a = rnd({5, 7}, 1), b = rnd({7, 3}, 2);
  Tensor b16 = b.to(DType::Float16);
  Tensor w = rnd({4, 7}, 3), bias = rnd({4}, 4);
  Tensor img = rnd({2, 3, 6, 6}, 5), kw = rnd({4, 3, 3, 3}, 6), kb = rnd({4}, 7);
  AutocastGuard autocast(CPU, DType::Float16);
  Tensor y = mm(a, b);
  EXPECT_EQ(y.dtype(), DType::Float16);
  Tensor ref;
  {
    AutocastGuard off(CPU, std::nullopt, /*enabled=*/false);
    ref = mm(a.to(DType::Float16), b16);
  }
  EXPECT_TRUE(bit_equal(y, ref));
  EXPECT_TRUE(bit_equal(mm(a, b16), ref));  // mixed f32/f16: both go to f16
  Tensor lin = linear(a, w, bias);
  EXPECT_EQ(lin.dtype(), DType::Float16);
  Tensor conv = conv2d(img, kw, kb, {1, 1}, {1, 1});
  EXPECT_EQ(conv.dtype(), DType::Float16);
  {
    AutocastGuard off(CPU, std::nullopt, false);
    EXPECT_TRUE(bit_equal(lin, linear(a.to(DType::Float16), w.to(DType::Float16), bias.to(DType::Float16))));
    EXPECT_TRUE(bit_equal(conv, conv2d(img.to(DType::Float16), kw.to(DType::Float16), kb.to(DType::Float16),
                                       {1, 1}, {1, 1})));
  }
  // BFloat16 regions work the same way (the CPU's default autocast dtype).
  AutocastGuard bf(CPU);
  EXPECT_EQ(amp::get_autocast_dtype(CPU), DType::Float16);  // the outer guard chose f16; inner kept it
  AutocastGuard bf2(CPU, DType::BFloat16);
  EXPECT_EQ(mm(a, b).dtype(), DType::BFloat16);
}

TEST(Autocast, CpuDefaultDtypeIsBFloat16AndOnly16BitDtypesAreAccepted) {
  {
    AutocastGuard autocast(CPU);
    EXPECT_EQ(amp::get_autocast_dtype(CPU), DType::BFloat16);
    EXPECT_EQ(mm(rnd({2, 2}, 1), rnd({2, 2}, 2)).dtype(), DType::BFloat16);
  }
  EXPECT_EQ(amp::get_autocast_dtype(DeviceType::CUDA), DType::Float16);
  std::string e = error_of([] { AutocastGuard g(CPU, DType::Float64); });
  EXPECT_NE(e.find("Float16 or BFloat16"), std::string::npos) << e;
  EXPECT_NE(e.find("Float64"), std::string::npos) << e;
  EXPECT_FALSE(amp::is_autocast_enabled(CPU));  // a refused guard changed nothing
  EXPECT_EQ(amp::autocast_nesting(), 0);
}

// ---- 2. fp32 policy ----
TEST(Autocast, B02_Fp32PolicyRunsSensitiveOpsInFloat32) {
  Tensor x16 = rnd({4, 6}, 11, DType::Float16);
  Tensor pos16 = (rnd({4, 6}, 12).abs() + 0.5).to(DType::Float16);
  Tensor t32 = rnd({4, 6}, 13);
  Tensor target = tensor({0.0, 5.0, 2.0, 3.0}, DType::Int64);
  Tensor x32 = x16.to(DType::Float32);
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    Tensor in16;
  };
  std::vector<Case> cases = {
      {"softmax", [](const Tensor& x) { return softmax(x, 1); }, x16},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x, 1); }, x16},
      {"sum", [](const Tensor& x) { return sum(x); }, x16},
      {"exp", [](const Tensor& x) { return exp(x); }, x16},
      {"log", [](const Tensor& x) { return log(x); }, pos16},
      {"pow", [](const Tensor& x) { return pow(x, 3.0); }, x16},
      {"layer_norm", [](const Tensor& x) { return layer_norm(x, {6}); }, x16},
      {"mse_loss", [&](const Tensor& x) { return mse_loss(x, t32); }, x16},
      {"nll_loss", [&](const Tensor& x) { return nll_loss(x, target); }, x16},
      {"cross_entropy", [&](const Tensor& x) { return cross_entropy(x, target); }, x16},
  };
  for (auto& c : cases) {
    Tensor got;
    {
      AutocastGuard autocast(CPU, DType::Float16);
      got = c.f(c.in16);
    }
    EXPECT_EQ(got.dtype(), DType::Float32) << c.name;
    Tensor ref = c.f(c.in16.to(DType::Float32));  // the f32 op on x.float(), outside autocast
    EXPECT_TRUE(bit_equal(got, ref)) << c.name;
  }
  AutocastGuard autocast(CPU, DType::Float16);
  EXPECT_EQ(softmax(x16, 1, DType::Float16).dtype(), DType::Float16);  // an explicit dtype wins
  EXPECT_EQ(softmax(x32, 1).dtype(), DType::Float32);
}

// ---- 3. promote policy: PyTorch's prioritize ----
// Every expectation below is one that ordinary type promotion (an op with no policy) or the
// earlier "widest input wins" rule gets wrong, so none of them holds without the policy.
TEST(Autocast, B03_PromoteStartsFromTheRegionDtypeAndTakesInputsInOrder) {
  // u = 1 + 2^-10 is exact in f16; u*u = 1 + 2^-9 + 2^-20 needs 20 fraction bits: exact in f32,
  // rounded to 1 + 2^-9 in f16 (10 fraction bits).
  const double u = 1.0 + std::ldexp(1.0, -10);
  const double uu_f32 = 1.0 + std::ldexp(1.0, -9) + std::ldexp(1.0, -20), uu_f16 = 1.0 + std::ldexp(1.0, -9);
  Tensor z32 = zeros({2}), u16 = full({2}, u, TensorOptions(DType::Float16));
  Tensor h16 = rnd({2}, 2, DType::Float16), bf = rnd({2}, 5, DType::BFloat16), d64 = rnd({2}, 4, DType::Float64);
  Tensor no_policy;
  {
    AutocastGuard off(CPU, std::nullopt, /*enabled=*/false);
    no_policy = addcmul(z32, u16, u16);  // tensor1 * tensor2 computed and rounded in f16
  }
  ASSERT_EQ(no_policy.to_vector<double>()[0], uu_f16);

  AutocastGuard autocast(CPU, DType::Float16);
  // An f32 input makes every input f32 before the op: the product is exact.
  Tensor mixed = addcmul(z32, u16, u16);
  EXPECT_EQ(mixed.dtype(), DType::Float32);
  EXPECT_EQ(mixed.to_vector<double>()[0], uu_f32);

  // The region's dtype only: stays f16, and the layer says so.
  std::string trace;
  {
    ScopedTrace t(static_cast<uint32_t>(TraceKind::Amp), &trace);
    EXPECT_EQ(addcmul(h16, u16, h16).dtype(), DType::Float16);
    // f64 takes no part and is not cast: the f16 inputs stay f16; the op itself then promotes.
    EXPECT_EQ(addcmul(h16, u16, d64).dtype(), DType::Float64);
  }
  EXPECT_NE(trace.find("autocast addcmul promote(Float16): self f16 (kept), tensor1 f16 (kept), tensor2 f16 (kept)"),
            std::string::npos) << trace;
  EXPECT_NE(trace.find("tensor2 f64 (skipped: ineligible)"), std::string::npos) << trace;

  // bf16 inputs in an f16 region: promotion starts from f16 and cannot take bf16 (PyTorch raises).
  // Ordinary promotion would return bf16.
  std::string e = error_of([&] { addcmul(bf, bf, bf); });
  for (const char* part : {"addcmul: autocast's promote policy cannot combine self (BFloat16) with the Float16 region",
                           "inputs: self BFloat16, tensor1 BFloat16, tensor2 BFloat16",
                           "Unexpected floating ScalarType in at::autocast::prioritize"})
    EXPECT_NE(e.find(part), std::string::npos) << e;
  // Argument order decides: bf16 before any f32 fails even though f32 inputs follow (ordinary
  // promotion: f32); after an f32 input anything 16-bit joins f32.
  e = error_of([&] { addcmul(bf, z32, z32); });
  EXPECT_NE(e.find("cannot combine self (BFloat16)"), std::string::npos) << e;
  e = error_of([&] { addcmul(d64, bf, h16); });  // f64 is skipped, so bf16 meets the region's f16
  EXPECT_NE(e.find("cannot combine tensor1 (BFloat16)"), std::string::npos) << e;
  Tensor after_f32 = addcmul(z32, bf, u16);
  EXPECT_EQ(after_f32.dtype(), DType::Float32);
  {
    AutocastGuard off(CPU, std::nullopt, false);
    EXPECT_TRUE(bit_equal(after_f32, addcmul(z32, bf.to(DType::Float32), u16.to(DType::Float32))));
  }
  // The region's dtype is where promotion starts: in a bf16 region f16 inputs are refused and
  // bf16 ones kept.
  AutocastGuard bf_region(CPU, DType::BFloat16);
  e = error_of([&] { addcmul(h16, h16, h16); });
  EXPECT_NE(e.find("cannot combine self (Float16) with the BFloat16 region"), std::string::npos) << e;
  EXPECT_EQ(addcmul(bf, bf, bf).dtype(), DType::BFloat16);
}

TEST(Autocast, B03_CatHasNoPolicyScatterAddPromotes) {
  Tensor h16 = rnd({3}, 11, DType::Float16), bf = rnd({3}, 12, DType::BFloat16), f32 = rnd({3}, 13);
  Tensor idx = tensor({0.0, 2.0, 1.0}, DType::Int64);
  AutocastGuard autocast(CPU, DType::Float16);
  // cat is on no CUDA list: ordinary promotion, f16 with bf16 gives f32 (promote would refuse it).
  std::string trace;
  {
    ScopedTrace t(static_cast<uint32_t>(TraceKind::Amp), &trace);
    Tensor c = cat({h16, bf});
    EXPECT_EQ(c.dtype(), DType::Float32);
    EXPECT_EQ(cat({bf, f32}).dtype(), DType::Float32);
    EXPECT_EQ(cat({bf, bf}).dtype(), DType::BFloat16);  // promote would refuse bf16 in an f16 region
  }
  EXPECT_EQ(trace.find("autocast cat"), std::string::npos) << trace;
  // scatter_add is on the CUDA promote list: bf16 data in an f16 region is refused, as PyTorch's
  // zeros(..).scatter_add(dim, index, src) would be.
  std::string e = error_of([&] { scatter_add_into_zeros(bf, 0, idx, {3}); });
  EXPECT_NE(e.find("scatter_add: autocast's promote policy cannot combine input 0 (BFloat16) with the Float16 region"),
            std::string::npos) << e;
  EXPECT_EQ(scatter_add_into_zeros(h16, 0, idx, {3}).dtype(), DType::Float16);
  EXPECT_EQ(scatter_add_into_zeros(f32, 0, idx, {3}).dtype(), DType::Float32);
}

// ---- 4. unlisted ops untouched ----
TEST(Autocast, B04_UnlistedOpsRunInTheirInputsDtypes) {
  Tensor x16 = rnd({2, 3, 4, 4}, 21, DType::Float16);
  Tensor f32 = rnd({2, 3, 4, 4}, 22);
  Tensor rm = zeros({3}), rv = ones({3}), w = ones({3}), b = zeros({3});
  Tensor rm_ref = zeros({3}), rv_ref = ones({3});
  Tensor y;
  {
    AutocastGuard autocast(CPU, DType::Float16);
    EXPECT_EQ(relu(x16).dtype(), DType::Float16);
    EXPECT_EQ(add(x16, f32).dtype(), DType::Float32);  // ordinary promotion
    y = batch_norm(x16, rm, rv, w, b, /*training=*/true);
  }
  EXPECT_EQ(y.dtype(), DType::Float16);
  EXPECT_EQ(rm.dtype(), DType::Float32);
  EXPECT_EQ(rv.dtype(), DType::Float32);
  Tensor y_ref = batch_norm(x16.to(DType::Float32), rm_ref, rv_ref, w, b, true);
  EXPECT_LT(max_rel_diff(rm, rm_ref), 1e-5);
  EXPECT_LT(max_rel_diff(rv, rv_ref), 1e-5);
  EXPECT_GT(std::abs(rm.to_vector<double>()[0]), 0.0);  // updated
  EXPECT_LT(max_rel_diff(y.to(DType::Float32), y_ref), 1e-2);
}

// ---- 5. ineligible tensors and in-place ops ----
TEST(Autocast, B05_IneligibleTensorsAndInPlaceOpsPassThrough) {
  Tensor a64 = rnd({3, 3}, 31, DType::Float64), b64 = rnd({3, 3}, 32, DType::Float64);
  Tensor x = rnd({3, 3}, 33), y16 = rnd({3, 3}, 34, DType::Float16);
  std::string trace;
  AutocastGuard autocast(CPU, DType::Float16);
  {
    ScopedTrace t(static_cast<uint32_t>(TraceKind::Amp), &trace);
    EXPECT_EQ(mm(a64, b64).dtype(), DType::Float64);
    add_(x, y16);  // in-place: never autocast; x stays f32
  }
  EXPECT_EQ(x.dtype(), DType::Float32);
  EXPECT_NE(trace.find("autocast matmul lower_precision(Float16): self f64 (skipped: ineligible), other f64 "
                       "(skipped: ineligible) (no eligible input)"),
            std::string::npos)
      << trace;
  EXPECT_EQ(trace.find("add_"), std::string::npos) << trace;
  Tensor idx = tensor({2.0, 0.0}, DType::Int64);
  EXPECT_EQ(index_select(x, 0, idx).dtype(), DType::Float32);  // integer index untouched
}

// ---- 6. binary_cross_entropy: banned under CUDA autocast, f32 under CPU autocast ----
TEST(Autocast, B06_BinaryCrossEntropyBannedUnderCudaAutocastFp32OnCpu) {
  const OpSchema* bce = find_op("binary_cross_entropy");
  ASSERT_NE(bce, nullptr);
  std::string e = error_of([&] { amp::check_autocast_ban(*bce, DeviceType::CUDA); });
  EXPECT_NE(e.find("binary_cross_entropy is unsafe to autocast"), std::string::npos) << e;
  EXPECT_NE(e.find("binary_cross_entropy_with_logits"), std::string::npos) << e;
  EXPECT_EQ(error_of([&] { amp::check_autocast_ban(*bce, CPU); }), "(no error)");
  EXPECT_EQ(error_of([&] { amp::check_autocast_ban(*find_op("binary_cross_entropy_with_logits"), DeviceType::CUDA); }),
            "(no error)");
  Tensor logits = rnd({8}, 41, DType::Float16);
  Tensor target = (rnd({8}, 42).abs() / 4.0).to(DType::Float16);
  AutocastGuard autocast(CPU, DType::Float16);
  Tensor p = sigmoid(logits);
  Tensor l = binary_cross_entropy(p, target);
  EXPECT_EQ(l.dtype(), DType::Float32);
  EXPECT_EQ(binary_cross_entropy_with_logits(logits, target).dtype(), DType::Float32);
}

// ---- 7. nesting, enabled=false, exceptions ----
TEST(Autocast, B07_NestedDisableAndExceptionRestoreTheOuterState) {
  Tensor a = rnd({2, 2}, 51), b = rnd({2, 2}, 52);
  AutocastGuard autocast(CPU, DType::Float16);
  EXPECT_EQ(mm(a, b).dtype(), DType::Float16);
  {
    AutocastGuard off(CPU, std::nullopt, false);
    EXPECT_EQ(mm(a, b).dtype(), DType::Float32);
    EXPECT_EQ(amp::autocast_nesting(), 2);
  }
  EXPECT_EQ(mm(a, b).dtype(), DType::Float16);
  try {
    AutocastGuard off(CPU, std::nullopt, false);
    AutocastGuard bf(CPU, DType::BFloat16);
    EXPECT_EQ(mm(a, b).dtype(), DType::BFloat16);
    mm(a, rnd({3, 3}, 53));  // shape error inside the nested regions
    FAIL() << "expected a shape error";
  } catch (const Error&) {
  }
  EXPECT_TRUE(amp::is_autocast_enabled(CPU));
  EXPECT_EQ(amp::get_autocast_dtype(CPU), DType::Float16);
  EXPECT_EQ(amp::autocast_nesting(), 1);
  EXPECT_EQ(mm(a, b).dtype(), DType::Float16);
}

// ---- 8. thread-local state ----
TEST(Autocast, B08_AGuardInOneThreadDoesNotAffectAnother) {
  Tensor a = rnd({8, 8}, 61), b = rnd({8, 8}, 62);
  std::barrier sync(2);
  std::vector<DType> seen_a, seen_b;
  std::thread ta([&] {
    AutocastGuard autocast(CPU, DType::Float16);
    sync.arrive_and_wait();  // both threads are inside their work now
    for (int i = 0; i < 50; ++i) seen_a.push_back(mm(a, b).dtype());
    sync.arrive_and_wait();
  });
  std::thread tb([&] {
    sync.arrive_and_wait();
    for (int i = 0; i < 50; ++i) seen_b.push_back(mm(a, b).dtype());
    sync.arrive_and_wait();
  });
  ta.join();
  tb.join();
  EXPECT_EQ(seen_a, std::vector<DType>(50, DType::Float16));
  EXPECT_EQ(seen_b, std::vector<DType>(50, DType::Float32));
  EXPECT_FALSE(amp::is_autocast_enabled(CPU));  // nor the test's own thread
}

// The f16 copy of `w` a linear output's node saved (input 1 of the LinearBackward node).
Tensor saved_weight_of(const Tensor& out) {
  auto* node = dynamic_cast<autograd::OpNode*>(out.grad_fn().get());
  EXPECT_NE(node, nullptr);
  return node ? node->saved_inputs()[1].peek() : Tensor();
}

// ---- 9. weight-cast cache hits and misses ----
TEST(Autocast, B09_LeafWeightsAreCastOncePerRegionOthersEveryTime) {
  Tensor w = rnd({4, 6}, 71).requires_grad_();
  Tensor x = rnd({3, 6}, 72);
  amp::reset_autocast_cast_count();
  AutocastGuard autocast(CPU, DType::Float16);
  Tensor y1 = linear(x, w), y2 = linear(x, w);
  // x (no grad) is cast by each call; w once.
  EXPECT_EQ(amp::autocast_cast_count(), 3);
  EXPECT_EQ(amp::autocast_cache_size(), 1u);
  Tensor s1 = saved_weight_of(y1), s2 = saved_weight_of(y2);
  EXPECT_EQ(s1.dtype(), DType::Float16);
  EXPECT_EQ(s1.storage().get(), s2.storage().get());  // both ops read the same f16 copy

  amp::reset_autocast_cast_count();
  Tensor act = (x * 2.0).requires_grad_();             // a leaf would be cached: use a non-leaf
  Tensor nonleaf = act * 1.0;
  Tensor nograd = rnd({4, 6}, 73);                     // requires_grad=false
  Tensor base = rnd({24}, 74);
  Tensor wv = base.view({4, 6}).requires_grad_(true);  // a leaf that is a view
  ASSERT_TRUE(wv.is_view() && wv.is_leaf());
  for (int i = 0; i < 2; ++i) {
    linear(nonleaf, w);     // input cast each time, w hit
    linear(x, nograd);      // both cast each time
    linear(x, wv);          // both cast each time
  }
  EXPECT_EQ(amp::autocast_cast_count(), 2 * (1 + 2 + 2));
  EXPECT_EQ(amp::autocast_cache_size(), 1u);
}

// ---- 10. cache lifetime ----
TEST(Autocast, B10_CacheClearedOnlyWhenTheOutermostRegionExits) {
  Tensor w = rnd({3, 3}, 81).requires_grad_();
  Tensor x = rnd({2, 3}, 82);
  {
    AutocastGuard outer(CPU, DType::Float16);
    {
      AutocastGuard inner(CPU, DType::Float16);
      linear(x, w);
      EXPECT_EQ(amp::autocast_cache_size(), 1u);
    }
    EXPECT_EQ(amp::autocast_cache_size(), 1u);  // inner exit keeps it
    {
      AutocastGuard off(CPU, std::nullopt, false);
    }
    EXPECT_EQ(amp::autocast_cache_size(), 1u);  // so does a disabled guard
  }
  EXPECT_EQ(amp::autocast_cache_size(), 0u);

  // After an optimizer step the next region sees the new weights.
  optim::SGD opt({w}, {.lr = 0.5});
  Tensor y0;
  {
    AutocastGuard autocast(CPU, DType::Float16);
    y0 = linear(x, w);
  }
  sum(y0).backward();
  opt.step();
  Tensor y1;
  {
    AutocastGuard autocast(CPU, DType::Float16);
    y1 = linear(x, w);
  }
  Tensor expect;
  {
    NoGradGuard ng;
    expect = linear(x.to(DType::Float16), w.to(DType::Float16));
  }
  EXPECT_TRUE(bit_equal(y1.detach(), expect));
  EXPECT_FALSE(bit_equal(y0.detach(), y1.detach()));
}

// d sum(linear(x, w)) / dw computed in f32 without autocast.
Tensor f32_weight_grad(const Tensor& x, const Tensor& w) {
  Tensor w2 = w.detach().to(DType::Float32).clone().requires_grad_();
  sum(linear(x, w2)).backward();
  return w2.grad();
}

// ---- 11. cache under NoGradGuard ----
TEST(Autocast, B11_ACastFirstMadeUnderNoGradStillCarriesTheGraph) {
  Tensor w = rnd({3, 5}, 91).requires_grad_();
  Tensor x = rnd({4, 5}, 92);
  {
    AutocastGuard autocast(CPU, DType::Float16);
    {
      NoGradGuard ng;
      linear(x, w);  // e.g. an evaluation pass: caches the f16 copy of w
    }
    Tensor y = linear(x, w);  // hits the cache
    ASSERT_TRUE(y.requires_grad());
    sum(y.to(DType::Float32)).backward();
  }
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
  Tensor ref = f32_weight_grad(x, w);
  EXPECT_LT(max_rel_diff(w.grad(), ref), 1e-2);  // f16 forward/backward vs f32
}

// ---- 12. gradients come back in the leaf's dtype ----
TEST(Autocast, B12_GradientsReturnInTheLeafsDtype) {
  Tensor w32 = rnd({4, 5}, 101).requires_grad_();
  Tensor w16 = rnd({4, 5}, 102, DType::Float16).requires_grad_();
  Tensor x = rnd({3, 5}, 103);
  {
    AutocastGuard autocast(CPU, DType::Float16);
    Tensor loss = sum(linear(x, w32)) + sum(linear(x, w16));
    EXPECT_EQ(loss.dtype(), DType::Float32);
    loss.backward();
  }
  EXPECT_EQ(w32.grad().dtype(), DType::Float32);
  EXPECT_EQ(w16.grad().dtype(), DType::Float16);
  EXPECT_LT(max_rel_diff(w32.grad(), f32_weight_grad(x, w32)), 1e-2);
  EXPECT_LT(max_rel_diff(w16.grad().to(DType::Float32), f32_weight_grad(x, w16.to(DType::Float32))), 1e-2);
}

// ---- 13. lower-precision ops save 16-bit tensors; backward is 16-bit ----
TEST(Autocast, B13_LowerPrecisionOpsSave16BitInputsAndBackwardIn16Bit) {
  Tensor w = rnd({4, 6}, 111).requires_grad_();
  Tensor x = rnd({3, 6}, 112).requires_grad_();
  Tensor h;
  {
    AutocastGuard autocast(CPU, DType::Float16);
    h = linear(x, w);
  }
  auto* node = dynamic_cast<autograd::OpNode*>(h.grad_fn().get());
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->op().name, "linear");
  for (int i : {0, 1}) EXPECT_EQ(node->saved_inputs()[i].peek().dtype(), DType::Float16) << i;
  DType grad_dtype = DType::Float32;
  h.register_hook([&](const Tensor& g) {
    grad_dtype = g.dtype();
    return Tensor();
  });
  sum(h.to(DType::Float32)).backward();
  EXPECT_EQ(grad_dtype, DType::Float16);  // the activation gradient is 16-bit
  EXPECT_EQ(x.grad().dtype(), DType::Float32);
}

TEST(Autocast, B13_AConvNetKeepsLessActivationMemoryUnderAutocast) {
  auto peak_of_forward = [](bool use_autocast) {
    Generator g(7);
    nn::Conv2d c1(3, 16, 3, {.padding = {1}}, &g), c2(16, 16, 3, {.padding = {1}}, &g);
    Tensor x = rnd({8, 3, 32, 32}, 121);
    reset_peak_memory();
    const int64_t base = memory_stats().current_bytes;
    Tensor loss;
    {
      std::optional<AutocastGuard> ac;
      if (use_autocast) ac.emplace(CPU, DType::Float16);
      loss = sum(relu(c2.forward(relu(c1.forward(x)))));
    }
    return memory_stats().current_bytes - base;  // what the tape keeps alive for backward
  };
  int64_t f32 = peak_of_forward(false), f16 = peak_of_forward(true);
  EXPECT_LT(static_cast<double>(f16), 0.75 * static_cast<double>(f32)) << f16 << " vs " << f32;
}

// ---- 14. ops you add: custom_fwd (a casting policy or none) and custom_bwd ----
// What the ops below saw while they ran; reset before each use.
struct CustomOpSeen {
  std::optional<DType> forward_input;
  std::optional<bool> forward_autocast;   // amp::is_autocast_enabled(CPU) inside the forward kernel
  std::optional<DType> forward_mm;        // dtype of an f32 mm the forward kernel computes
  std::optional<bool> backward_autocast;  // ... inside the backward
  std::optional<DType> backward_dtype;    // amp::get_autocast_dtype(CPU) inside the backward
  std::optional<DType> backward_mm;       // dtype of an f32 mm the backward computes
  std::optional<DType> composite_mm;      // dtype of the mm a composite's body computes
};
CustomOpSeen g_seen;

// f16 when the call passes through an enabled f16 region, else f32.
DType probe_mm_dtype() { return mm(ones({2, 2}), ones({2, 2})).dtype(); }

TensorList custom_scale_cpu(const OpCall& c) {
  g_seen.forward_input = c.inputs[0].dtype();
  g_seen.forward_autocast = amp::is_autocast_enabled(CPU);
  g_seen.forward_mm = probe_mm_dtype();
  return {mul(c.inputs[0], 3.0)};
}
TensorList custom_scale_backward(BackwardContext& ctx) {
  g_seen.backward_autocast = amp::is_autocast_enabled(CPU);
  g_seen.backward_dtype = amp::get_autocast_dtype(CPU);
  g_seen.backward_mm = probe_mm_dtype();
  return {mul(ctx.grad(), 3.0)};
}
// @custom_fwd(cast_inputs=torch.float32) + @custom_bwd
const OpSchema& kCastInputsOp = define_op("test_custom_cast_inputs")
                                    .policy(AmpPolicy::FP32)
                                    .backward_under_forward_autocast()
                                    .save({})
                                    .grad(custom_scale_backward)
                                    .kernel(CPU, custom_scale_cpu)
                                    .cpu_only("a test of custom_fwd/custom_bwd on the CPU");
// @custom_fwd (no cast_inputs) + @custom_bwd
const OpSchema& kPlainOp = define_op("test_custom_plain")
                               .backward_under_forward_autocast()
                               .save({})
                               .grad(custom_scale_backward)
                               .kernel(CPU, custom_scale_cpu)
                               .cpu_only("a test of custom_fwd/custom_bwd on the CPU");

TensorList composite_body(const OpCall& c) {
  g_seen.composite_mm = mm(c.inputs[0], c.inputs[0]).dtype();
  return {mul(c.inputs[0], 2.0)};
}
const OpSchema& kCompositePlain = define_op("test_composite_plain").composite_of_ops(composite_body);
const OpSchema& kCompositeFp32 =
    define_op("test_composite_fp32").policy(AmpPolicy::FP32).composite_of_ops(composite_body);

TEST(Autocast, B14_CastInputsRunsForwardAndBackwardWithAutocastOff) {
  Tensor x = rnd({4}, 131, DType::Float16).requires_grad_();
  g_seen = {};
  Tensor y;
  {
    AutocastGuard autocast(CPU, DType::Float16);
    y = dispatch1(kCastInputsOp, {x});
  }
  EXPECT_EQ(g_seen.forward_input, DType::Float32);
  EXPECT_EQ(g_seen.forward_autocast, false);  // PyTorch: forward runs under autocast(enabled=False)
  EXPECT_EQ(g_seen.forward_mm, DType::Float32);
  EXPECT_EQ(y.dtype(), DType::Float32);
  sum(y).backward();  // outside the region
  // custom_bwd restores what forward ran with: autocast off (ctx._fwd_used_autocast is False
  // after cast_inputs), the region's dtype kept (not the engine's defaults: CPU bf16).
  EXPECT_EQ(g_seen.backward_autocast, false);
  EXPECT_EQ(g_seen.backward_dtype, DType::Float16);
  EXPECT_EQ(g_seen.backward_mm, DType::Float32);
  EXPECT_EQ(x.grad().dtype(), DType::Float16);
}

TEST(Autocast, B14_WithoutCastInputsBackwardRunsUnderTheForwardRegion) {
  Tensor x = rnd({4}, 132, DType::Float16).requires_grad_();
  g_seen = {};
  Tensor y;
  {
    AutocastGuard autocast(CPU, DType::Float16);
    y = dispatch1(kPlainOp, {x});
  }
  EXPECT_EQ(g_seen.forward_input, DType::Float16);  // nothing cast
  EXPECT_EQ(g_seen.forward_autocast, true);         // forward runs under the current state
  // mixtape's rule (docs/autocast-policy.md): a kernel's own op calls are never autocast. PyTorch's
  // custom_fwd body would autocast this mm; a composite op's body is (next test).
  EXPECT_EQ(g_seen.forward_mm, DType::Float32);
  sum(y).backward();  // outside the region: custom_bwd reopens the forward's f16 region
  EXPECT_EQ(g_seen.backward_autocast, true);
  EXPECT_EQ(g_seen.backward_dtype, DType::Float16);
  EXPECT_EQ(g_seen.backward_mm, DType::Float16);
  EXPECT_EQ(x.grad().dtype(), DType::Float16);

  // Called outside any region, custom_fwd is a no-op and custom_bwd runs with autocast off.
  g_seen = {};
  sum(dispatch1(kPlainOp, {x})).backward();
  EXPECT_EQ(g_seen.forward_autocast, false);
  EXPECT_EQ(g_seen.backward_autocast, false);
  EXPECT_EQ(g_seen.backward_mm, DType::Float32);

  // Built-in ops' backwards run with autocast off, even when backward() is called inside a region.
  bool autocast_in_builtin_backward = true;
  Tensor w = rnd({3, 4}, 133).requires_grad_();
  {
    AutocastGuard autocast(CPU, DType::Float16);
    Tensor out = linear(rnd({2, 4}, 134), w);
    out.register_hook([&](const Tensor&) {
      autocast_in_builtin_backward = amp::is_autocast_enabled(CPU);
      return Tensor();
    });
    sum(out).backward();
  }
  EXPECT_FALSE(autocast_in_builtin_backward);
}

TEST(Autocast, B14_APolicyNoneCompositeAutocastsItsPieces) {
  Tensor a = rnd({2, 2}, 135), a16 = rnd({2, 2}, 136, DType::Float16);
  AutocastGuard autocast(CPU, DType::Float16);
  g_seen = {};
  EXPECT_EQ(dispatch1(kCompositePlain, {a}).dtype(), DType::Float32);
  EXPECT_EQ(g_seen.composite_mm, DType::Float16);  // the piece passed autocast itself
  g_seen = {};
  EXPECT_EQ(dispatch1(kCompositeFp32, {a16}).dtype(), DType::Float32);
  EXPECT_EQ(g_seen.composite_mm, DType::Float32);  // input cast to f32, pieces run with autocast off
}

// ---- teaching tools ----
TEST(Autocast, TraceNamesEachCastAndTheCacheDecision) {
  Tensor w = rnd({4, 6}, 141).requires_grad_(), b = rnd({4}, 142).requires_grad_();
  Tensor x = rnd({2, 6}, 143);
  std::string trace;
  {
    AutocastGuard autocast(CPU, DType::Float16);
    ScopedTrace t(static_cast<uint32_t>(TraceKind::Amp), &trace);
    linear(x, w, b);
    linear(x, w, b);
  }
  EXPECT_NE(trace.find("autocast linear lower_precision(Float16): input f32->f16 (not cached: "
                       "requires_grad=false), weight f32->f16 (cached), bias f32->f16 (cached)"),
            std::string::npos)
      << trace;
  EXPECT_NE(trace.find("weight f32->f16 (cache hit), bias f32->f16 (cache hit)"), std::string::npos) << trace;
}

TEST(Autocast, PolicyTableListsEveryOpFromTheRegistry) {
  std::string t = amp::policy_table_string();
  auto row = [](std::string op, const char* policy) { return op + std::string(36 - op.size(), ' ') + policy + "\n"; };
  for (const char* op : {"conv2d", "matmul", "linear"}) EXPECT_NE(t.find(row(op, "lower_precision")), std::string::npos) << op;
  EXPECT_NE(t.find(row("softmax", "fp32_unless_dtype")), std::string::npos) << t;
  EXPECT_NE(t.find(row("cross_entropy", "fp32")), std::string::npos) << t;
  EXPECT_NE(t.find(row("addcmul", "promote")), std::string::npos) << t;
  EXPECT_NE(t.find(row("scatter_add", "promote")), std::string::npos) << t;
  EXPECT_NE(t.find(row("cat", "none")), std::string::npos) << t;
  EXPECT_NE(t.find(row("conv2d_input_grad", "none")), std::string::npos) << t;
  EXPECT_NE(t.find(row("relu", "none")), std::string::npos) << t;
  EXPECT_NE(t.find(row("add_", "never (in-place)")), std::string::npos) << t;
  EXPECT_NE(t.find(row("binary_cross_entropy", "fp32; banned under CUDA autocast")), std::string::npos) << t;
}

}  // namespace
}  // namespace mixtape::testing
