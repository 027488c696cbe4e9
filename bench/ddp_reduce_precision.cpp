// bench/ddp_reduce_precision.cpp — what each reduction precision of DistributedDataParallel
// (DataParallelOptions::reduce_dtype, predivide) does to real gradients: SmallCNN trained on
// Fashion-MNIST under FP16 autocast with a GradScaler, two ranks of 64 images each, and at chosen
// steps every choice applied to that step's two per-rank gradients, against their exact average.
//
//   build-bench/bench/ddp_reduce_precision [--steps 450] [--at 0,100,450] [--data DIR]
//
// The two ranks run in this one process (rank r: images [64 r, 64 r + 64) of each batch of 128):
// a two-rank reduction is one rounded addition per element, whatever the order, so each choice's
// result here is, bit for bit, what its all-reduce computes (the same casts, the same division,
// the same addition as distributed/data_parallel.cpp; tests TwoRanksDDP.EachReduceDtypeIs...).
// Training itself steps on the FP32 average (DDP's default) with SGD lr 0.05 momentum 0.9; the
// GradScaler (PyTorch's defaults) sets the scale S the gradients carry.
// Per choice: bytes all-reduced per step (gradients only); of the ranks' nonzero gradient values
// as they travel (cast, and divided where predivided), the share flushed to 0 and the share
// subnormal (fewer significant bits); the averaged elements that come out inf/NaN (the step would
// be skipped); the median and 99th percentile of the relative error of the finite averages
// against the exact one (a sum that cancels to 0 counts 100%). With the rows, each
// rank-0 gradient's fate in FP16 at scale 1 and at S from amp::GradStats.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "mixtape/mixtape.h"

using namespace mixtape;

namespace {

struct Choice {
  const char* name;
  DType dtype;
  bool predivide;
  bool scaled;  // the gradients carry S (DDP under a GradScaler); false: true units (no scaler)
};

struct Row {
  int64_t inputs = 0, flushed = 0, subnormal = 0;  // the ranks' nonzero values, as they travel
  int64_t inf = 0;                                 // averaged elements that came out inf/NaN
  double median = 0, p99 = 0;                      // relative error of the finite averages
};

double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

// What DistributedDataParallel's bucket does with the two ranks' FP32 gradients g0, g1 (which
// carry the scale s): cast into `dt`, divide by 2 there (predivide), add, cast back, divide by 2
// in FP32 (not predivided), and the scaler's unscale by 1/s; against `ref`, the exact average.
Row apply(const Choice& c, const Tensor& g0, const Tensor& g1, double s, const std::vector<double>& ref) {
  autograd::NoGradGuard no_grad;
  const double carried = c.scaled ? s : 1.0;
  Row r;
  const double min_normal = c.dtype == DType::Float16 ? std::ldexp(1.0, -14)
                            : c.dtype == DType::BFloat16 ? std::ldexp(1.0, -126)
                                                         : static_cast<double>(std::numeric_limits<float>::min());
  std::vector<Tensor> sent;
  for (const Tensor& g : {g0, g1}) {
    Tensor t = (g * Scalar(carried / s)).to(c.dtype);  // a power of two: exact in FP32
    if (c.predivide) t = t * Scalar(0.5);
    const auto in = g.to_vector<double>(), out = t.to_vector<double>();
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] == 0) continue;
      ++r.inputs;
      if (out[i] == 0) ++r.flushed;
      else if (std::abs(out[i]) < min_normal) ++r.subnormal;
    }
    sent.push_back(t);
  }
  Tensor avg = (sent[0] + sent[1]).to(DType::Float64);
  if (!c.predivide) avg = avg * Scalar(0.5);
  const auto v = (avg * Scalar(1.0 / carried)).to_vector<double>();
  std::vector<double> err;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isinf(v[i]) || std::isnan(v[i])) ++r.inf;
    else if (ref[i] != 0) err.push_back(std::abs(v[i] - ref[i]) / std::abs(ref[i]));
  }
  r.median = percentile(err, 0.5);
  r.p99 = percentile(err, 0.99);
  return r;
}

std::vector<int> parse_steps(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::atoi(item.c_str()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 450;  // one epoch has 468 batches of 128
  std::vector<int> at{0, 100, 450};
  std::string dir = data::default_fashion_mnist_dir();
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ddp_reduce_precision: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(next("--steps"));
    else if (!std::strcmp(argv[i], "--at")) at = parse_steps(next("--at"));
    else if (!std::strcmp(argv[i], "--data")) dir = next("--data");
    else {
      std::fprintf(stderr, "ddp_reduce_precision: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  auto train = data::load_fashion_mnist(dir, true);
  data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .seed = 0, .drop_last = true, .prefetch = 0,
                                  .transform = data::normalize({0.2860f}, {0.3530f})});
  manual_seed(0);
  auto model = std::make_shared<models::SmallCNN>(10, 1);
  model->train();
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::GradScaler scaler;
  const auto params = model->named_parameters();
  int64_t numel = 0;
  for (const auto& [n, p] : params) numel += p.numel();
  const std::vector<Choice> choices{
      {"FP32 (default)", DType::Float32, true, true},
      {"BF16, predivided", DType::BFloat16, true, true},
      {"FP16 cast, divided, no scaler (fp16_compress_hook)", DType::Float16, true, false},
      {"FP16 cast, divided, at S (fp16_compress_hook under a scaler)", DType::Float16, true, true},
      {"FP16 loss-scaled: summed at S, divided after", DType::Float16, false, true},
  };
  std::printf("SmallCNN, %lld gradients, Fashion-MNIST, batch 128 = 2 ranks x 64, FP16 autocast + GradScaler\n",
              static_cast<long long>(numel));
  int step = 0;
  for (const data::Batch& batch : loader) {
    if (step > steps) break;
    const double s = scaler.get_scale();
    // Each rank's gradient (carrying S), flattened into one FP32 vector.
    std::vector<Tensor> per_rank;
    for (int r = 0; r < 2; ++r) {
      opt.zero_grad();
      Tensor loss;
      {
        amp::AutocastGuard guard(DeviceType::CPU, DType::Float16);
        loss = cross_entropy(model->forward(batch.data.narrow(0, 64 * r, 64)), batch.target.narrow(0, 64 * r, 64));
      }
      scaler.scale(loss).backward();
      std::vector<Tensor> flat;
      for (const auto& [n, p] : params) flat.push_back(p.grad().reshape({p.numel()}));
      per_rank.push_back(cat(flat, 0));
    }
    if (std::find(at.begin(), at.end(), step) != at.end()) {
      std::vector<double> ref;
      {
        const auto v0 = per_rank[0].to_vector<double>(), v1 = per_rank[1].to_vector<double>();
        for (size_t i = 0; i < v0.size(); ++i) ref.push_back((v0[i] + v1[i]) / 2 / s);  // exact in f64
      }
      amp::GradStats stats(s);
      stats.add("rank 0", per_rank[0], s);
      const auto& f = stats.stats().front();
      std::printf("\nstep %d, S = %g: rank 0's gradients in FP16: at scale 1 %.3f%% flushed, %.3f%% subnormal; at S "
                  "%.3f%% flushed, %.3f%% subnormal, %.4f%% overflow (GradStats)\n",
                  step, s, 100 * f.unscaled.flushed_frac(), 100 * f.unscaled.subnormal_frac(),
                  100 * f.scaled.flushed_frac(), 100 * f.scaled.subnormal_frac(), 100 * f.scaled.overflow_frac());
      std::printf("| reduction | bytes/step | sent values flushed | sent subnormal | inf (skip) | median rel. err | p99 rel. err |\n");
      std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
      for (const Choice& c : choices) {
        const Row r = apply(c, per_rank[0], per_rank[1], s, ref);
        const double nz = static_cast<double>(r.inputs);
        std::printf("| %s | %lld | %.3f%% | %.3f%% | %lld | %.2e | %.2e |\n", c.name,
                    static_cast<long long>(numel * static_cast<int64_t>(element_size(c.dtype))),
                    100.0 * static_cast<double>(r.flushed) / nz, 100.0 * static_cast<double>(r.subnormal) / nz,
                    static_cast<long long>(r.inf), r.median, r.p99);
      }
    }
    // The step: DDP's default, the FP32 average.
    {
      autograd::NoGradGuard no_grad;
      const Tensor avg = (per_rank[0] + per_rank[1]) * Scalar(0.5);
      int64_t off = 0;
      for (const auto& [n, p] : params) {
        p.grad().copy_(avg.narrow(0, off, p.numel()).view(p.sizes()));
        off += p.numel();
      }
    }
    scaler.step(opt);
    scaler.update();
    ++step;
  }
  return 0;
}
