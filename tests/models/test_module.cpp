// tests/models/test_module.cpp — nn::Module and the layers: registration and naming, state_dict
// round trips (bit-exact), strict-load errors, dtype conversion with keep_batchnorm_fp32,
// train/eval behaviour of BatchNorm and Dropout, default initialisation statistics, printing,
// summary, hooks, Sequential, and gradient flow to every parameter.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include <mixtape/mixtape.h>

#include "models/nn.h"
#include "common/bit_equal.h"
#include "models/test_util.h"

namespace mixtape {
namespace {

using test::error_of;
using test::temp_path;

using testing::bit_equal;

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (auto& [n, t] : v) out.push_back(n);
  return out;
}

// ---- a small hand-written model: the naming rules ----

struct Block : nn::Module {
  Block() {
    scale = register_parameter("scale", ones({4}));
    fc = register_module("fc", std::make_shared<nn::Linear>(3, 4));
    count = register_buffer("count", zeros({}, DType::Int64));
  }
  Tensor forward(const Tensor& x) override { return (*fc)(x) * scale; }
  Tensor scale, count;
  std::shared_ptr<nn::Linear> fc;
};

struct Net : nn::Module {
  Net() {
    head = register_parameter("head", zeros({2}));
    a = register_module("a", std::make_shared<Block>());
    b = register_module("b", std::make_shared<Block>());
  }
  Tensor head;
  std::shared_ptr<Block> a, b;
};

TEST(Module, RegistrationAndNaming) {
  Net net;
  EXPECT_EQ(net.type_name(), "Net");
  EXPECT_EQ(net.a->type_name(), "Block");
  EXPECT_EQ(names_of(net.named_parameters()),
            (std::vector<std::string>{"head", "a.scale", "a.fc.weight", "a.fc.bias", "b.scale", "b.fc.weight",
                                      "b.fc.bias"}));
  EXPECT_EQ(names_of(net.named_parameters(false)), (std::vector<std::string>{"head"}));
  EXPECT_EQ(names_of(net.named_buffers()), (std::vector<std::string>{"a.count", "b.count"}));
  EXPECT_EQ(net.parameters().size(), 7u);
  EXPECT_EQ(net.buffers().size(), 2u);
  EXPECT_EQ(net.children().size(), 2u);
  EXPECT_EQ(net.named_children()[1].first, "b");
  std::vector<std::string> mods;
  for (auto& [n, m] : net.named_modules()) mods.push_back(n);
  EXPECT_EQ(mods, (std::vector<std::string>{"", "a", "a.fc", "b", "b.fc"}));
  StateDict sd = net.state_dict();
  EXPECT_EQ(sd.size(), 9u);
  EXPECT_TRUE(sd.count("a.fc.weight") && sd.count("b.count") && sd.count("head"));
  EXPECT_EQ(sd.at("a.fc.weight").sizes(), (IntList{4, 3}));
  // The registry, the member and state_dict share the tensor.
  EXPECT_TRUE(net.parameters()[2].is_same(net.a->fc->weight));
  EXPECT_EQ(sd.at("a.fc.weight").data_ptr(), net.a->fc->weight.data_ptr());
  for (auto& p : net.parameters()) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
  }
  EXPECT_FALSE(net.a->count.requires_grad());
  EXPECT_EQ(nn::num_parameters(net), 2 + 2 * (4 + 12 + 4));
}

TEST(Module, RegistrationErrors) {
  Net net;
  EXPECT_NE(error_of([&] { net.register_parameter("head", zeros({1})); }).find("already taken"), std::string::npos);
  EXPECT_NE(error_of([&] { net.register_buffer("a", zeros({1})); }).find("already taken"), std::string::npos);
  EXPECT_NE(error_of([&] { net.register_parameter("x.y", zeros({1})); }).find("must not contain '.'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { net.register_module("", std::make_shared<nn::ReLU>()); }).find("must not be empty"),
            std::string::npos);
  EXPECT_NE(error_of([&] { net.register_parameter("i", zeros({1}, DType::Int64)); }).find("only floating"),
            std::string::npos);
  nn::Module bare;
  EXPECT_NE(error_of([&] { bare(zeros({1})); }).find("forward(const Tensor&) is not implemented"), std::string::npos);
}

TEST(Module, SharedSubmodulesAndParametersAppearOnce) {
  struct Tied : nn::Module {
    Tied() {
      auto fc = std::make_shared<nn::Linear>(2, 2);
      first = register_module("first", fc);
      second = register_module("second", fc);
    }
    std::shared_ptr<nn::Linear> first, second;
  } tied;
  EXPECT_EQ(tied.parameters().size(), 2u);
  EXPECT_EQ(tied.named_modules().size(), 2u);  // self, first
  EXPECT_EQ(tied.state_dict().size(), 4u);     // both names, like PyTorch
}

TEST(Module, HooksSeeEveryCall) {
  nn::Linear fc(3, 2);
  std::vector<IntList> seen;
  int id = fc.register_forward_hook([&](nn::Module& m, const Tensor& in, const Tensor& out) {
    EXPECT_EQ(&m, &fc);
    seen.push_back(out.sizes());
    EXPECT_EQ(in.sizes(), (IntList{5, 3}));
  });
  fc(zeros({5, 3}));
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (IntList{5, 2}));
  fc.remove_forward_hook(id);
  fc(zeros({5, 3}));
  EXPECT_EQ(seen.size(), 1u);
}

// ---- state_dict, save and load ----

TEST(Module, SaveLoadRoundTripIsBitExact) {
  manual_seed(1);
  auto a = std::make_shared<models::SmallCNN>(10);
  manual_seed(2);
  auto b = std::make_shared<models::SmallCNN>(10);
  Tensor x = randn({3, 1, 28, 28});
  Tensor ya = (*a)(x), yb = (*b)(x);
  EXPECT_FALSE(bit_equal(ya, yb));
  std::string path = temp_path("smallcnn.safetensors");
  a->save(path);
  auto result = b->load(path);
  EXPECT_TRUE(result.missing_keys.empty() && result.unexpected_keys.empty());
  EXPECT_TRUE(bit_equal((*b)(x), ya));
  for (auto& [name, t] : a->state_dict()) EXPECT_TRUE(bit_equal(b->state_dict().at(name), t)) << name;
}

TEST(Module, SaveLoadKeepsBatchNormStatistics) {
  manual_seed(3);
  models::ResNet a(8, 10, 3);
  a.train();
  (void)a(randn({4, 3, 16, 16}));  // running statistics move away from (0, 1)
  a.eval();
  manual_seed(4);
  models::ResNet b(8, 10, 3);
  b.eval();
  std::string path = temp_path("resnet8.safetensors");
  a.save(path);
  b.load(path);
  EXPECT_EQ(b.bn1->num_batches_tracked.item<int64_t>(), 1);
  EXPECT_TRUE(bit_equal(b.bn1->running_mean, a.bn1->running_mean));
  Tensor x = randn({2, 3, 16, 16});
  EXPECT_TRUE(bit_equal(b(x), a(x)));
  // The file is a plain safetensors file with PyTorch's names.
  SafetensorsMetadata md;
  StateDict file = load_safetensors(path, &md);
  EXPECT_EQ(md.at("format"), "pt");
  EXPECT_EQ(file.at("layer2.0.downsample.1.num_batches_tracked").dtype(), DType::Int64);
  EXPECT_EQ(file.at("layer2.0.downsample.1.num_batches_tracked").dim(), 0);
}

TEST(Module, StrictLoadListsEveryProblemAndWritesNothing) {
  manual_seed(5);
  models::SmallCNN model(10);
  StateDict sd;
  for (auto& [n, t] : model.state_dict()) sd[n] = zeros_like(t);  // different values
  sd.erase("fc2.bias");
  sd.erase("conv1.bias");
  sd["fc3.weight"] = zeros({10, 128});
  sd["fc1.weight"] = zeros({64, 3136});
  Tensor before = model.conv1->weight.clone();
  std::string e = error_of([&] { model.load_state_dict(sd); });
  EXPECT_NE(e.find("error(s) in loading state_dict for SmallCNN"), std::string::npos) << e;
  EXPECT_NE(e.find("Missing key(s): \"conv1.bias\", \"fc2.bias\""), std::string::npos) << e;
  EXPECT_NE(e.find("Unexpected key(s): \"fc3.weight\""), std::string::npos) << e;
  EXPECT_NE(e.find("size mismatch for fc1.weight: copying a param with shape [64, 3136] from checkpoint, the shape "
                   "in current model is [128, 3136]"),
            std::string::npos)
      << e;
  EXPECT_TRUE(bit_equal(model.conv1->weight, before)) << "a failed load must not write anything";

  // Non-strict: the size mismatch is still an error.
  EXPECT_NE(error_of([&] { model.load_state_dict(sd, false); }).find("size mismatch"), std::string::npos);
  sd.erase("fc1.weight");
  auto r = model.load_state_dict(sd, false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"conv1.bias", "fc1.weight", "fc2.bias"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"fc3.weight"}));
  EXPECT_EQ(model.conv1->weight.abs().sum().item<double>(), 0.0);  // loaded
  EXPECT_NE(model.conv1->bias.abs().sum().item<double>(), 0.0);    // missing: untouched

  // Floating and integer values do not mix.
  models::ResNet res(8);
  StateDict bad = res.state_dict();
  bad["bn1.num_batches_tracked"] = zeros({}, DType::Float32);
  EXPECT_NE(error_of([&] { res.load_state_dict(bad); }).find("dtype mismatch for bn1.num_batches_tracked"),
            std::string::npos);
}

TEST(Module, LoadConvertsDtypeInPlace) {
  nn::Linear fc(2, 3);
  Tensor w_handle = fc.weight;
  StateDict sd{{"weight", tensor({{0.1, 0.2}, {0.3, 0.4}, {0.5, 0.6}}, DType::Float64)},
               {"bias", tensor({1.0, 2.0, 3.0}, DType::Float64)}};
  fc.load_state_dict(sd);
  EXPECT_EQ(fc.weight.dtype(), DType::Float32);
  EXPECT_TRUE(fc.weight.is_same(w_handle));
  EXPECT_TRUE(fc.weight.requires_grad());
  EXPECT_EQ(fc.weight.to_vector<float>()[1], 0.2f);
  EXPECT_EQ(fc.bias.to_vector<double>(), (std::vector<double>{1, 2, 3}));
}

// ---- dtype conversion ----

TEST(Module, ToFloat16KeepsBatchNormInFloat32) {
  models::ResNet model(8, 10, 3);
  Tensor conv_w = model.conv1->weight;  // a handle taken before the conversion
  model.to(DType::Float16);
  EXPECT_EQ(conv_w.dtype(), DType::Float16) << "handles see the conversion";
  for (auto& [name, p] : model.named_parameters()) {
    bool bn = name.find("bn") != std::string::npos || name.find("downsample.1") != std::string::npos;
    EXPECT_EQ(p.dtype(), bn ? DType::Float32 : DType::Float16) << name;
    EXPECT_TRUE(p.is_leaf() && p.requires_grad()) << name;
  }
  for (auto& [name, b] : model.named_buffers())
    EXPECT_EQ(b.dtype(), name.ends_with("num_batches_tracked") ? DType::Int64 : DType::Float32) << name;
  Tensor y = model(randn({2, 3, 16, 16}).to(DType::Float16));
  EXPECT_EQ(y.dtype(), DType::Float16);
  EXPECT_EQ(y.sizes(), (IntList{2, 10}));

  models::ResNet all16(8);
  all16.to(DType::BFloat16, /*keep_batchnorm_fp32=*/false);
  for (auto& [name, p] : all16.named_parameters()) EXPECT_EQ(p.dtype(), DType::BFloat16) << name;
  EXPECT_EQ(all16.bn1->running_var.dtype(), DType::BFloat16);

  models::ResNet f64(8);
  f64.to(DType::Float64);  // not a 16-bit type: BatchNorm converts too
  EXPECT_EQ(f64.bn1->weight.dtype(), DType::Float64);
  EXPECT_NE(error_of([&] { f64.to(DType::Int32); }).find("expected a floating dtype"), std::string::npos);
}

TEST(Module, ToConvertsGradientsAndRoundTrips) {
  manual_seed(6);
  nn::Linear fc(4, 2);
  Tensor w32 = fc.weight.clone();
  fc(randn({3, 4})).sum().backward();
  ASSERT_TRUE(fc.weight.grad().defined());
  fc.to(DType::Float64);
  EXPECT_EQ(fc.weight.grad().dtype(), DType::Float64);
  fc.to(DType::Float32);
  EXPECT_TRUE(bit_equal(fc.weight, w32)) << "f32 -> f64 -> f32 is exact";
  Tensor w_handle = fc.weight;
  fc.to(Device::CPU());  // already there: nothing changes
  EXPECT_TRUE(fc.weight.is_same(w_handle));
  EXPECT_TRUE(bit_equal(fc.weight, w32));
  fc.zero_grad(false);
  EXPECT_EQ(fc.weight.grad().abs().sum().item<double>(), 0.0);
  fc.zero_grad();
  EXPECT_FALSE(fc.weight.grad().defined());
}

// ---- train / eval ----

TEST(Module, BatchNormTrainUsesBatchStatisticsAndUpdatesRunningStats) {
  nn::BatchNorm2d bn(3);
  manual_seed(7);
  Tensor x = randn({4, 3, 5, 5}) * 2.0 + 1.0;
  Tensor y = bn(x);  // training by default
  auto mean_c = y.mean({0, 2, 3}).to_vector<double>();
  for (double m : mean_c) EXPECT_NEAR(m, 0.0, 1e-5);
  Tensor batch_mean = x.mean({0, 2, 3});
  auto rm = bn.running_mean.to_vector<double>();
  auto bm = batch_mean.to_vector<double>();
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(rm[c], 0.1 * bm[c], 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);

  bn.eval();
  EXPECT_FALSE(bn.is_training());
  Tensor rm_before = bn.running_mean.clone();
  Tensor ye = bn(x);
  EXPECT_TRUE(bit_equal(bn.running_mean, rm_before)) << "eval does not update";
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  // eval normalises with the running statistics.
  auto rv = bn.running_var.to_vector<double>();
  auto xv = x.to_vector<double>(), yv = ye.to_vector<double>();
  for (int i = 0; i < 25 * 3 * 4; i += 7) {
    int c = (i / 25) % 3;
    EXPECT_NEAR(yv[i], (xv[i] - rm[c]) / std::sqrt(rv[c] + 1e-5), 1e-5);
  }

  nn::BatchNorm2d cumulative(3, {.momentum = std::nullopt});
  cumulative(x);
  cumulative(x * 3.0);
  auto cm = cumulative.running_mean.to_vector<double>();
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(cm[c], (bm[c] + 3 * bm[c]) / 2, 1e-5) << "momentum=None averages";

  nn::BatchNorm2d no_stats(3, {.affine = false, .track_running_stats = false});
  EXPECT_TRUE(no_stats.parameters().empty());
  EXPECT_TRUE(no_stats.buffers().empty());
  no_stats.eval();
  for (double m : no_stats(x).mean({0, 2, 3}).to_vector<double>()) EXPECT_NEAR(m, 0.0, 1e-5);
  EXPECT_NE(error_of([&] { bn(zeros({2, 3})); }).find("4-D"), std::string::npos);
}

// The batch counter is counted by batch_norm itself (in the kernel that updates the running
// statistics: no launch of its own on a GPU), once per training forward, from whatever it holds.
TEST(Module, BatchNormCountsTrainingBatchesInTheOp) {
  nn::BatchNorm2d bn(3);
  manual_seed(3);
  const Tensor x = randn({2, 3, 4, 4});
  const uint32_t v0 = bn.num_batches_tracked.version();
  bn(x);
  bn(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  EXPECT_EQ(bn.num_batches_tracked.version(), v0 + 2) << "an in-place write bumps the version";
  fill_(bn.num_batches_tracked, 41);  // e.g. a loaded checkpoint's count
  bn(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 42);
  bn.eval();
  bn(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 42) << "eval does not count";
  // momentum=None reads the count before the call (factor 1 / count), and counts once.
  nn::BatchNorm2d cumulative(3, {.momentum = std::nullopt});
  cumulative(x);
  cumulative(x);
  EXPECT_EQ(cumulative.num_batches_tracked.item<int64_t>(), 2);
  // The op's argument: a one-element i64 tensor.
  const Tensor c3 = ones({3});
  EXPECT_NE(error_of([&] { batch_norm(x, c3, c3, c3, c3, true, 0.1, 1e-5, zeros({})); })
                .find("batch_norm: num_batches_tracked must be an i64 tensor of one element, got f32[]"),
            std::string::npos);
  Tensor counter = zeros({}, DType::Int64);
  batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5, counter);
  batch_norm(x, c3.clone(), c3.clone(), Tensor(), Tensor(), false, 0.1, 1e-5, counter);
  EXPECT_EQ(counter.item<int64_t>(), 1) << "training calls count, eval calls do not";
}

TEST(Module, DropoutDependsOnMode) {
  auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 8), std::make_shared<nn::Dropout>(0.25));
  auto drop = seq->at<nn::Dropout>(1);
  manual_seed(8);
  Tensor x = ones({100, 100});
  Tensor y = (*drop)(x);
  auto v = y.to_vector<double>();
  int zeros_count = 0;
  for (double e : v) {
    if (e == 0) ++zeros_count;
    else {
      EXPECT_NEAR(e, 1.0 / 0.75, 1e-6);
    }
  }
  EXPECT_NEAR(zeros_count / 10000.0, 0.25, 0.03);  // 7 sigma of a binomial(10000, 0.25)
  seq->eval();
  EXPECT_FALSE(drop->is_training()) << "eval() reaches every descendant";
  EXPECT_TRUE(bit_equal((*drop)(x), x));
  seq->train();
  EXPECT_TRUE(drop->is_training());
  EXPECT_NE(error_of([] { nn::Dropout(1.5); }).find("between 0 and 1"), std::string::npos);
}

// ---- default initialisation ----

// Samples of U(-b, b): all inside, mean ~ 0, variance ~ b^2 / 3 (checked to 5 standard errors).
void expect_uniform(const Tensor& t, double bound, const std::string& what) {
  auto v = t.to_vector<double>();
  double n = static_cast<double>(v.size()), sum = 0, sq = 0, mx = 0;
  for (double e : v) {
    sum += e;
    sq += e * e;
    mx = std::max(mx, std::abs(e));
  }
  EXPECT_LE(mx, bound * (1 + 1e-6)) << what;
  EXPECT_GT(mx, bound * 0.9) << what;
  double var = bound * bound / 3;
  EXPECT_NEAR(sum / n, 0.0, 5 * std::sqrt(var / n)) << what;
  // Var of x^2 for U(-b, b) is 4 b^4 / 45.
  EXPECT_NEAR(sq / n, var, 5 * std::sqrt(4 * std::pow(bound, 4) / 45 / n)) << what;
}

TEST(Init, LinearAndConvDefaultsMatchPyTorch) {
  manual_seed(9);
  nn::Linear fc(400, 300);
  expect_uniform(fc.weight, 1.0 / 20, "Linear weight");
  expect_uniform(fc.bias, 1.0 / 20, "Linear bias");
  nn::Conv2d conv(16, 64, 3);
  expect_uniform(conv.weight, 1.0 / 12, "Conv2d weight");  // fan_in = 16 * 3 * 3
  expect_uniform(conv.bias, 1.0 / 12, "Conv2d bias");
  nn::Conv2d grouped(16, 256, {3, 1}, {.groups = 4});
  EXPECT_EQ(grouped.weight.sizes(), (IntList{256, 4, 3, 1}));
  expect_uniform(grouped.weight, 1.0 / std::sqrt(12.0), "grouped Conv2d weight");  // fan_in = 4 * 3
  nn::BatchNorm2d bn(5);
  EXPECT_EQ(bn.weight.to_vector<double>(), std::vector<double>(5, 1.0));
  EXPECT_EQ(bn.bias.to_vector<double>(), std::vector<double>(5, 0.0));
  EXPECT_EQ(bn.running_var.to_vector<double>(), std::vector<double>(5, 1.0));
  nn::LayerNorm ln({4, 5});
  EXPECT_EQ(ln.weight.sizes(), (IntList{4, 5}));
  EXPECT_EQ(ln.bias.to_vector<double>(), std::vector<double>(20, 0.0));
}

TEST(Init, SeededAndDeterministic) {
  manual_seed(10);
  nn::Linear a(5, 5);
  manual_seed(10);
  nn::Linear b(5, 5);
  EXPECT_TRUE(bit_equal(a.weight, b.weight));
  Generator g1(42), g2(42);
  nn::Linear c(5, 5, true, &g1), d(5, 5, true, &g2);
  EXPECT_TRUE(bit_equal(c.weight, d.weight));
  EXPECT_TRUE(bit_equal(c.bias, d.bias));
  EXPECT_FALSE(bit_equal(a.weight, c.weight));
}

TEST(Init, Functions) {
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  Tensor w = empty({64, 32, 3, 3});
  auto [fi, fo] = nn::init::calculate_fan_in_and_fan_out(w);
  EXPECT_EQ(fi, 288);
  EXPECT_EQ(fo, 576);
  manual_seed(11);
  nn::init::xavier_uniform_(w);
  expect_uniform(w, std::sqrt(6.0 / (288 + 576)), "xavier_uniform_");
  nn::init::kaiming_uniform_(w, 0.0, "fan_out", "relu");
  expect_uniform(w, std::sqrt(2.0) * std::sqrt(3.0 / 576), "kaiming_uniform_ fan_out");
  Tensor n = empty({256, 512});
  nn::init::kaiming_normal_(n, 0.0, "fan_in", "relu");
  auto v = n.to_vector<double>();
  double sq = 0;
  for (double e : v) sq += e * e;
  double want = 2.0 / 512;  // std = sqrt(2 / fan_in); var estimate has relative sd sqrt(2 / n)
  EXPECT_NEAR(sq / static_cast<double>(v.size()), want, 5 * want * std::sqrt(2.0 / static_cast<double>(v.size())));
  nn::init::constant_(n, 0.5);
  EXPECT_EQ(n.to_vector<double>()[7], 0.5);
  Tensor h = empty({8, 8}, DType::Float16);
  nn::init::uniform_(h, -1, 1);
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_NE(error_of([&] { nn::init::kaiming_normal_(n, 0, "fan_sideways"); }).find("fan_in"), std::string::npos);
  EXPECT_NE(error_of([] { nn::init::calculate_fan_in_and_fan_out(zeros({3})); }).find("at least 2 dims"),
            std::string::npos);
}

// ---- Sequential ----

TEST(Sequential, ChainsIndexesAndNames) {
  manual_seed(12);
  nn::Sequential seq;
  auto fc1 = seq.push_back(std::make_shared<nn::Linear>(4, 8));
  seq.push_back(std::make_shared<nn::GELU>());
  auto fc2 = seq.push_back(std::make_shared<nn::Linear>(8, 2));
  seq.push_back(std::make_shared<nn::LeakyReLU>(0.2));
  EXPECT_EQ(seq.size(), 4u);
  EXPECT_EQ(names_of(seq.named_parameters()), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(seq.at<nn::Linear>(2), fc2);
  EXPECT_EQ(seq[0], fc1);
  EXPECT_NE(error_of([&] { seq.at<nn::ReLU>(0); }).find("is a Linear"), std::string::npos);
  EXPECT_NE(error_of([&] { seq[9]; }).find("out of range"), std::string::npos);
  Tensor x = randn({5, 4});
  Tensor want = leaky_relu(linear(gelu(linear(x, fc1->weight, fc1->bias)), fc2->weight, fc2->bias), 0.2);
  EXPECT_TRUE(bit_equal(seq(x), want));
  int n = 0;
  for (auto& m : seq) n += m != nullptr;
  EXPECT_EQ(n, 4);
}

// ---- printing ----

TEST(Module, PrintsLikePyTorch) {
  models::SmallCNN model(10);
  std::ostringstream os;
  os << model;
  EXPECT_EQ(os.str(),
            "SmallCNN(\n"
            "  (conv1): Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
            "  (relu1): ReLU()\n"
            "  (pool1): MaxPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False)\n"
            "  (conv2): Conv2d(32, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
            "  (relu2): ReLU()\n"
            "  (pool2): MaxPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False)\n"
            "  (flatten): Flatten(start_dim=1, end_dim=-1)\n"
            "  (fc1): Linear(in_features=3136, out_features=128, bias=True)\n"
            "  (relu3): ReLU()\n"
            "  (fc2): Linear(in_features=128, out_features=10, bias=True)\n"
            ")");
  models::ResNet resnet(8);
  os.str("");
  os << resnet;
  std::string s = os.str();
  EXPECT_EQ(s.rfind("ResNet(\n  depth=8\n  (conv1): Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), "
                    "bias=False)\n  (bn1): BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=True, "
                    "track_running_stats=True)\n",
                    0),
            0u)
      << s;
  EXPECT_NE(s.find("  (layer2): Sequential(\n    (0): BasicBlock(\n      (conv1): Conv2d(16, 32, kernel_size=(3, 3), "
                   "stride=(2, 2), padding=(1, 1), bias=False)\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("      (downsample): Sequential(\n        (0): Conv2d(16, 32, kernel_size=(1, 1), stride=(2, 2), "
                   "bias=False)\n"),
            std::string::npos)
      << s;
}

TEST(Module, SummaryOfSmallCNN) {
  models::SmallCNN model(10);
  std::string s = model.summary({1, 1, 28, 28});
  std::cout << s;
  auto line_with = [&](const std::string& start) {
    size_t p = s.find("\n" + start);
    EXPECT_NE(p, std::string::npos) << start << "\n" << s;
    if (p == std::string::npos) return std::string();
    return s.substr(p + 1, s.find('\n', p + 1) - p - 1);
  };
  auto row = [&](const std::string& layer, const std::string& shape, const std::string& params) {
    std::string l = line_with(layer + " ");
    EXPECT_NE(l.find(" " + shape + " "), std::string::npos) << l;
    EXPECT_TRUE(l.ends_with(" " + params)) << l;
  };
  row("conv1 (Conv2d)", "[1, 32, 28, 28]", "320");
  row("relu1 (ReLU)", "[1, 32, 28, 28]", "0");
  row("pool1 (MaxPool2d)", "[1, 32, 14, 14]", "0");
  row("conv2 (Conv2d)", "[1, 64, 14, 14]", "18,496");
  row("pool2 (MaxPool2d)", "[1, 64, 7, 7]", "0");
  row("flatten (Flatten)", "[1, 3136]", "0");
  row("fc1 (Linear)", "[1, 128]", "401,536");
  row("fc2 (Linear)", "[1, 10]", "1,290");
  EXPECT_EQ(line_with("Total params"), "Total params: 421,642");
  EXPECT_EQ(line_with("Trainable params"), "Trainable params: 421,642");
  EXPECT_EQ(line_with("Non-trainable params"), "Non-trainable params: 0");
  EXPECT_EQ(line_with("Output shape"), "Output shape: [1, 10]");
  EXPECT_EQ(line_with("Params size"), "Params size (MB): 1.69");
  EXPECT_TRUE(model.is_training()) << "summary restores the mode";
}

TEST(Module, SummaryLeavesBatchNormAlone) {
  models::ResNet model(8, 10, 1);
  std::string s = model.summary({2, 1, 28, 28});
  EXPECT_NE(s.find("layer3.0.downsample.1 (BatchNorm2d)"), std::string::npos) << s;
  EXPECT_NE(s.find("Output shape: [2, 10]"), std::string::npos) << s;
  EXPECT_EQ(model.bn1->num_batches_tracked.item<int64_t>(), 0);
  EXPECT_EQ(model.bn1->running_mean.abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(model.layer1->is_training());
  model.layer1->eval();
  model.summary({1, 1, 28, 28});
  EXPECT_FALSE(model.layer1->is_training()) << "each module's own mode comes back";
  EXPECT_TRUE(model.is_training());
}

// ---- gradients reach every parameter ----

void expect_gradients_everywhere(nn::Module& model, const Tensor& x, int64_t classes) {
  Tensor y = tensor(std::vector<double>(static_cast<size_t>(x.size(0)), 0.0), {x.size(0)}, DType::Int64);
  for (int64_t i = 0; i < x.size(0); ++i) set_element(y, i, static_cast<double>(i % classes));
  Tensor loss = nn::functional::cross_entropy(model(x), y);
  loss.backward();
  for (auto& [name, p] : model.named_parameters()) {
    Tensor g = p.grad();
    ASSERT_TRUE(g.defined()) << model.type_name() << " " << name << " got no gradient";
    EXPECT_EQ(g.sizes(), p.sizes()) << name;
    EXPECT_EQ(g.dtype(), p.dtype()) << name;
    double total = 0;
    for (double v : g.to_vector<double>()) {
      ASSERT_TRUE(std::isfinite(v)) << name;
      total += std::abs(v);
    }
    EXPECT_GT(total, 0.0) << model.type_name() << " " << name << " has an all-zero gradient";
  }
  model.zero_grad();
  for (auto& p : model.parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(GradientFlow, EveryZooModel) {
  manual_seed(13);
  models::MLP mlp(784, {64, 32}, 10);
  expect_gradients_everywhere(mlp, randn({4, 1, 28, 28}), 10);
  models::LeNet5 lenet(10);
  expect_gradients_everywhere(lenet, randn({4, 1, 28, 28}), 10);
  models::SmallCNN cnn(10);
  expect_gradients_everywhere(cnn, randn({4, 1, 28, 28}), 10);
  models::ResNet resnet(8, 10, 3);
  expect_gradients_everywhere(resnet, randn({4, 3, 32, 32}), 10);
}

}  // namespace
}  // namespace mixtape
