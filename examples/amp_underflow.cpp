// examples/amp_underflow.cpp — why loss scaling exists, measured.
//
// Gradients are often far smaller than the values they update: a loss averaged over many
// positions, a small auxiliary-loss weight, a deep net with a small initialisation. Here the
// loss of an MLP on Fashion-MNIST is weighted by 2^-14 (as a mean over 16384 positions would),
// and the learning rate multiplied by 2^14: in FP32 this changes nothing (powers of two are
// exact), but in FP16 (smallest subnormal 2^-24 ~ 6e-8) most gradients now round to zero.
// The program
//   1. computes one batch's gradients three ways on the same weights -- FP32, FP16 (autocast)
//      without scaling, FP16 with the loss scaled by S -- and prints, per layer, the fraction of
//      nonzero FP32 gradient values that FP16 flushed to zero; plus amp::GradStats' prediction
//      from the FP32 activation gradients, and their histograms on a log2 axis against FP16's
//      underflow, subnormal and overflow ranges (SVG);
//   2. trains the model three ways (FP32; FP16 without scaling; FP16 with amp::GradScaler) and
//      prints the test accuracies side by side, with the loss-scale timeline and its skipped
//      steps (SVG).
//
//   build/examples/amp_underflow [--epochs 2] [--train 12000] [--out out/amp_underflow]
#include <CLI/CLI.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "amp/grad_scaler.h"
#include "mixtape/mixtape.h"
#include "svg_plot.h"

using namespace mixtape;

namespace {

struct Config {
  std::string data_dir = data::default_fashion_mnist_dir();
  std::string out_dir = "out/amp_underflow";
  int epochs = 2;
  int64_t train = 12000, test = 2000, batch = 128;
  int depth = 4, width = 128;
  double init_gain = 1.0, lr = 0.05, loss_weight = 1.0 / 16384, scale = 65536;
  uint64_t seed = 0;
};

enum class Mode { FP32, FP16, FP16Scaled };
const char* mode_name(Mode m) {
  return m == Mode::FP32 ? "fp32" : m == Mode::FP16 ? "fp16, no scaling" : "fp16, dynamic scaling";
}

// depth Linear layers of `width` (the last to 10 classes), ReLU between; weights scaled by gain.
std::shared_ptr<nn::Sequential> make_net(const Config& c) {
  manual_seed(c.seed);
  auto net = std::make_shared<nn::Sequential>();
  int64_t in = 784;
  for (int i = 0; i < c.depth; ++i) {
    int64_t out = i + 1 == c.depth ? 10 : c.width;
    net->push_back(std::make_shared<nn::Linear>(in, out));
    if (i + 1 < c.depth) net->push_back(std::make_shared<nn::ReLU>());
    in = out;
  }
  NoGradGuard ng;
  for (auto& [name, p] : net->named_parameters())
    if (name.find("weight") != std::string::npos) mul_(p, c.init_gain);
  return net;
}

struct Data {
  Tensor x, y;  // (N, 784) f32 normalised, (N) i64
};
Data load(const Config& c, bool train) {
  auto ds = data::load_mnist_format(c.data_dir, train);
  const int64_t n = std::min<int64_t>(train ? c.train : c.test, ds->size());
  Tensor x = ds->data().narrow(0, 0, n).to(DType::Float32).reshape({n, 784});
  return {(x / 255.0 - 0.2860) / 0.3530, ds->targets().narrow(0, 0, n)};
}

// A loss scale as a label: 2^{16} for a power of two, else the number.
std::string scale_text(double scale) {
  int e = 0;
  if (std::frexp(scale, &e) == 0.5) return "2^{" + std::to_string(e - 1) + "}";
  std::ostringstream os;
  os << scale;
  return os.str();
}

// Forward + weighted loss, under autocast for the FP16 modes.
Tensor forward_loss(const Config& c, nn::Module& net, const Tensor& x, const Tensor& y, Mode m) {
  std::optional<amp::AutocastGuard> ac;
  if (m != Mode::FP32) ac.emplace(DeviceType::CPU, DType::Float16);
  return cross_entropy(net.forward(x), y) * c.loss_weight;
}

// Part 1: the gradients of one batch, on the initial weights, three ways.
void measure_one_batch(const Config& c, const Data& train) {
  Tensor xb = train.x.narrow(0, 0, c.batch), yb = train.y.narrow(0, 0, c.batch);
  std::map<std::string, Tensor> g32, g16, g16s;
  amp::GradStats stats(c.scale);
  for (Mode m : {Mode::FP32, Mode::FP16, Mode::FP16Scaled}) {
    auto net = make_net(c);
    Tensor loss;
    if (m == Mode::FP32) {
      // Watch each Linear's output gradient (the activation gradients the layers pass down).
      Tensor h = xb;
      int li = 0;
      for (auto& layer : net->children()) {
        h = layer->forward(h);
        if (dynamic_cast<nn::Linear*>(layer.get())) stats.watch("act" + std::to_string(li++), h);
      }
      loss = cross_entropy(h, yb) * c.loss_weight;
    } else {
      loss = forward_loss(c, *net, xb, yb, m);
    }
    (m == Mode::FP16Scaled ? loss * c.scale : loss).backward();
    auto& dst = m == Mode::FP32 ? g32 : m == Mode::FP16 ? g16 : g16s;
    for (auto& [name, p] : net->named_parameters())
      if (name.find("weight") != std::string::npos) dst[name] = m == Mode::FP16Scaled ? p.grad() / c.scale : p.grad();
    if (m == Mode::FP32) stats.add_named(net->named_parameters());
  }

  std::cout << "\n1. One batch of " << c.batch << " on the initial weights: nonzero FP32 weight-gradient values "
            << "that FP16 flushed to zero\n";
  std::cout << std::left << std::setw(12) << "layer" << std::right << std::setw(16) << "fp32 |g| median"
            << std::setw(20) << "fp16 no scaling" << std::setw(22) << ("fp16 x" + std::to_string(int64_t(c.scale)))
            << "\n";
  for (auto& [name, ref] : g32) {
    auto r = ref.to_vector<double>(), a = g16[name].to_vector<double>(), b = g16s[name].to_vector<double>();
    int64_t nonzero = 0, flushed_a = 0, flushed_b = 0;
    std::vector<double> mags;
    for (size_t i = 0; i < r.size(); ++i) {
      if (r[i] == 0) continue;
      ++nonzero;
      mags.push_back(std::abs(r[i]));
      flushed_a += a[i] == 0;
      flushed_b += b[i] == 0;
    }
    std::nth_element(mags.begin(), mags.begin() + mags.size() / 2, mags.end());
    auto pct = [&](int64_t k) { return 100.0 * k / std::max<int64_t>(nonzero, 1); };
    std::cout << std::left << std::setw(12) << name << std::right << std::setw(16) << std::setprecision(3)
              << (mags.empty() ? 0.0 : mags[mags.size() / 2]) << std::fixed << std::setprecision(1) << std::setw(19)
              << pct(flushed_a) << "%" << std::setw(21) << pct(flushed_b) << "%" << std::defaultfloat << "\n";
  }
  std::cout << "\namp::GradStats on the FP32 gradients (what storing them in FP16 would do):\n" << stats.table();

  std::ofstream(c.out_dir + "/grad_histograms.csv") << stats.histogram_csv();
  // Magnitudes on a log2 axis against FP16's ranges (shaded): each binade [2^k, 2^(k+1)) drawn at
  // its middle, 2^(k+1/2); empty binades leave gaps (a log axis has no 0).
  svg::Plot p{"|gradient| of each layer's output (FP32 run, one batch)",
              {"|g| (values counted per binade, 2^{k} ≤ |g| < 2^{k+1})", svg::Scale::Log2},
              {"values", svg::Scale::Log10}};
  // To 2^17: the whole of FP16's range shows, overflow included, to see how far below it they are.
  p.x.hi = std::ldexp(1.0, 17);
  svg::add_fp16_zones(p);
  p.lines.push_back({std::ldexp(1.0, -24) / c.scale, "2^{-24} / S (S = " + scale_text(c.scale) +
                                                         "): smaller\ngradients underflow even scaled"});
  for (const auto& s : stats.stats()) {
    if (!s.activation) continue;
    svg::Series ser{s.name, {}, {}};
    for (size_t i = 0; i < s.log2_histogram.size(); ++i) {
      ser.x.push_back(std::ldexp(std::sqrt(2.0), amp::GradStats::kLog2Min + static_cast<int>(i)));
      ser.y.push_back(static_cast<double>(s.log2_histogram[i]));
    }
    p.series.push_back(ser);
  }
  svg::write(c.out_dir + "/grad_histograms.svg", p);
}

struct RunResult {
  double accuracy = 0, final_loss = 0;
  int64_t skipped = 0;
  std::vector<amp::ScaleRecord> history;
};

RunResult train_run(const Config& c, const Data& train, const Data& test, Mode m) {
  auto net = make_net(c);
  // The weighted loss's gradients are loss_weight times the usual ones; the learning rate makes
  // up for it exactly, so the FP32 run is the ordinary recipe.
  optim::SGD opt(net->parameters(), {.lr = c.lr / c.loss_weight, .momentum = 0.9});
  // growth_interval 50 instead of 2000, so that a short run shows the scale growing until an
  // overflow halves it -- the dynamic part of dynamic loss scaling.
  amp::GradScaler scaler({.init_scale = c.scale, .growth_interval = 50, .enabled = m == Mode::FP16Scaled});
  RunResult r;
  const int64_t n = train.x.size(0);
  for (int e = 0; e < c.epochs; ++e) {
    for (int64_t s = 0; s + c.batch <= n; s += c.batch) {
      Tensor xb = train.x.narrow(0, s, c.batch), yb = train.y.narrow(0, s, c.batch);
      opt.zero_grad();
      Tensor loss = forward_loss(c, *net, xb, yb, m);
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      r.final_loss = loss.item<double>() / c.loss_weight;
    }
  }
  NoGradGuard ng;
  Tensor pred = argmax(net->forward(test.x), 1);
  r.accuracy = eq(pred, test.y).to(DType::Float32).mean().item<double>();
  r.skipped = scaler.skipped_steps();
  r.history = scaler.scale_history();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"Shows FP16 gradient underflow and how loss scaling recovers it"};
  app.add_option("--data", c.data_dir, "Fashion-MNIST IDX folder");
  app.add_option("--out", c.out_dir, "where the CSV and SVG files go");
  app.add_option("--epochs", c.epochs);
  app.add_option("--train", c.train, "training images used");
  app.add_option("--test", c.test, "test images used");
  app.add_option("--depth", c.depth, "Linear layers");
  app.add_option("--width", c.width, "hidden width");
  app.add_option("--init-gain", c.init_gain, "multiplies PyTorch's default weight init");
  app.add_option("--lr", c.lr, "learning rate for the unweighted loss");
  app.add_option("--loss-weight", c.loss_weight, "multiplies the loss (a power of two keeps FP32 exact)");
  app.add_option("--scale", c.scale, "the loss scale (GradScaler's init_scale)");
  app.add_option("--seed", c.seed);
  CLI11_PARSE(app, argc, argv);
  try {
    std::filesystem::create_directories(c.out_dir);
    Data train = load(c, true), test = load(c, false);
    std::cout << "A " << c.depth << "-layer MLP of width " << c.width << " on " << train.x.size(0)
              << " Fashion-MNIST images; loss weighted by " << c.loss_weight << "\n";
    measure_one_batch(c, train);

    std::cout << "\n2. Training " << c.epochs << " epochs, SGD lr " << c.lr << " (x 1/loss weight) momentum 0.9, batch " << c.batch
              << "\n";
    std::cout << std::left << std::setw(24) << "run" << std::right << std::setw(14) << "test accuracy"
              << std::setw(14) << "final loss" << std::setw(16) << "skipped steps" << "\n";
    svg::Plot timeline{"GradScaler: the loss scale per iteration (growth interval 50)", {"iteration"},
                       {"loss scale S", svg::Scale::Log2}};
    for (Mode m : {Mode::FP32, Mode::FP16, Mode::FP16Scaled}) {
      RunResult r = train_run(c, train, test, m);
      std::cout << std::left << std::setw(24) << mode_name(m) << std::right << std::fixed << std::setprecision(2)
                << std::setw(13) << 100 * r.accuracy << "%" << std::setprecision(4) << std::setw(14) << r.final_loss
                << std::setw(16) << r.skipped << std::defaultfloat << "\n";
      if (m == Mode::FP16Scaled) {
        svg::Series s{"scale used", {}, {}, svg::Style::Steps, "#2ca02c"};
        svg::Series skipped{"", {}, {}, svg::Style::Markers, "#d62728", 'x'};
        std::ofstream csv(c.out_dir + "/loss_scale.csv");
        csv << "iteration,scale,skipped\n";
        for (const auto& h : r.history) {
          s.x.push_back(static_cast<double>(h.iteration));
          s.y.push_back(h.scale);
          if (h.skipped) skipped.x.push_back(static_cast<double>(h.iteration)), skipped.y.push_back(h.scale);
          csv << h.iteration << ',' << h.scale << ',' << h.skipped << '\n';
        }
        skipped.label = std::to_string(r.skipped) + " skipped (inf/NaN gradient;\nS is halved)";
        timeline.series = {s, skipped};
        if (!r.history.empty()) timeline.x.lo = 0, timeline.x.hi = static_cast<double>(r.history.back().iteration);
      }
    }
    svg::write(c.out_dir + "/loss_scale.svg", timeline);
    std::cout << "\nwrote " << c.out_dir << "/{grad_histograms,loss_scale}.{svg,csv}\n";
  } catch (const std::exception& e) {
    std::cerr << "amp_underflow: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
