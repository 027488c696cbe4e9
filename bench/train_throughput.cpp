// bench/train_throughput.cpp — mixtape's training throughput (images/s) for SmallCNN or
// ResNet-8 in FP32, AMP FP16 and AMP BF16: the mixtape half of bench/suite.sh's table (a);
// bench/torch_suite.py is the PyTorch half and follows the same protocol line for line.
//
//   build-bench/bench/train_throughput --model smallcnn|resnet8 [--batch 128] [--warmup 3]
//       [--windows 5] [--steps 8] [--threads N] [--modes fp32,fp16,bf16] [--data DIR]
//       [--synthetic] [--json FILE]
//
// Protocol (shared with torch_suite.py): the batches are the first warmup + windows x steps
// batches of epoch 0 of the example's DataLoader (Fashion-MNIST train set, shuffle seed 0,
// drop_last, normalised with mean 0.2860 / std 0.3530), prepared before any timing so data
// loading is not measured. With --synthetic, or when the dataset is missing, they are seeded
// randn images and random labels of the same shape instead (different numbers in each
// framework; the cost of a step does not depend on them). Each mode starts from a fresh model
// (seed 0) and optimizer: SGD lr 0.05 momentum 0.9, cross entropy, autocast around forward + loss;
// fp16 adds a GradScaler (bf16 needs none). `warmup` steps run untimed (optimizer state, the
// allocator's cache); then `windows` windows of `steps` steps are timed one by one, and the
// figure is the median window's images/s with the slowest and fastest window as the spread.
// Peak memory is the allocator's high-water mark over the timed steps, everything included.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "mixtape/mixtape.h"
#include "ops/cpu/blas.h"

using namespace mixtape;

namespace {

struct Config {
  std::string model = "smallcnn";
  int64_t batch = 128;
  int warmup = 3, windows = 5, steps = 8, threads = 0;
  std::vector<std::string> modes = {"fp32", "fp16", "bf16"};
  std::string data_dir = data::default_fashion_mnist_dir();
  bool synthetic = false;
  std::string json;
};

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  manual_seed(0);
  if (name == "smallcnn") return std::make_shared<models::SmallCNN>(10, 1);
  if (name == "resnet8") return std::make_shared<models::ResNet>(8, 10, 1);
  MT_ERROR("train_throughput: unknown --model '", name, "' (smallcnn, resnet8)");
}

// The batches every mode trains on; sets `source` to what they are.
std::vector<data::Batch> make_batches(const Config& c, std::string& source) {
  const int64_t need = c.warmup + static_cast<int64_t>(c.windows) * c.steps;
  std::vector<data::Batch> out;
  if (!c.synthetic) {
    try {
      auto train = data::load_fashion_mnist(c.data_dir, true);
      data::DataLoader loader(train, {.batch_size = c.batch, .shuffle = true, .seed = 0, .drop_last = true,
                                      .prefetch = 0, .transform = data::normalize({0.2860f}, {0.3530f})});
      for (const data::Batch& b : loader) {
        out.push_back(b);
        if (static_cast<int64_t>(out.size()) == need) break;
      }
      source = "Fashion-MNIST train, epoch 0 order (seed 0)";
      return out;
    } catch (const Error& e) {
      std::fprintf(stderr, "train_throughput: %s\n  -> using synthetic batches\n", e.what());
    }
  }
  Generator g(1);
  for (int64_t i = 0; i < need; ++i)
    out.push_back({randn({c.batch, 1, 28, 28}, {}, &g), (rand({c.batch}, {}, &g) * 10.0).to(DType::Int64)});
  source = "synthetic randn (seeded)";
  return out;
}

struct Result {
  std::string mode;
  std::vector<double> window_ips;  // images/s of each timed window, in run order
  double median = 0, min = 0, max = 0, step_ms = 0;
  int64_t peak_bytes = 0;
};

Result run(const Config& c, const std::string& mode, const std::vector<data::Batch>& batches) {
  std::optional<DType> autocast;
  if (mode == "fp16") autocast = DType::Float16;
  else if (mode == "bf16") autocast = DType::BFloat16;
  else MT_CHECK(mode == "fp32", "train_throughput: unknown mode '", mode, "' (fp32, fp16, bf16)");
  auto model = make_model(c.model);
  model->train();
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::GradScaler scaler({.enabled = mode == "fp16"});
  size_t next = 0;
  auto step = [&] {
    const data::Batch& b = batches[next++ % batches.size()];
    opt.zero_grad();
    Tensor loss;
    {
      std::optional<amp::AutocastGuard> guard;
      if (autocast) guard.emplace(DeviceType::CPU, *autocast);
      loss = cross_entropy(model->forward(b.data), b.target);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    profiler::step();  // MIXTAPE_PROFILE=1: the table's per-step column
  };
  for (int i = 0; i < c.warmup; ++i) step();
  reset_peak_memory();
  Result r{.mode = mode};
  for (int w = 0; w < c.windows; ++w) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < c.steps; ++s) step();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.window_ips.push_back(static_cast<double>(c.steps * c.batch) / sec);
  }
  r.peak_bytes = memory_stats().peak_bytes;
  std::vector<double> v = r.window_ips;
  std::sort(v.begin(), v.end());
  r.median = v[v.size() / 2];  // odd window counts give the true median; even ones the upper middle
  r.min = v.front();
  r.max = v.back();
  r.step_ms = 1e3 * static_cast<double>(c.batch) / r.median;
  return r;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "train_throughput: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") c.model = value();
    else if (a == "--batch") c.batch = std::stoll(value());
    else if (a == "--warmup") c.warmup = std::stoi(value());
    else if (a == "--windows") c.windows = std::stoi(value());
    else if (a == "--steps") c.steps = std::stoi(value());
    else if (a == "--threads") c.threads = std::stoi(value());
    else if (a == "--modes") c.modes = split(value());
    else if (a == "--data") c.data_dir = value();
    else if (a == "--synthetic") c.synthetic = true;
    else if (a == "--json") c.json = value();
    else {
      std::fprintf(stderr,
                   "usage: train_throughput --model smallcnn|resnet8 [--batch 128] [--warmup 3] [--windows 5] "
                   "[--steps 8] [--threads N] [--modes fp32,fp16,bf16] [--data DIR] [--synthetic] [--json FILE]\n");
      return 2;
    }
  }
  try {
    MT_CHECK(c.windows >= 1 && c.steps >= 1 && c.warmup >= 0 && c.batch >= 1,
             "train_throughput: need --windows >= 1, --steps >= 1, --warmup >= 0, --batch >= 1");
    if (c.threads > 0) set_num_threads(c.threads);
    std::string source;
    const std::vector<data::Batch> batches = make_batches(c, source);
    std::printf("mixtape %s, batch %lld, %d threads, %s; %d warm-up steps, median of %d windows x %d steps\n",
                c.model.c_str(), static_cast<long long>(c.batch), get_num_threads(), source.c_str(), c.warmup,
                c.windows, c.steps);
    std::printf("BLAS: %s\n", cpu::blas_info_line().c_str());
    std::printf("%-6s %12s %22s %10s %10s\n", "mode", "images/s", "(min..max)", "step ms", "peak MiB");
    nlohmann::json j = {{"framework", "mixtape"}, {"model", c.model},     {"batch", c.batch},
                        {"threads", get_num_threads()}, {"data", source}, {"warmup", c.warmup},
                        {"windows", c.windows}, {"steps", c.steps},      {"modes", nlohmann::json::object()},
                        {"blas", cpu::blas_info_line()}};
    for (const std::string& m : c.modes) {
      const Result r = run(c, m, batches);
      char range[64];
      std::snprintf(range, sizeof range, "(%.1f..%.1f)", r.min, r.max);
      std::printf("%-6s %12.1f %22s %10.1f %10.1f\n", m.c_str(), r.median, range, r.step_ms, r.peak_bytes / 1048576.0);
      std::fflush(stdout);
      j["modes"][m] = {{"images_per_s", r.median}, {"min", r.min}, {"max", r.max}, {"windows", r.window_ips},
                       {"step_ms", r.step_ms}, {"peak_bytes", r.peak_bytes}};
    }
    if (!c.json.empty()) {
      std::ofstream f(c.json);
      MT_CHECK(f.good(), "train_throughput: cannot write --json '", c.json, "'");
      f << j.dump(2) << "\n";
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "train_throughput: %s\n", e.what());
    return 1;
  }
  return 0;
}
