// tests/autograd/test_checkpoint.cpp — autograd::checkpoint against the plain graph, bit for bit,
// in every precision mixtape trains in (FP32, autocast FP16 and BF16, a 16-bit model): a weight
// and an input each used twice inside a segment (the recompute must reproduce the plain graph's
// weight-cast cache), a weight shared by two segments (non-reentrant: gradients flow through the
// forward's graph and its one cached cast), a conv and a BatchNorm shared by two segments with
// dropout. Also: float64 finite differences (both modes, nested), what a checkpoint keeps for
// backward and the peak inside a segment's forward (allocator byte counts, deterministic),
// retain_graph, and errors (a recompute that saves other tensors, in-place changes, misuse).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "autograd/checkpoint.h"
#include "common/bit_equal.h"
#include "common/error_of.h"
#include "mixtape/mixtape.h"

namespace mixtape::testing {
namespace {

using autograd::checkpoint;

// ---- the precisions a segment is compared in ----

enum class Precision { FP32, AutocastF16, AutocastBF16, Model16 };

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::FP32: return "FP32";
    case Precision::AutocastF16: return "AutocastF16";
    case Precision::AutocastBF16: return "AutocastBF16";
    case Precision::Model16: return "Model16";
  }
  return "?";
}
std::optional<DType> autocast_dtype(Precision p) {
  if (p == Precision::AutocastF16) return DType::Float16;
  if (p == Precision::AutocastBF16) return DType::BFloat16;
  return std::nullopt;
}
// Model16: the parameters and the data are f16 themselves and no autocast runs (the
// --master-weights model, whose optimizer keeps the FP32 copies).
DType storage_dtype(Precision p) { return p == Precision::Model16 ? DType::Float16 : DType::Float32; }

Tensor param(const IntList& sizes, double scale, DType dt, Generator& g) {
  return (randn(sizes, {}, &g) * scale).to(dt).requires_grad_();
}

// A segment in which weight `w` is used by two linears and the segment input by two linears:
// under autocast the plain graph casts w once (the weight-cast cache) and sums the gradients of
// both uses in 16 bits before casting them back; the input, an activation, is cast once per use
// (activations are never cached) unless it is itself a leaf that requires grad.
struct TwiceUsed {
  Tensor w, b, v;
  explicit TwiceUsed(DType dt) {
    Generator g(11);
    w = param({16, 16}, 0.3, dt, g);
    b = param({16}, 0.3, dt, g);
    v = param({16, 16}, 0.3, dt, g);
  }
  Tensor forward(const Tensor& x, double p_drop = 0.0) const {
    Tensor a = linear(x, w, b);   // w: first use; x: first use
    Tensor c = linear(x, v);      // x: second use
    Tensor h = relu(a) * c;
    if (p_drop > 0) h = dropout(h, p_drop, /*training=*/true);
    return linear(h, w) + x;      // w: second use; x: a residual path too
  }
  std::vector<Tensor> params() const { return {w, b, v}; }
};

struct Grads {
  Tensor loss, x;
  std::vector<Tensor> p;
};

struct RunOptions {
  Precision precision = Precision::FP32;
  bool checkpointed = false;
  bool leaf_input = false;        // the segment's input is the leaf x itself, not an activation
  bool backward_in_region = false;
  double p_drop = 0.0;
  int segments = 2;               // two segments in a row, each with its own weights
  bool shared = false;            // ... or both using the first one's weights
  bool reentrant = false;         // CheckpointOptions::use_reentrant
};

Grads run(const RunOptions& o) {
  const DType dt = storage_dtype(o.precision);
  TwiceUsed a(dt), b(dt);
  if (o.shared) b = a;  // the same parameter tensors in both segments
  Generator gx(3);
  Tensor x = (randn({32, 16}, {}, &gx)).to(dt).requires_grad_();
  Tensor gy = randn({32, 16}, {}, &gx);  // the loss's weights: d loss / d y
  manual_seed(42);
  Tensor loss;
  size_t cache_before_backward = 0;
  {
    std::optional<amp::AutocastGuard> ac;
    if (auto d = autocast_dtype(o.precision)) ac.emplace(DeviceType::CPU, *d);
    Tensor h = o.leaf_input ? x : x * 1.5;
    int seg = 0;
    for (const TwiceUsed* blk : {&a, &b}) {
      if (seg++ == o.segments) break;
      auto fn = [&, blk](const Tensor& t) { return blk->forward(t, o.p_drop); };
      h = o.checkpointed ? checkpoint(fn, h, {.use_reentrant = o.reentrant}) : fn(h);
    }
    loss = sum(h.to(DType::Float32) * gy);
    if (o.backward_in_region) {
      cache_before_backward = amp::autocast_cache_size();
      loss.backward();
      // the recompute's casts are its own: the region's cache is neither read nor grown
      EXPECT_EQ(amp::autocast_cache_size(), cache_before_backward);
    }
  }
  if (!o.backward_in_region) loss.backward();
  Grads g{loss.detach(), x.grad(), {}};
  for (const TwiceUsed* blk : {&a, &b})
    for (const Tensor& p : blk->params()) g.p.push_back(p.grad());
  return g;
}

void expect_same(const Grads& plain, const Grads& ckpt) {
  EXPECT_TRUE(bit_equal(plain.loss, ckpt.loss));
  ASSERT_TRUE(ckpt.x.defined());
  EXPECT_TRUE(bit_equal(plain.x, ckpt.x)) << "x.grad";
  ASSERT_EQ(plain.p.size(), ckpt.p.size());
  for (size_t i = 0; i < plain.p.size(); ++i) {
    ASSERT_EQ(plain.p[i].defined(), ckpt.p[i].defined()) << "param " << i;
    if (plain.p[i].defined()) {
      EXPECT_TRUE(bit_equal(plain.p[i], ckpt.p[i])) << "param " << i;
    }
  }
}

// How many elements of two same-shape tensors differ in their bits (0 when equal).
int64_t differing(const Tensor& a, const Tensor& b) {
  Tensor x = a.to(DType::Float64), y = b.to(DType::Float64);
  auto u = x.to_vector<double>(), v = y.to_vector<double>();
  int64_t n = 0;
  for (size_t i = 0; i < u.size(); ++i) n += std::memcmp(&u[i], &v[i], sizeof(double)) != 0;
  return n;
}

class CheckpointIn : public ::testing::TestWithParam<Precision> {};

// The case: w used twice in a segment. Before the recompute opened a real autocast
// region, w was cast twice there and its two gradients met in FP32 (170 of 256 elements of
// w.grad differed under FP16).
TEST_P(CheckpointIn, AWeightUsedTwiceGetsThePlainGraphsGradientBitForBit) {
  RunOptions o{.precision = GetParam()};
  Grads plain = run(o);
  o.checkpointed = true;
  Grads ckpt = run(o);
  expect_same(plain, ckpt);
  EXPECT_EQ(differing(plain.p[0], ckpt.p[0]), 0) << "w.grad of the first segment";
}

// The case: a weight shared by two checkpointed segments. Under FP16 autocast the plain
// graph casts it once (the region's cache) and sums the gradients of all four uses in 16 bits
// before one cast back; a reentrant checkpoint cast it once per segment and summed the two
// segments' parts in FP32 (128 of 256 elements of w.grad one FP16 rounding off). Recomputing
// into the forward's graph (non-reentrant) gives the plain graph's bits.
TEST_P(CheckpointIn, AWeightSharedByTwoSegmentsGetsThePlainGraphsGradientBitForBit) {
  for (double p_drop : {0.0, 0.3}) {
    SCOPED_TRACE(p_drop > 0 ? "with dropout" : "without dropout");
    RunOptions o{.precision = GetParam(), .p_drop = p_drop, .shared = true};
    Grads plain = run(o);
    o.checkpointed = true;
    Grads ckpt = run(o);
    expect_same(plain, ckpt);
    EXPECT_EQ(differing(plain.p[0], ckpt.p[0]), 0) << "w.grad";
  }
}

// The reentrant mode stays exact where a segment's weights are its own, and is one rounding
// off for a shared weight (the behaviour, kept as documented): so the test above can fail.
TEST_P(CheckpointIn, TheReentrantModeIsExactOnlyForWeightsUsedInOneSegment) {
  RunOptions o{.precision = GetParam(), .reentrant = true};
  Grads plain = run(o);
  o.checkpointed = true;
  expect_same(plain, run(o));
  RunOptions shared{.precision = GetParam(), .shared = true, .reentrant = true};
  Grads shared_plain = run(shared);
  shared.checkpointed = true;
  EXPECT_GT(differing(shared_plain.p[0], run(shared).p[0]), 0);
}

// The segment's input a leaf that requires grad: the plain graph caches its cast too (one cast
// for both uses), so the recompute must see it as a leaf as well.
TEST_P(CheckpointIn, ALeafInputUsedTwiceGetsThePlainGraphsGradientBitForBit) {
  RunOptions o{.precision = GetParam(), .leaf_input = true};
  Grads plain = run(o);
  o.checkpointed = true;
  expect_same(plain, run(o));
}

// backward() inside the forward's region (torch.amp advises against it; it must still be
// exact, and the recompute must leave the open region's cache as it found it: a recomputed leaf
// input is a new tensor, whose cast would otherwise stay in the region's cache).
TEST_P(CheckpointIn, BackwardInsideTheRegionIsStillThePlainGraph) {
  for (bool leaf_input : {false, true}) {
    SCOPED_TRACE(leaf_input ? "leaf input" : "activation input");
    RunOptions o{.precision = GetParam(), .leaf_input = leaf_input, .backward_in_region = true};
    Grads plain = run(o);
    o.checkpointed = true;
    expect_same(plain, run(o));
    o.backward_in_region = false;
    expect_same(plain, run(o));  // and where backward runs changes nothing
  }
}

TEST_P(CheckpointIn, DropoutDrawsTheSameMaskWhenRecomputed) {
  RunOptions o{.precision = GetParam(), .p_drop = 0.3};
  Grads plain = run(o);
  o.checkpointed = true;
  expect_same(plain, run(o));
  // and the masks mattered: without dropout the gradients differ
  RunOptions no_drop{.precision = GetParam()};
  EXPECT_FALSE(bit_equal(plain.x, run(no_drop).x));
}

// ---- a ResNet, checkpointed per residual block: the main job's path ----

// Precision::Model16 here is --master-weights: a 16-bit model (BatchNorm stays FP32) under
// FP16 autocast. A downsampling block uses its input twice (conv1 and the 1x1 shortcut), so a
// recomputed input that turned into a cacheable leaf would show here.
TEST_P(CheckpointIn, AResNetCheckpointedPerBlockIsThePlainGraph) {
  struct Outcome {
    Tensor loss;
    StateDict grads, state;
  };
  auto step = [](Precision p, bool ckpt) {
    manual_seed(3);
    models::ResNet net(8, 10, 1);
    if (p == Precision::Model16) net.to(DType::Float16);
    net.checkpoint_activations = ckpt;
    Generator g(4);
    Tensor x = randn({4, 1, 12, 12}, {}, &g);
    Tensor y = tensor({1.0, 7.0, 3.0, 0.0}, DType::Int64);
    Tensor loss;
    {
      std::optional<amp::AutocastGuard> ac;
      std::optional<DType> d = p == Precision::Model16 ? std::optional<DType>(DType::Float16) : autocast_dtype(p);
      if (d) ac.emplace(DeviceType::CPU, *d);
      loss = cross_entropy(net.forward(x), y);
    }
    loss.backward();
    Outcome o{loss.detach(), {}, net.state_dict()};
    for (auto& [name, t] : net.named_parameters()) o.grads[name] = t.grad();
    return o;
  };
  Outcome plain = step(GetParam(), false), ckpt = step(GetParam(), true);
  EXPECT_TRUE(bit_equal(plain.loss, ckpt.loss));
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  for (auto& [name, g] : plain.grads) {
    ASSERT_TRUE(ckpt.grads.at(name).defined()) << name;
    EXPECT_TRUE(bit_equal(g, ckpt.grads.at(name))) << name;
  }
  for (auto& [name, t] : plain.state) EXPECT_TRUE(bit_equal(t, ckpt.state.at(name))) << name;
}

INSTANTIATE_TEST_SUITE_P(Precisions, CheckpointIn,
                         ::testing::Values(Precision::FP32, Precision::AutocastF16, Precision::AutocastBF16,
                                           Precision::Model16),
                         [](const ::testing::TestParamInfo<Precision>& i) { return precision_name(i.param); });

TEST(Checkpoint, TheAutocastCasesReallyRanIn16Bits) {
  // Guards the tests above against comparing two FP32 runs: each precision changes the result.
  Grads f32 = run({.precision = Precision::FP32});
  for (Precision p : {Precision::AutocastF16, Precision::AutocastBF16, Precision::Model16})
    EXPECT_FALSE(bit_equal(f32.loss, run({.precision = p}).loss.to(DType::Float32))) << precision_name(p);
}

TEST(Checkpoint, ParametersGetGradientsEvenWhenNoInputRequiresGrad) {
  auto grads = [](bool ckpt) {
    TwiceUsed a(DType::Float32);
    Tensor x = ones({2, 16});
    auto fn = [&](const Tensor& t) { return a.forward(t); };
    Tensor y = ckpt ? checkpoint(fn, x) : fn(x);
    EXPECT_TRUE(y.requires_grad());
    sum(y * y).backward();
    return a.params();
  };
  std::vector<Tensor> plain = grads(false), ckpt = grads(true);
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(ckpt[i].grad().defined()) << "param " << i;
    EXPECT_TRUE(bit_equal(plain[i].grad(), ckpt[i].grad())) << "param " << i;
  }
}

// ---- BatchNorm: batch statistics in the recompute, running statistics updated once ----

TEST(Checkpoint, BatchNormRunningStatisticsAreUpdatedOnceAndGradientsMatch) {
  struct Out {
    Tensor x_grad, w_grad, b_grad, mean, var;
    int64_t batches;
  };
  auto step = [](bool ckpt) {
    nn::BatchNorm2d bn(3);
    Generator g(5);
    Tensor x = randn({4, 3, 5, 5}, {}, &g).requires_grad_();
    auto fn = [&](const Tensor& t) { return relu(bn(t * 2.0)) * bn(t); };  // bn used twice
    Tensor y = ckpt ? checkpoint(fn, x) : fn(x);
    sum(y * y).backward();
    return Out{x.grad(), bn.weight.grad(), bn.bias.grad(), bn.running_mean.clone(), bn.running_var.clone(),
               bn.num_batches_tracked.item<int64_t>()};
  };
  Out plain = step(false), ckpt = step(true);
  EXPECT_TRUE(bit_equal(plain.x_grad, ckpt.x_grad));
  EXPECT_TRUE(bit_equal(plain.w_grad, ckpt.w_grad));
  EXPECT_TRUE(bit_equal(plain.b_grad, ckpt.b_grad));
  EXPECT_TRUE(bit_equal(plain.mean, ckpt.mean));
  EXPECT_TRUE(bit_equal(plain.var, ckpt.var));
  EXPECT_EQ(plain.batches, 2);
  EXPECT_EQ(ckpt.batches, 2);
}

// A conv and a BatchNorm shared by two checkpointed segments, with dropout: batch statistics in
// the recompute, the running statistics updated once per use in the forward (twice) and never
// in the recompute, dropout's masks redrawn alike, every gradient the plain graph's.
TEST(Checkpoint, AConvAndBatchNormSharedByTwoSegmentsWithDropoutAreThePlainGraph) {
  struct Out {
    Tensor loss;
    TensorList grads;
    Tensor mean, var;
    int64_t batches;
  };
  for (Precision p : {Precision::FP32, Precision::AutocastF16, Precision::AutocastBF16}) {
    SCOPED_TRACE(precision_name(p));
    auto step = [p](bool ckpt) {
      manual_seed(9);
      nn::Conv2d conv(3, 3, 3, {.padding = {1}});
      nn::BatchNorm2d bn(3);
      Generator g(6);
      Tensor x = randn({2, 3, 6, 6}, {}, &g).requires_grad_();
      Tensor gy = randn({2, 3, 6, 6}, {}, &g);
      auto segment = [&](const Tensor& t) { return dropout(relu(bn(conv(t))), 0.2, /*training=*/true); };
      Tensor loss;
      {
        std::optional<amp::AutocastGuard> ac;
        if (auto d = autocast_dtype(p)) ac.emplace(DeviceType::CPU, *d);
        Tensor h = x * 0.5;
        for (int i = 0; i < 2; ++i) h = ckpt ? checkpoint(segment, h) : segment(h);
        loss = sum(h.to(DType::Float32) * gy);
      }
      loss.backward();
      return Out{loss.detach(), {x.grad(), conv.weight.grad(), conv.bias.grad(), bn.weight.grad(), bn.bias.grad()},
                 bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.item<int64_t>()};
    };
    Out plain = step(false), ckpt = step(true);
    EXPECT_TRUE(bit_equal(plain.loss, ckpt.loss));
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      ASSERT_TRUE(ckpt.grads[i].defined()) << i;
      EXPECT_TRUE(bit_equal(plain.grads[i], ckpt.grads[i])) << "gradient " << i;
    }
    EXPECT_TRUE(bit_equal(plain.mean, ckpt.mean));
    EXPECT_TRUE(bit_equal(plain.var, ckpt.var));
    EXPECT_EQ(plain.batches, 2);
    EXPECT_EQ(ckpt.batches, 2);
  }
}

// ---- finite differences (float64): the segment's input an activation, its weight an input ----

TEST(Checkpoint, GradientsMatchFiniteDifferencesInFloat64) {
  for (bool reentrant : {false, true}) {
    SCOPED_TRACE(reentrant ? "reentrant" : "non-reentrant");
    Generator g(31);
    TensorOptions f64(DType::Float64);
    Tensor x = randn({3, 4}, f64, &g).requires_grad_();
    Tensor w = (randn({4, 4}, f64, &g) * 0.5).requires_grad_();
    Tensor b = randn({4}, f64, &g).requires_grad_();  // captured, not an input of the segment
    auto fn = [&](const TensorList& in) {
      Tensor x2 = in[0] * 1.5;  // a non-leaf segment input, w a leaf one
      return checkpoint(
          [&](const TensorList& s) {
            Tensor h = tanh(linear(s[0], s[1], b));
            return TensorList{linear(h, s[1]) * s[0]};
          },
          {x2, in[1]}, {.use_reentrant = reentrant});
    };
    auto r = autograd::gradcheck(fn, {x, w});
    EXPECT_TRUE(r.ok) << r.report;
  }
}

// Non-reentrant: a weight captured by two segments, the second segment nested in a third, and a
// tensor computed inside a segment used after it (its placeholders are recomputed too).
TEST(Checkpoint, SharedNestedAndEscapingTensorsMatchFiniteDifferencesInFloat64) {
  Generator g(32);
  TensorOptions f64(DType::Float64);
  Tensor x = randn({3, 4}, f64, &g).requires_grad_();
  Tensor w = (randn({4, 4}, f64, &g) * 0.5).requires_grad_();
  Tensor escaped;  // outlives backward: the first segment's recompute assigns it again
  auto fn = [&](const TensorList& in) {
    const Tensor& wt = in[1];
    Tensor h = checkpoint(
        [&](const Tensor& t) {
          escaped = sigmoid(t);
          return tanh(linear(t, wt)) * escaped;
        },
        in[0]);
    h = checkpoint(
        [&](const Tensor& t) { return checkpoint([&](const Tensor& u) { return tanh(linear(u, wt)); }, t * t) + t; },
        h);
    return TensorList{h * escaped};
  };
  auto r = autograd::gradcheck(fn, {x, w});
  EXPECT_TRUE(r.ok) << r.report;
}

// A checkpoint inside a checkpoint, under FP16 autocast with the shared weight: the plain
// graph's bits (the inner segment's input is a placeholder of the outer one).
TEST(Checkpoint, ANestedCheckpointIsThePlainGraph) {
  auto grads = [](bool ckpt) {
    TwiceUsed a(DType::Float32);
    Generator gx(3);
    Tensor x = randn({8, 16}, {}, &gx).requires_grad_();
    manual_seed(5);
    Tensor loss;
    // Outside the region's block: the recompute in backward calls them again.
    auto inner = [&](const Tensor& t) { return a.forward(t, 0.2); };
    auto outer = [&](const Tensor& t) {
      Tensor h = a.forward(t * 1.5);
      return (ckpt ? checkpoint(inner, h) : inner(h)) + h;
    };
    {
      amp::AutocastGuard ac(DeviceType::CPU, DType::Float16);
      Tensor h = ckpt ? checkpoint(outer, x) : outer(x);
      loss = sum(h.to(DType::Float32) * h.to(DType::Float32));
    }
    loss.backward();
    return TensorList{loss.detach(), x.grad(), a.w.grad(), a.b.grad(), a.v.grad()};
  };
  TensorList plain = grads(false), ckpt = grads(true);
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(ckpt[i].defined()) << i;
    EXPECT_TRUE(bit_equal(plain[i], ckpt[i])) << i;
  }
}

// ---- memory ----

TEST(Checkpoint, KeepsOnlyTheSegmentInputsAlive) {
  auto kept_bytes = [](bool use_checkpoint) {
    TwiceUsed blk(DType::Float32);
    Tensor x = ones({256, 16}).requires_grad_();
    const int64_t before = memory_stats().current_bytes;
    Tensor h = x;
    for (int i = 0; i < 6; ++i)
      h = use_checkpoint ? checkpoint([&](const Tensor& t) { return blk.forward(t); }, h) : blk.forward(h);
    const int64_t kept = memory_stats().current_bytes - before;
    sum(h).backward();
    return kept;
  };
  int64_t plain = kept_bytes(false), ckpt = kept_bytes(true);
  // plain keeps ~5 [256,16] activations per block; checkpointed one (the output) per block
  EXPECT_LT(static_cast<double>(ckpt), 0.35 * static_cast<double>(plain)) << ckpt << " vs " << plain;
}

// Inside one segment's forward only the working set is alive (an op's inputs and output), not
// the activations a recorded graph would hold: the peak over the input of an 8-layer segment is
// 3 activations (9 in the plain forward, and in the checkpointed one while it recorded with
// saving: the segment's graph was built whole and dropped only at its end).
TEST(Checkpoint, ThePeakInsideASegmentsForwardIsItsWorkingSetNotItsGraph) {
  Generator g(21);
  std::vector<Tensor> ws;
  for (int i = 0; i < 8; ++i) ws.push_back(param({128, 128}, 1.0 / std::sqrt(128.0), DType::Float32, g));
  auto segment = [&](const Tensor& x) {
    Tensor h = x;
    for (const Tensor& w : ws) h = relu(linear(h, w));
    return h;
  };
  auto forward_peak = [&](bool ckpt) {
    Generator gx(22);
    Tensor x = randn({256, 128}, {}, &gx).requires_grad_();
    const int64_t start = memory_stats().current_bytes;
    reset_peak_memory();
    Tensor y = ckpt ? checkpoint(segment, x) : segment(x);
    const int64_t peak = memory_stats().peak_bytes - start;
    sum(y).backward();
    return peak;
  };
  const int64_t activation = 256 * 128 * 4;
  int64_t plain = forward_peak(false), ckpt = forward_peak(true);
  RecordProperty("plain_forward_peak_bytes", std::to_string(plain));
  RecordProperty("checkpointed_forward_peak_bytes", std::to_string(ckpt));
  EXPECT_GE(plain, 8 * activation) << plain;
  EXPECT_LE(ckpt, 4 * activation) << ckpt << " vs plain " << plain;  // measured: 3
}

// A segment output dropped unused: the nodes of its branch go without running, and the
// recompute keeps none of their tensors (before: kept until the segment's last node went, 4
// activations more while the segment's backward ran).
TEST(Checkpoint, ABranchDroppedUnusedHoldsNoRecomputedTensors) {
  Generator g(23);
  Tensor w = param({128, 128}, 1.0 / std::sqrt(128.0), DType::Float32, g);
  Tensor v = param({128, 128}, 1.0 / std::sqrt(128.0), DType::Float32, g);
  Tensor x = randn({256, 128}, {}, &g).requires_grad_();
  // bytes held when the gradient reaches h: the recompute is done, the segment's backward not
  int64_t midway = -1;
  TensorList outs = checkpoint(
      [&](const TensorList& in) {
        Tensor h = tanh(linear(in[0], w));
        h.register_hook([&](const Tensor&) {
          midway = memory_stats().current_bytes;
          return Tensor();
        });
        Tensor a = tanh(linear(h, w));
        Tensor b = in[0];
        for (int i = 0; i < 4; ++i) b = tanh(linear(b, v));
        return TensorList{a, b};
      },
      {x});
  Tensor a = outs[0];
  outs.clear();  // the second output, and its branch of the graph, dropped
  Tensor loss = sum(a);
  const int64_t before = memory_stats().current_bytes;
  loss.backward();
  const int64_t activation = 256 * 128 * 4;
  ASSERT_GE(midway, 0);
  // held then: h recomputed, the gradients of h and a, w's
  EXPECT_LE(midway - before, 3 * activation) << midway - before;  // measured: 2.5 (before: 6.5)
}

// Each backward recomputes the segment once (PyTorch: once per graph task) and frees what it
// recomputed by its end, also with retain_graph: between backwards the segment holds only its
// inputs (before: every recomputed tensor stayed after a retain_graph backward, 8
// activations here, and the second backward reused them).
TEST(Checkpoint, EachBackwardRecomputesAndFreesItsTensorsEvenWithRetainGraph) {
  Generator g(24);
  std::vector<Tensor> ws;
  for (int i = 0; i < 8; ++i) ws.push_back(param({128, 128}, 1.0 / std::sqrt(128.0), DType::Float32, g));
  int calls = 0;
  auto segment = [&](const Tensor& x) {
    ++calls;
    Tensor h = x;
    for (const Tensor& w : ws) h = relu(linear(h, w));
    return h;
  };
  Tensor x = randn({256, 128}, {}, &g).requires_grad_();
  Tensor loss = sum(checkpoint(segment, x));
  const int64_t held = memory_stats().current_bytes;
  loss.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_EQ(calls, 2);
  int64_t grads = x.grad().numel() * 4;
  for (const Tensor& w : ws) grads += w.grad().numel() * 4;
  const int64_t activation = 256 * 128 * 4;
  EXPECT_LT(memory_stats().current_bytes - held - grads, activation) << memory_stats().current_bytes - held - grads;
  Tensor first = ws[0].grad().clone(), first_x = x.grad().clone();
  loss.backward();
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(bit_equal(ws[0].grad(), first * 2.0));
  EXPECT_TRUE(bit_equal(x.grad(), first_x * 2.0));
}

// The graph keeps a non-reentrant segment's function (its recompute needs it) and so what the
// function captures. A module captured by shared_ptr (as ResNet's blocks are) that keeps no
// tensor it computes closes no loop: forwards dropped without backward free everything. One
// that keeps a tensor it computes does close one (function -> module -> tensor -> graph ->
// function), broken by a backward through it or by resetting that tensor (checkpoint.h).
TEST(Checkpoint, AFunctionCapturingAModuleFreesItsGraphWithoutBackward) {
  struct Block {
    nn::Linear lin{64, 64};
    Tensor last;  // set only by the keeping variant
  };
  auto leftover = [](bool keeps_output, bool backward, bool reset) {
    const int64_t start = memory_stats().current_bytes;
    {
      auto block = std::make_shared<Block>();
      auto fn = [block, keeps_output](const Tensor& t) {
        Tensor y = tanh(block->lin.forward(t));
        if (keeps_output) block->last = y;
        return y;
      };
      for (int i = 0; i < 5; ++i) {
        Tensor loss = sum(checkpoint(fn, ones({128, 64})));
        if (backward) loss.backward();
      }
      if (reset) block->last = Tensor();
    }
    return memory_stats().current_bytes - start;
  };
  EXPECT_EQ(leftover(/*keeps_output=*/false, /*backward=*/false, /*reset=*/false), 0);
  EXPECT_EQ(leftover(false, true, false), 0);
  EXPECT_EQ(leftover(true, true, false), 0);
  EXPECT_EQ(leftover(true, false, /*reset=*/true), 0);
}

// ---- misuse ----

TEST(Checkpoint, AnInPlaceChangeToASavedInputIsAnError) {
  TwiceUsed blk(DType::Float32);
  Tensor x = ones({2, 16});  // saved by the checkpoint (the block's parameters require grad)
  Tensor y = checkpoint([&](const Tensor& t) { return blk.forward(t); }, x);
  mul_(x, 2.0);
  std::string e = error_of([&] { sum(y).backward(); });
  EXPECT_NE(e.find("checkpoint input 0"), std::string::npos) << e;
}

// A tensor written in place after an op saved it, inside the segment: the plain graph's error,
// naming the op, and not a gradient computed from the written value. The forward's tensor is
// dead by backward, so only the recompute's copy (written the same way) can show it (before:
// no error, w.grad 7 instead of 6). A parameter written between forward and backward, too.
TEST(Checkpoint, AnInPlaceWriteAfterSavingIsThePlainGraphsError) {
  auto written_after_save = [](bool ckpt) {
    Tensor w = ones({4}).requires_grad_();
    auto fn = [&](const Tensor& t) {
      Tensor m = t * 2.0;
      Tensor c = m * w;  // saves m
      m.add_(ones({4}));
      return c;
    };
    Tensor x = full({4}, 3.0);
    Tensor y = ckpt ? checkpoint(fn, x) : fn(x);
    return error_of([&] { sum(y).backward(); });
  };
  auto param_written = [](bool ckpt) {
    Tensor w = ones({4}).requires_grad_();
    auto fn = [&](const Tensor& t) { return tanh(t * w); };  // mul saves w (for x's gradient)
    Tensor x = full({4}, 0.5).requires_grad_();
    Tensor y = ckpt ? checkpoint(fn, x) : fn(x);
    {
      NoGradGuard ng;
      w.mul_(Scalar(0.5));
    }
    return error_of([&] { sum(y).backward(); });
  };
  for (auto* scenario : {+written_after_save, +param_written}) {
    std::string plain = scenario(false), ckpt = scenario(true);
    const size_t at = plain.find("modified by an in-place operation: input ");
    ASSERT_NE(at, std::string::npos) << plain;
    const std::string named = plain.substr(at, plain.find(" (", at) - at);  // "...: input 0 of mul"
    EXPECT_NE(ckpt.find(named), std::string::npos) << "plain: " << plain << "\ncheckpointed: " << ckpt;
  }
}

// A tensor computed inside a segment and kept outside it: non-reentrant, it is part of the
// forward's graph like any other and gets the plain graph's gradient; reentrant, its graph saved
// nothing and backward through it is an error that says so.
TEST(Checkpoint, ATensorLeakedFromASegmentIsDifferentiableUnlessReentrant) {
  auto run_leaked = [](std::optional<bool> reentrant) {
    TwiceUsed blk(DType::Float32);
    Tensor leaked;
    auto fn = [&](const Tensor& t) {
      leaked = relu(linear(t, blk.w));  // kept outside the segment
      return blk.forward(t);
    };
    Tensor x = ones({2, 16});
    Tensor y = reentrant ? checkpoint(fn, x, {.use_reentrant = *reentrant}) : fn(x);
    std::string e = error_of([&] { sum(leaked * leaked + y).backward(); });
    return std::make_pair(e, blk.w.grad());
  };
  auto [plain_err, plain_grad] = run_leaked(std::nullopt);
  auto [err, grad] = run_leaked(false);
  EXPECT_EQ(err, "(no error)");
  ASSERT_TRUE(grad.defined());
  EXPECT_TRUE(bit_equal(plain_grad, grad));
  auto [reentrant_err, unused] = run_leaked(true);
  EXPECT_NE(reentrant_err.find("reentrant"), std::string::npos) << reentrant_err;
}

TEST(Checkpoint, BackwardTwiceNeedsRetainGraph) {
  for (bool reentrant : {false, true}) {
    TwiceUsed blk(DType::Float32);
    Tensor y = checkpoint([&](const Tensor& t) { return blk.forward(t); }, ones({2, 16}), {.use_reentrant = reentrant});
    Tensor loss = sum(y);
    loss.backward();
    std::string e = error_of([&] { loss.backward(); });
    EXPECT_NE(e.find("second time"), std::string::npos) << e;
  }
}

// With retain_graph the recomputed tensors stay, and a second backward adds the same gradients
// (as in the plain graph); a parameter changed in place in between is an error, as in the plain
// graph, and not a gradient computed from its new value.
TEST(Checkpoint, RetainGraphBackwardsTwiceAndSeesAParameterChangedInBetween) {
  auto twice = [](bool ckpt) {
    TwiceUsed blk(DType::Float32);
    Generator gx(8);
    Tensor x = randn({4, 16}, {}, &gx).requires_grad_();
    auto fn = [&](const Tensor& t) { return blk.forward(t, 0.25); };
    manual_seed(1);
    Tensor y = ckpt ? checkpoint(fn, x * 2.0) : fn(x * 2.0);
    Tensor loss = sum(y * y);
    loss.backward(Tensor(), /*retain_graph=*/true);
    Tensor once = blk.w.grad().clone();
    loss.backward();
    EXPECT_TRUE(bit_equal(blk.w.grad(), once * 2.0));
    return TensorList{blk.w.grad(), x.grad()};
  };
  TensorList plain = twice(false), ckpt = twice(true);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(bit_equal(plain[i], ckpt[i])) << i;

  for (bool ckpt : {false, true}) {
    TwiceUsed blk(DType::Float32);
    Tensor x = ones({4, 16}).requires_grad_();
    auto fn = [&](const Tensor& t) { return blk.forward(t); };
    Tensor y = ckpt ? checkpoint(fn, x * 2.0) : fn(x * 2.0);
    Tensor loss = sum(y * y);
    loss.backward(Tensor(), /*retain_graph=*/true);
    {
      NoGradGuard ng;
      blk.w.mul_(Scalar(0.5));  // an optimizer step
    }
    std::string e = error_of([&] { loss.backward(); });
    EXPECT_NE(e.find("modified by an in-place operation"), std::string::npos) << (ckpt ? "checkpointed: " : "plain: ") << e;
  }
}

TEST(Checkpoint, CreateGraphThroughACheckpointIsAClearError) {
  TwiceUsed blk(DType::Float32);
  Tensor x = ones({2, 16}).requires_grad_();
  Tensor y = checkpoint([&](const Tensor& t) { return blk.forward(t); }, x);
  std::string e = error_of([&] { sum(y * y).backward(Tensor(), false, /*create_graph=*/true); });
  EXPECT_NE(e.find("create_graph"), std::string::npos) << e;
}

// A segment that does something else when recomputed: a clear error naming what differs, not
// gradients computed from the wrong tensors.
TEST(Checkpoint, ARecomputeThatSavesOtherTensorsIsAnError) {
  TwiceUsed blk(DType::Float32);
  Tensor x = ones({2, 16}).requires_grad_();
  int calls = 0;
  // The rerun applies one more op (one more saved tensor).
  Tensor y = checkpoint([&](const Tensor& t) { return ++calls == 1 ? tanh(linear(t, blk.w)) : tanh(tanh(linear(t, blk.w))); }, x);
  std::string e = error_of([&] { sum(y).backward(); });
  EXPECT_NE(e.find("recompute saved 4 tensors for backward, its forward saved 3"), std::string::npos) << e;
  EXPECT_NE(e.find("deterministic"), std::string::npos) << e;
  // The rerun saves as many tensors, one of another shape.
  calls = 0;
  Tensor z = checkpoint(
      [&](const Tensor& t) { return ++calls == 1 ? sum(t * t) : sum(t.narrow(1, 0, 8) * t.narrow(1, 0, 8)); }, x * 1.0);
  e = error_of([&] { z.backward(); });
  EXPECT_NE(e.find("saved tensor 0 of the segment is f32[2, 8]"), std::string::npos) << e;
  EXPECT_NE(e.find("f32[2, 16] on cpu in the forward"), std::string::npos) << e;
}

// A recompute that throws (inside the segment's function, in its autocast region, at a dropout's
// RNG position) leaves the thread as backward found it: no recompute scope, grad mode, autocast
// off, the default generator where it was, saved tensors kept by the next graph; and the
// segment recomputes again in the next backward, also after a backward that failed later on.
TEST(Checkpoint, ARecomputeThatThrowsLeavesTheThreadAsItWas) {
  Tensor w = ones({4}).requires_grad_();
  Tensor x = full({4}, 0.5).requires_grad_();
  int calls = 0;
  auto fn = [&](const Tensor& t) {
    Tensor h = tanh(t * w);
    MT_CHECK(++calls != 2, "the segment failed in its recompute");
    return dropout(h, 0.5, /*training=*/true);
  };
  manual_seed(3);
  Tensor y;
  {
    amp::AutocastGuard ac(DeviceType::CPU, DType::BFloat16);
    y = checkpoint(fn, x);
  }
  manual_seed(9);
  const uint64_t offset = default_generator().offset();
  std::string e = error_of([&] { sum(y).backward(Tensor(), /*retain_graph=*/true); });
  EXPECT_NE(e.find("the segment failed in its recompute"), std::string::npos) << e;
  EXPECT_FALSE(autograd::in_checkpoint_recompute());
  EXPECT_TRUE(autograd::GradMode::is_enabled());
  EXPECT_FALSE(autocast_state().any_enabled());
  EXPECT_EQ(default_generator().seed(), 9u);
  EXPECT_EQ(default_generator().offset(), offset);
  Tensor z = x * x;  // saved as usual: no hooks left installed
  sum(z).backward();
  EXPECT_TRUE(bit_equal(x.grad(), x.detach() * 2.0));
  x.set_grad(Tensor());
  // A backward that fails after the recompute (in a hook on an input of the segment's mul): the
  // recomputed tensors go with it, and the next backward recomputes.
  bool fail = true;
  w.register_hook([&](const Tensor& g) {
    MT_CHECK(!fail, "a hook failed");
    return g;
  });
  e = error_of([&] { sum(y).backward(Tensor(), /*retain_graph=*/true); });
  EXPECT_NE(e.find("a hook failed"), std::string::npos) << e;
  EXPECT_EQ(calls, 3);
  fail = false;
  EXPECT_EQ(error_of([&] { sum(y).backward(); }), "(no error)");
  EXPECT_EQ(calls, 4);
  EXPECT_TRUE(x.grad().defined());
}

TEST(Checkpoint, UnderNoGradItIsAPlainCall) {
  TwiceUsed blk(DType::Float32);
  NoGradGuard ng;
  Tensor y = checkpoint([&](const Tensor& t) { return blk.forward(t); }, ones({2, 16}));
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

}  // namespace
}  // namespace mixtape::testing
