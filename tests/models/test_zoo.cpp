// tests/models/test_zoo.cpp — the model zoo against PyTorch (tests/fixtures/gen_models.py, torch
// 1.13): for every configuration the parameter count, output shape and the complete state_dict
// listing (names, shapes, dtypes, order) equal torch's for the same architecture; and, as proof
// of architectural equivalence, SmallCNN and ResNet-8 loaded with torch's exported weights
// reproduce torch's outputs (eval in f64 and f32; ResNet also one training-mode step in f64,
// with the running statistics it leaves behind).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include <mixtape/mixtape.h>

#include "models/nn.h"
#include "models/test_util.h"

namespace mixtape {
namespace {

std::string fixture(const std::string& name) { return test::fixture_path(name); }

const nlohmann::json& reference() {
  static const nlohmann::json ref = [] {
    std::ifstream f(fixture("models_reference.json"));
    if (!f) throw Error("cannot open models_reference.json (run /usr/bin/python3 tests/fixtures/gen_models.py)");
    return nlohmann::json::parse(f);
  }();
  return ref;
}

// The configurations of gen_models.py's CONFIGS, by the same names.
std::shared_ptr<nn::Module> make(const std::string& name) {
  if (name == "MLP(784,[256,128],10)") return std::make_shared<models::MLP>(784, std::vector<int64_t>{256, 128}, 10);
  if (name == "LeNet5(10,1)") return std::make_shared<models::LeNet5>(10, 1);
  if (name == "LeNet5(5,3)") return std::make_shared<models::LeNet5>(5, 3);
  if (name == "SmallCNN(10,1)") return std::make_shared<models::SmallCNN>(10, 1);
  if (name == "SmallCNN(7,3)") return std::make_shared<models::SmallCNN>(7, 3);
  if (name == "ResNet(8,10,3)") return std::make_shared<models::ResNet>(8, 10, 3);
  if (name == "ResNet(20,10,3)") return std::make_shared<models::ResNet>(20, 10, 3);
  if (name == "ResNet(8,10,1)") return std::make_shared<models::ResNet>(8, 10, 1);
  if (name == "ResNet(20,100,1)") return std::make_shared<models::ResNet>(20, 100, 1);
  return nullptr;
}

const char* st_name(DType t) { return safetensors_dtype_name(t); }

TEST(Zoo, ShapesParameterCountsAndNamesEqualPyTorch) {
  const auto& models_ref = reference().at("models");
  ASSERT_EQ(models_ref.size(), 9u);
  for (const auto& [name, ref] : models_ref.items()) {
    SCOPED_TRACE(name);
    auto model = make(name);
    ASSERT_NE(model, nullptr) << "no mixtape constructor for " << name;
    EXPECT_EQ(nn::num_parameters(*model), ref.at("num_parameters").get<int64_t>());
    EXPECT_EQ(nn::num_parameters(*model, true), ref.at("trainable_parameters").get<int64_t>());
    IntList in = ref.at("input_shape").get<std::vector<int64_t>>();
    model->eval();
    Tensor y;
    {
      NoGradGuard no_grad;
      y = (*model)(zeros(in));
    }
    EXPECT_EQ(y.sizes(), IntList(ref.at("output_shape").get<std::vector<int64_t>>()));
    // torch's state_dict order is ours: per module, parameters then buffers, then children.
    std::vector<std::pair<std::string, Tensor>> ours;
    for (auto& [n, m] : model->named_modules()) {
      for (auto& [pn, p] : m->named_parameters(false)) ours.emplace_back(n.empty() ? pn : n + "." + pn, p);
      for (auto& [bn, b] : m->named_buffers(false)) ours.emplace_back(n.empty() ? bn : n + "." + bn, b);
    }
    const auto& sd = ref.at("state_dict");
    ASSERT_EQ(ours.size(), sd.size());
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_EQ(ours[i].first, sd[i][0].get<std::string>());
      EXPECT_EQ(ours[i].second.sizes(), IntList(sd[i][1].get<std::vector<int64_t>>())) << ours[i].first;
      EXPECT_EQ(st_name(ours[i].second.dtype()), sd[i][2].get<std::string>()) << ours[i].first;
    }
    EXPECT_EQ(model->state_dict().size(), sd.size());
  }
}

TEST(Zoo, DesignDocUsageCompiles) {
  // How user code reads: a model held by value, called directly.
  auto model = models::SmallCNN(10);
  Tensor logits = model(zeros({2, 1, 28, 28}));
  EXPECT_EQ(logits.sizes(), (IntList{2, 10}));
  EXPECT_EQ(model.parameters().size(), 8u);
  auto held = std::make_shared<models::LeNet5>();
  EXPECT_EQ(held->forward(zeros({1, 1, 28, 28})).sizes(), (IntList{1, 10}));
  EXPECT_NE(std::string([&] {
              try {
                (*held)(zeros({1, 1, 32, 32}));
              } catch (const Error& e) {
                return std::string(e.what());
              }
              return std::string();
            }())
                .find("LeNet5: expected input (N, 1, 28, 28)"),
            std::string::npos);
  EXPECT_THROW(models::ResNet(10), Error);
}

// ---- numerical equivalence with torch ----

struct TorchExport {
  StateDict weights;  // the model's state_dict, F32
  StateDict io;       // "__io__.*" without the prefix
};

TorchExport load_export(const std::string& file) {
  TorchExport e;
  for (auto& [name, t] : load_safetensors(fixture(file))) {
    if (name.rfind("__io__.", 0) == 0)
      e.io[name.substr(7)] = t;
    else
      e.weights[name] = t;
  }
  return e;
}

// max |got - want| <= tol, elementwise, printing the worst element.
void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double d = std::abs(g[i] - w[i]);
    if (!(d <= worst)) {
      worst = d;
      at = i;
    }
  }
  EXPECT_LE(worst, tol) << what << ": element " << at << " is " << g[at] << ", torch " << w[at];
  std::cout << what << ": max |mixtape - torch| = " << worst << " (tolerance " << tol << ")\n";
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// Tolerances. Both sides compute the same sums in a different order, so they differ only by
// rounding. A length-K sum of O(s) terms accumulates at most K * u * s of rounding error
// (u = 2^-53 in f64, 2^-24 in f32) — the worst case; each of the L layers in sequence adds
// its own, carried forward by the (O(1)-gain) later layers. So
//   tol = L * K * u * max(1, max|torch output|)
// with K the longest reduction in the network and L its depth in weight layers.
double tolerance(int layers, int64_t longest_sum, double u, const Tensor& ref) {
  return layers * static_cast<double>(longest_sum) * u * std::max(1.0, max_abs(ref));
}
const double kU64 = std::ldexp(1.0, -53), kU32 = std::ldexp(1.0, -24);

TEST(Zoo, SmallCNNReproducesTorch) {
  TorchExport e = load_export("smallcnn_torch.safetensors");
  models::SmallCNN model(10, 1);
  model.load_state_dict(e.weights);  // strict: the names are torch's
  model.eval();
  NoGradGuard no_grad;
  // L = 4 weight layers; K = 3136 (fc1's inner dimension, the longest sum).
  Tensor ref32 = e.io.at("eval_f32");
  Tensor y32 = model(e.io.at("input").to(DType::Float32));
  EXPECT_EQ(y32.dtype(), DType::Float32);
  expect_close(y32, ref32, tolerance(4, 3136, kU32, ref32), "SmallCNN eval f32");
  model.to(DType::Float64);
  Tensor ref64 = e.io.at("eval_f64");
  Tensor y64 = model(e.io.at("input"));
  EXPECT_EQ(y64.dtype(), DType::Float64);
  expect_close(y64, ref64, tolerance(4, 3136, kU64, ref64), "SmallCNN eval f64");
}

TEST(Zoo, ResNet8ReproducesTorch) {
  TorchExport e = load_export("resnet8_torch.safetensors");
  models::ResNet model(8, 10, 3);
  model.load_state_dict(e.weights);
  model.eval();
  Tensor x = e.io.at("input");  // (4, 3, 32, 32)
  // L = 8 weight layers (7 convs + fc) plus as many BatchNorms; K = 64 * 9 = 576 in the
  // convolutions, 64 in the average pool, and 4 * 32 * 32 = 4096 for a training-mode
  // BatchNorm's batch statistics (the longest sum, used throughout).
  {
    NoGradGuard no_grad;
    Tensor ref32 = e.io.at("eval_f32");
    expect_close(model(x.to(DType::Float32)), ref32, tolerance(16, 4096, kU32, ref32), "ResNet-8 eval f32");
    model.to(DType::Float64);
    Tensor ref64 = e.io.at("eval_f64");
    expect_close(model(x), ref64, tolerance(16, 4096, kU64, ref64), "ResNet-8 eval f64");
  }
  // One training-mode forward: batch statistics, and the running statistics it updates.
  model.train();
  Tensor ref_train = e.io.at("train_f64");
  Tensor y = model(x);
  expect_close(y, ref_train, tolerance(16, 4096, kU64, ref_train), "ResNet-8 train f64");
  StateDict after = model.state_dict();
  int checked = 0;
  for (const auto& [key, want] : e.io) {
    if (key.rfind("after_train.", 0) != 0) continue;
    std::string name = key.substr(12);
    ASSERT_TRUE(after.count(name)) << name;
    if (want.dtype() == DType::Int64) {
      EXPECT_EQ(after.at(name).item<int64_t>(), want.item<int64_t>()) << name;
    } else {
      expect_close(after.at(name), want, tolerance(16, 4096, kU64, want), name);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 3 * 9);  // 9 BatchNorms x (running_mean, running_var, num_batches_tracked)
  // And gradients flow through the f64 model in training mode.
  y.sum().backward();
  EXPECT_TRUE(model.conv1->weight.grad().defined());
}

}  // namespace
}  // namespace mixtape
