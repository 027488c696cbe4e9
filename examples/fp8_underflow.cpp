// examples/fp8_underflow.cpp — why FP8 needs per-tensor (or per-block) scales, measured: the FP8
// sibling of amp_underflow.
//
// E4M3 spans 2^-9 to 448 and E5M2 2^-16 to 57344. Weights and gradients are far smaller than
// 448, so cast as they are (scale 1) many of them flush to zero. The program trains the same MLP
// on Fashion-MNIST under amp::Fp8Autocast with
//   - FP32 (the reference), no FP8;
//   - unscaled E4M3 everywhere, and unscaled HYBRID (E5M2 gradients): scale 1, never updated;
//   - delayed scaling (HYBRID, TE's defaults), current scaling (HYBRID);
//   - MXFP8 with its scales rounded up (NVIDIA's recipe) and with the OCP spec's rounding;
// and prints the test accuracies and, pooled over the layers, the fractions of nonzero inputs,
// weights and output gradients their casts flushed to zero, and those that saturated, side by
// side. Every `--measure-every` steps it measures them (the casts as Fp8Autocast makes them, on
// that step's tensors) and draws them over training, with the training loss (SVG).
//
//   build/examples/fp8_underflow [--epochs 1] [--train 6000] [--out out/fp8_underflow]
#include <CLI/CLI.hpp>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>

#include "amp/fp8_autocast.h"
#include "fp8_cast_loss.h"
#include "mixtape/mixtape.h"
#include "svg_plot.h"

using namespace mixtape;
using namespace mixtape::amp;
using fp8_example::CastLoss;

namespace {

struct Config {
  std::string data_dir = data::default_fashion_mnist_dir();
  std::string out_dir = "out/fp8_underflow";
  int epochs = 1;
  int64_t train = 6000, test = 1000, batch = 64, measure_every = 10;
  int width = 128;
  double lr = 0.05;
  uint64_t seed = 0;
};

enum class Run { FP32, UnscaledE4M3, UnscaledHybrid, Delayed, Current, MxUp, MxSpec };
const Run kRuns[] = {Run::FP32,    Run::UnscaledE4M3, Run::UnscaledHybrid, Run::Delayed,
                     Run::Current, Run::MxUp,         Run::MxSpec};
const char* run_name(Run r) {
  switch (r) {
    case Run::FP32: return "fp32";
    case Run::UnscaledE4M3: return "unscaled, E4M3";
    case Run::UnscaledHybrid: return "unscaled, HYBRID";
    case Run::Delayed: return "delayed, HYBRID";
    case Run::Current: return "current, HYBRID";
    case Run::MxUp: return "mxfp8, round up";
    case Run::MxSpec: return "mxfp8, spec rounding";
  }
  return "";
}

// The recipe a run's region opens with (FP32: none). The unscaled runs are delayed scaling whose
// scales stay at their initial 1 (the region never updates them).
std::optional<Fp8Recipe> recipe_of(Run r) {
  switch (r) {
    case Run::FP32: return std::nullopt;
    case Run::UnscaledE4M3: return DelayedScaling{.fp8_format = Fp8Format::E4M3};
    case Run::UnscaledHybrid:
    case Run::Delayed: return DelayedScaling{};
    case Run::Current: return CurrentScaling{};
    case Run::MxUp: return MXFP8BlockScaling{};
    case Run::MxSpec: return MXFP8BlockScaling{.scale_rounding = MxScaleRounding::Spec};
  }
  return std::nullopt;
}

std::shared_ptr<nn::Sequential> make_net(const Config& c) {
  manual_seed(c.seed);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, c.width), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(c.width, c.width), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(c.width, 10));
}

struct Data {
  Tensor x, y;
};
Data load(const Config& c, bool train) {
  auto ds = data::load_mnist_format(c.data_dir, train);
  const int64_t n = std::min<int64_t>(train ? c.train : c.test, ds->size());
  Tensor x = ds->data().narrow(0, 0, n).to(DType::Float32).reshape({n, 784});
  return {(x / 255.0 - 0.2860) / 0.3530, ds->targets().narrow(0, 0, n)};
}

const Fp8Role kRoles[] = {Fp8Role::Input, Fp8Role::Weight, Fp8Role::GradOutput};

// One measurement: per role, the casts of every layer pooled.
struct Measure {
  int64_t step = 0;
  CastLoss role[3];
};

struct RunResult {
  double accuracy = 0;
  std::vector<double> loss_x, loss_y;
  std::vector<Measure> measures;
  CastLoss total[3];
};

// What this step's casts of one layer's tensor lost, with the scale Fp8Autocast used.
CastLoss layer_loss(const Fp8Recipe& recipe, Fp8Metas* metas, const Tensor& weight, Fp8Role role, const Tensor& t32) {
  const DType dt = fp8_dtype_for(recipe_format(recipe), role);
  if (const auto* mx = std::get_if<MXFP8BlockScaling>(&recipe)) return fp8_example::mx_loss(t32, dt, *mx);
  if (metas != nullptr) return fp8_example::per_tensor_loss(t32, dt, metas->find(weight)->scale_of(role));
  return fp8_example::per_tensor_loss(t32, dt, scale_from_amax(amax_of(t32), fp8_max(dt), 0.0f, false, 1.0f));
}

RunResult train_run(const Config& c, const Data& train, const Data& test, Run run) {
  auto net = make_net(c);
  optim::SGD opt(net->parameters(), {.lr = c.lr, .momentum = 0.9});
  const std::optional<Fp8Recipe> recipe = recipe_of(run);
  std::unique_ptr<Fp8Metas> metas;
  if (recipe && std::holds_alternative<DelayedScaling>(*recipe))
    metas = std::make_unique<Fp8Metas>(std::get<DelayedScaling>(*recipe), net->named_parameters());
  const bool unscaled = run == Run::UnscaledE4M3 || run == Run::UnscaledHybrid;
  RunResult r;
  int64_t step = 0;
  const int64_t n = train.x.size(0);
  for (int e = 0; e < c.epochs; ++e) {
    for (int64_t s = 0; s + c.batch <= n; s += c.batch, ++step) {
      const bool measure = recipe && step % c.measure_every == 0;
      std::vector<Tensor> inputs, outputs, weights;
      Tensor loss;
      {
        std::optional<Fp8Autocast> fp8;
        if (recipe) fp8.emplace(*recipe, metas.get(), Fp8AutocastOptions{.update_scales = !unscaled});
        Tensor h = train.x.narrow(0, s, c.batch);
        for (auto& layer : net->children()) {
          auto* lin = dynamic_cast<nn::Linear*>(layer.get());
          if (lin != nullptr && measure) inputs.push_back(h.detach().to(DType::Float32));
          h = layer->forward(h);
          if (lin != nullptr && measure) {
            h.retain_grad();
            outputs.push_back(h);
            weights.push_back(lin->parameters()[0]);
          }
        }
        loss = cross_entropy(h, train.y.narrow(0, s, c.batch));
      }
      opt.zero_grad();
      loss.backward();
      if (measure) {
        Measure m{step, {}};
        for (size_t l = 0; l < weights.size(); ++l) {
          const Tensor t[3] = {inputs[l], clone(weights[l].detach()), outputs[l].grad().to(DType::Float32)};
          for (Fp8Role role : kRoles) {
            const int k = static_cast<int>(role);
            m.role[k] += layer_loss(*recipe, metas.get(), weights[l], role, t[k]);
          }
        }
        for (int k = 0; k < 3; ++k) r.total[k] += m.role[k];
        r.measures.push_back(m);
      }
      opt.step();
      r.loss_x.push_back(static_cast<double>(step));
      r.loss_y.push_back(loss.item<double>());
    }
  }
  NoGradGuard ng;
  std::optional<Fp8Autocast> fp8;  // evaluation in the run's precision; scales left as they are
  if (recipe) fp8.emplace(*recipe, metas.get(), Fp8AutocastOptions{.update_scales = false});
  Tensor pred = argmax(net->forward(test.x), 1);
  r.accuracy = eq(pred, test.y).to(DType::Float32).mean().item<double>();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"Shows FP8 casts flushing values to zero without scaling, and the scaling recipes keeping them"};
  app.add_option("--data", c.data_dir, "Fashion-MNIST IDX folder");
  app.add_option("--out", c.out_dir, "where the CSV and SVG files go");
  app.add_option("--epochs", c.epochs);
  app.add_option("--train", c.train, "training images used");
  app.add_option("--test", c.test, "test images used");
  app.add_option("--width", c.width, "hidden width");
  app.add_option("--lr", c.lr, "SGD learning rate (momentum 0.9)");
  app.add_option("--measure-every", c.measure_every, "steps between measurements of the casts");
  app.add_option("--seed", c.seed);
  CLI11_PARSE(app, argc, argv);
  try {
    if (c.measure_every < 1) throw std::invalid_argument("--measure-every must be >= 1, got " + std::to_string(c.measure_every));
    std::filesystem::create_directories(c.out_dir);
    const Data train = load(c, true), test = load(c, false);
    std::cout << "A 3-layer MLP of width " << c.width << " on " << train.x.size(0) << " Fashion-MNIST images, "
              << c.epochs << " epoch(s), SGD lr " << c.lr << " momentum 0.9, batch " << c.batch << "\n"
              << "Casts measured every " << c.measure_every << " steps, pooled over the 3 layers: % of the nonzero "
              << "values flushed to zero, and % of all values saturated (clipped to ±max)\n\n";
    std::cout << std::left << std::setw(22) << "run" << std::right << std::setw(10) << "test acc" << std::setw(15)
              << "flushed: input" << std::setw(9) << "weight" << std::setw(13) << "grad_output" << std::setw(17)
              << "saturated: input" << std::setw(9) << "weight" << std::setw(13) << "grad_output" << "\n";
    svg::Plot loss_plot{"training loss per step", {"step"}, {"cross-entropy", svg::Scale::Log2}};
    svg::Figure flushed{"FP8 casts: nonzero values flushed to zero (all layers pooled)", {}, 760};
    const char* panel[3] = {"inputs (activations)", "weights", "output gradients"};
    for (int k = 0; k < 3; ++k)
      flushed.plots.push_back(svg::Plot{panel[k], {"step"}, {"% of nonzero values flushed"}});
    std::ofstream csv(c.out_dir + "/fp8_underflow.csv");
    csv << "run,step,role,values,nonzero,saturated,flushed\n";
    for (Run run : kRuns) {
      const RunResult r = train_run(c, train, test, run);
      std::cout << std::left << std::setw(22) << run_name(run) << std::right << std::fixed << std::setprecision(2)
                << std::setw(9) << 100 * r.accuracy << "%";
      for (int k = 0; k < 3; ++k)
        std::cout << std::setw(k == 0 ? 14 : k == 1 ? 8 : 12) << (run == Run::FP32 ? 0.0 : r.total[k].flushed_pct()) << "%";
      for (int k = 0; k < 3; ++k)
        std::cout << std::setw(k == 0 ? 16 : k == 1 ? 8 : 12) << (run == Run::FP32 ? 0.0 : r.total[k].saturated_pct()) << "%";
      std::cout << std::defaultfloat << "\n";
      loss_plot.series.push_back({run_name(run), r.loss_x, r.loss_y, svg::Style::Line, "", 'o', 1.2, 0.85});
      if (run == Run::FP32) continue;
      for (int k = 0; k < 3; ++k) {
        svg::Series s{run_name(run), {}, {}, svg::Style::LineMarkers};
        for (const Measure& m : r.measures) {
          s.x.push_back(static_cast<double>(m.step));
          s.y.push_back(m.role[k].flushed_pct());
          csv << '"' << run_name(run) << "\"," << m.step << ',' << fp8_role_name(static_cast<Fp8Role>(k)) << ','
              << m.role[k].values << ',' << m.role[k].nonzero << ',' << m.role[k].saturated << ','
              << m.role[k].flushed << '\n';
        }
        flushed.plots[static_cast<size_t>(k)].series.push_back(s);
      }
    }
    svg::write(c.out_dir + "/fp8_flushed.svg", flushed);
    svg::write(c.out_dir + "/fp8_loss.svg", loss_plot);
    std::cout << "\nwrote " << c.out_dir << "/fp8_flushed.svg, fp8_loss.svg and fp8_underflow.csv\n";
  } catch (const std::exception& e) {
    std::cerr << "fp8_underflow: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
