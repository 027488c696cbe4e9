// examples/train_fashion_mnist.cpp — the main job: train a CNN on Fashion-MNIST from C++ and
// report test accuracy. Reads Debian's dataset-fashion-mnist IDX files (or the ImageFolder
// export_images makes of them); writes per-step metrics (CSV), a summary (JSON) and the curves
// as a picture (SVG: train/test loss and accuracy per epoch, and under --amp fp16 the loss scale
// with the skipped steps; svg_plot.h); with --save, a checkpoint after every epoch that --resume
// continues bit-identically (same thread count).
//
//   train_fashion_mnist --model smallcnn --epochs 3 --batch-size 128 --lr 0.05 --momentum 0.9
//   train_fashion_mnist --epochs 2 --save ck.safetensors && train_fashion_mnist --epochs 3 --resume ck.safetensors
//   train_fashion_mnist --device cuda --amp fp16        # on a GPU (auto: CUDA when one is usable)
//   train_fashion_mnist --device cuda --amp fp16 --cuda-graph   # each step replayed as a CUDA graph
//   train_fashion_mnist --amp fp8                       # FP8 GEMMs (delayed scaling, HYBRID), CPU or CUDA
//   mpirun -np 2 train_fashion_mnist --shard-optimizer  # ZeRO-1: each rank keeps 1/2 of the optimizer state
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include <mixtape/mixtape.h>

#include "amp/fp8_autocast.h"
#include "amp/grad_scaler.h"
#include "core/cuda_api.h"
#include "data/device_prefetcher.h"
#include "distributed/state_agreement.h"
#include "distributed/zero_redundancy.h"
#include "ops/cpu/blas.h"
#include "svg_plot.h"
#if MIXTAPE_WITH_CUDA
#include "graphed_training.h"
#endif

using namespace mixtape;
using Clock = std::chrono::steady_clock;

namespace {

struct Config {
  std::string model = "smallcnn";
  std::string optimizer = "sgd";
  std::string schedule = "none";
  int epochs = 3;
  int64_t batch_size = 128;
  double lr = 0.05;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
  uint64_t seed = 0;
  int threads = 0;
  std::string data_dir = data::default_fashion_mnist_dir();
  std::string metrics_file = "out/fashion_mnist/metrics.csv";
  std::string summary_file = "out/fashion_mnist/summary.json";
  std::string curves_file;  // "" = curves.svg beside the metrics CSV
  int64_t limit_train = 0;  // 0 = all
  int64_t limit_test = 0;
  bool augment = false;
  int log_every = 50;
  std::string save_path;    // checkpoint after every epoch ("" = none)
  std::string resume_path;  // checkpoint to continue from ("" = start fresh)
  std::string amp = "off";  // off | fp16 | bf16 | fp8 | fp8-current | mxfp8
  bool master_weights = false;
  int accumulate = 1;
  bool checkpoint_activations = false;
  std::string device = "cpu";  // cpu | cuda | cuda:N | auto
  bool cuda_graph = false;     // replay each training step as a CUDA graph (examples/graphed_training.h)
  bool allow_nonfinite_loss = false;  // go on past a NaN/inf loss that no scaler handles
  // Under --amp fp16: stop once this many optimizer steps in a row were skipped (0 = never).
  // From the initial scale 2^16, 40 halvings reach 2^-24, FP16's smallest subnormal: gradients
  // that still overflow are inf or NaN at any scale, and a healthy run's longest streak (the
  // first steps finding a scale that fits) is about 16.
  int max_skipped_steps = 40;
  // Under mpirun (docs/DISTRIBUTED.md): ZeRO-1, the reduction's dtype, gradients in the buckets.
  bool shard_optimizer = false;
  std::string reduce_dtype = "f32";  // f32 | bf16 | f16
  bool gradient_as_bucket_view = false;
};

// --device: auto is CUDA when a GPU is usable, else the CPU; cuda without one names the reason.
Device pick_device(const std::string& d) {
  if (d == "auto") return cuda::is_available() ? Device::CUDA(0) : Device::CPU();
  Device dev = Device::parse(d);
  if (dev.is_cuda()) cuda::check_available("train_fashion_mnist --device");
  return dev;
}

// --amp: the autocast dtype (none for off). The FP8 modes run every op but the GEMMs under BF16
// autocast (amp/fp8_autocast.h).
std::optional<DType> amp_dtype(const Config& c) {
  if (c.amp == "off") return std::nullopt;
  if (c.amp == "fp16") return DType::Float16;
  if (c.amp == "bf16" || c.amp == "fp8" || c.amp == "fp8-current" || c.amp == "mxfp8") return DType::BFloat16;
  MT_ERROR("unknown --amp '", c.amp, "' (off, fp16, bf16, fp8, fp8-current, mxfp8)");
}

// --amp fp8 (delayed scaling, HYBRID: Transformer Engine's default), fp8-current (per-tensor
// scales from this step's amax, HYBRID) and mxfp8 (E8M0 scales per 32 values, rounded up); none
// for the other modes. The recipes keep TE's defaults (amp/fp8_recipe.h).
std::optional<amp::Fp8Recipe> fp8_recipe(const Config& c) {
  if (c.amp == "fp8") return amp::DelayedScaling{};
  if (c.amp == "fp8-current") return amp::CurrentScaling{};
  if (c.amp == "mxfp8") return amp::MXFP8BlockScaling{};
  return std::nullopt;
}

// --reduce-dtype: the gradient reduction's dtype (DataParallelOptions::reduce_dtype); f32 is
// the default reduction (FP32 buckets for 16-bit gradients, FP32 gradients in their own).
std::optional<DType> reduce_dtype(const Config& c) {
  if (c.reduce_dtype == "f32") return std::nullopt;
  if (c.reduce_dtype == "bf16") return DType::BFloat16;
  if (c.reduce_dtype == "f16") return DType::Float16;
  MT_ERROR("unknown --reduce-dtype '", c.reduce_dtype, "' (f32, bf16, f16)");
}

// The forward's precision: autocast to FP16/BF16, or an FP8 region (which opens BF16 autocast
// itself) with its delayed-scaling metadata and, under mpirun, the amax all-reduce (max).
struct Precision {
  std::optional<DType> autocast;
  std::optional<amp::Fp8Recipe> fp8;
  amp::Fp8Metas* metas = nullptr;  // DelayedScaling only
  amp::AmaxReducer amax_reducer;
};

// One forward's region. `update_scales`: the delayed recipe's once-per-optimizer-step update
// (the first micro-batch of a step); false for the later micro-batches and for evaluation.
class PrecisionRegion {
 public:
  PrecisionRegion(const Precision& p, DeviceType device, bool update_scales) {
    if (p.fp8)
      fp8_.emplace(*p.fp8, p.metas,
                   amp::Fp8AutocastOptions{.output_dtype = DType::BFloat16, .amax_reducer = p.amax_reducer,
                                           .update_scales = update_scales},
                   device);
    else if (p.autocast)
      ac_.emplace(device, *p.autocast);
  }

 private:
  std::optional<amp::AutocastGuard> ac_;
  std::optional<amp::Fp8Autocast> fp8_;
};

// The options a resumed run must share with the run that saved the checkpoint, or it would
// silently train something else. (--model is checked tensor by tensor by restore_checkpoint,
// which names the first mismatch; --epochs may grow.) --lr, --momentum, --nesterov and
// --weight-decay come back with the optimizer's state, so a new value would be ignored: they
// are refused, naming both values, rather than silently replaced. Keys are the option names.
nlohmann::json resume_relevant(const Config& c) {
  return {{"optimizer", c.optimizer}, {"schedule", c.schedule},    {"batch-size", c.batch_size},
          {"seed", c.seed},           {"augment", c.augment},      {"limit", c.limit_train},
          {"data", c.data_dir},       {"amp", c.amp},              {"master-weights", c.master_weights},
          {"accumulate", c.accumulate}, {"lr", c.lr},              {"momentum", c.momentum},
          {"nesterov", c.nesterov},   {"weight-decay", c.weight_decay}};
}

void check_resume_config(const Config& c, const nn::Checkpoint& ck) {
  auto it = ck.progress.extra.find("config");
  if (it == ck.progress.extra.end()) return;  // a checkpoint written by other code
  nlohmann::json saved = nlohmann::json::parse(it->second), now = resume_relevant(c);
  // Checkpoints written before the keys were option names.
  for (auto [old_key, key] : {std::pair{"batch_size", "batch-size"}, {"limit_train", "limit"}, {"master_weights", "master-weights"}})
    if (saved.contains(old_key)) saved[key] = saved[old_key];
  for (auto& [key, value] : now.items())
    if (saved.contains(key) && saved[key] != value)
      MT_ERROR("--resume '", ck.path, "' was saved with --", key, " ", saved[key].dump(), ", this run has ",
               value.dump(), "; resume with the same options",
               key == "lr" || key == "momentum" || key == "nesterov" || key == "weight-decay"
                   ? " (the optimizer's state carries --" + key + " over; a new value is not applied)"
                   : "");
}

// The dataset, IDX or ImageFolder (data::load_fashion_mnist), with the CLI's error for a missing one.
std::shared_ptr<data::TensorDataset> load_split(const Config& c, bool train, int64_t limit) {
  if (!std::filesystem::is_directory(c.data_dir))
    MT_ERROR("the dataset folder '", c.data_dir, "' does not exist: install Debian's package with "
             "`apt-get install dataset-fashion-mnist`, or pass --data DIR (a folder with the IDX files, or an "
             "ImageFolder with train/ and test/ written by export_images) or set MIXTAPE_FASHION_MNIST=DIR");
  return data::load_fashion_mnist(c.data_dir, train, limit);
}

// One rank's share of the test set for a sharded evaluation: indices rank, rank + world, ...
// (no padding, unlike DistributedSampler, so every test image is counted exactly once).
class StridedShard final : public data::Sampler {
 public:
  StridedShard(int64_t n, int world, int rank) : n_(n), world_(world), rank_(rank) {}
  std::vector<int64_t> indices(int64_t) const override {
    std::vector<int64_t> out;
    for (int64_t i = rank_; i < n_; i += world_) out.push_back(i);
    return out;
  }
  int64_t size() const override { return n_ > rank_ ? (n_ - rank_ + world_ - 1) / world_ : 0; }

 private:
  int64_t n_;
  int world_, rank_;
};

// Every rank must run the same configuration (an MPMD launch could pass different options):
// `mine` holds every option registered as Scope::Computation (main), and the first option that
// differs is named with both values.
void check_same_config(distributed::ProcessGroup& pg, const nlohmann::json& mine) {
  auto all = pg.all_gather_string(mine.dump());
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    nlohmann::json other = nlohmann::json::parse(all[r]), first = nlohmann::json::parse(all[0]);
    for (auto& [key, value] : first.items())
      if (!other.contains(key) || other[key] != value)
        MT_ERROR("rank ", r, " was started with --", key, " ", other.contains(key) ? other[key].dump() : "(none)",
                 ", rank 0 with ", value.dump(), ": every rank must get the same options");
    for (auto& [key, value] : other.items())
      if (!first.contains(key))
        MT_ERROR("rank ", r, " was started with --", key, " ", value.dump(), ", rank 0 without it: every rank must "
                 "get the same options");
  }
}

// Training progress on stderr: a bar redrawn in place when stderr is a terminal; otherwise plain
// lines on stdout every --log-every steps (logs and CI output stay readable).
class Progress {
 public:
  Progress(int log_every, int64_t total_steps, bool shown = true)
      : tty_(shown && ::isatty(STDERR_FILENO) == 1), log_every_(log_every), total_steps_(total_steps) {}

  // After global step `step` (1-based) of `total_steps_`; `rate` is images/s so far in this
  // process, `steps_per_s` likewise for the ETA.
  void update(int epoch, int epochs, int64_t step_in_epoch, int64_t steps_per_epoch, int64_t step, double loss,
              double lr, double rate, double steps_per_s) {
    const double eta = steps_per_s > 0 ? static_cast<double>(total_steps_ - step) / steps_per_s : 0.0;
    if (tty_) {
      auto now = Clock::now();
      if (step_in_epoch != steps_per_epoch && now - last_draw_ < std::chrono::milliseconds(100)) return;
      last_draw_ = now;
      const int width = 24;
      int filled = static_cast<int>(width * step_in_epoch / std::max<int64_t>(steps_per_epoch, 1));
      std::ostringstream os;
      os << "\r\033[K" << "epoch " << epoch << "/" << epochs << " [" << std::string(filled, '=')
         << std::string(width - filled, ' ') << "] " << step_in_epoch << "/" << steps_per_epoch << "  loss "
         << std::fixed << std::setprecision(4) << loss << "  " << std::setprecision(0) << rate << " img/s  ETA "
         << clock_str(eta);
      std::cerr << os.str() << std::flush;
      drawn_ = true;
    } else if (log_every_ > 0 && step % log_every_ == 0) {
      std::cout << "  epoch " << epoch << " step " << step << "/" << total_steps_ << "  loss " << std::fixed
                << std::setprecision(4) << loss << "  lr " << std::setprecision(5) << lr << "  "
                << std::setprecision(0) << rate << " img/s  ETA " << clock_str(eta) << std::defaultfloat << std::endl;
    }
  }
  // Ends the bar's line before other output.
  void end_line() {
    if (drawn_) std::cerr << "\n";
    drawn_ = false;
  }

 private:
  static std::string clock_str(double seconds) {
    int64_t s = static_cast<int64_t>(seconds + 0.5);
    std::ostringstream os;
    if (s >= 3600) os << s / 3600 << ":" << std::setw(2) << std::setfill('0') << (s / 60) % 60;
    else os << s / 60;
    os << ":" << std::setw(2) << std::setfill('0') << s % 60;
    return os.str();
  }
  bool tty_;
  int log_every_;
  int64_t total_steps_;
  bool drawn_ = false;
  Clock::time_point last_draw_{};
};

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  if (name == "smallcnn") return std::make_shared<models::SmallCNN>(10, 1);
  if (name == "lenet5" || name == "lenet") return std::make_shared<models::LeNet5>(10, 1);
  if (name == "mlp") return std::make_shared<models::MLP>(784, std::vector<int64_t>{256, 128}, 10);
  if (name == "resnet8") return std::make_shared<models::ResNet>(8, 10, 1);
  if (name == "resnet20") return std::make_shared<models::ResNet>(20, 10, 1);
  MT_ERROR("unknown --model '", name, "' (smallcnn, lenet5, mlp, resnet8, resnet20)");
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Config& c, std::vector<optim::ParamGroup> params) {
  if (c.optimizer == "sgd")
    return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = c.lr, .momentum = c.momentum,
                                                                  .weight_decay = c.weight_decay, .nesterov = c.nesterov});
  if (c.optimizer == "adam")
    return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  if (c.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  MT_ERROR("unknown --optimizer '", c.optimizer, "' (sgd, adam, adamw)");
}

struct EvalResult {
  double loss = 0, accuracy = 0;
};

// Under the training's precision, if any (a 16-bit model needs it: its weights are 16-bit; FP8
// evaluates with the scales of the last step, updating none).
// With several ranks each evaluates its shard and the sums are added over the ranks.
EvalResult evaluate(nn::Module& model, data::DataLoader& loader, const Precision& precision, Device device,
                    distributed::ProcessGroup& pg) {
  model.eval();
  NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  data::DevicePrefetcher batches(loader, device);  // CUDA: the next batch's copy overlaps this one
  for (const data::DeviceBatch& db : batches) {
    const data::Batch& b = db.host;
    Tensor logits;
    {
      PrecisionRegion region(precision, device.type(), /*update_scales=*/false);
      logits = model(db.device.data);
      loss_sum += cross_entropy(logits, db.device.target, {}, -100, Reduction::Sum).item<double>();
    }
    Tensor pred = argmax(logits, 1);
    auto p = pred.to_vector<int64_t>(), y = b.target.to_vector<int64_t>();
    for (size_t i = 0; i < p.size(); ++i) correct += p[i] == y[i];
    seen += b.target.size(0);
  }
  model.train();
  if (pg.world_size() > 1) {
    Tensor sums = tensor({loss_sum, static_cast<double>(correct), static_cast<double>(seen)}, {3},
                         TensorOptions(DType::Float64));
    pg.all_reduce(sums);
    auto v = sums.to_vector<double>();
    loss_sum = v[0], correct = static_cast<int64_t>(v[1]), seen = static_cast<int64_t>(v[2]);
  }
  return {loss_sum / static_cast<double>(seen), static_cast<double>(correct) / static_cast<double>(seen)};
}

// --curves, or curves.svg in the metrics CSV's folder.
std::string curves_path(const Config& c) {
  if (!c.curves_file.empty()) return c.curves_file;
  return (std::filesystem::path(c.metrics_file).parent_path() / "curves.svg").string();
}

// What the curves show of each optimizer step this process ran (the CSV has the same rows).
struct StepRecord {
  int64_t step;
  double loss, scale;
  bool skipped;
};

// The training curves: loss (every step this process ran, and per epoch train and test), accuracy
// per epoch, and with a loss scaler the scale per step (log2 axis) with the skipped steps marked.
// `epochs` is the per-epoch history, a resumed run's earlier epochs included.
svg::Figure training_curves(const Config& c, const nlohmann::json& epochs, const std::vector<StepRecord>& steps,
                            int64_t steps_per_epoch, bool scaler_on, double test_accuracy) {
  std::ostringstream title;
  title << c.model << " on Fashion-MNIST: " << c.epochs << (c.epochs == 1 ? " epoch, " : " epochs, ") << c.optimizer
        << " lr " << c.lr
        << (c.amp == "off" ? "" : ", AMP " + c.amp) << "; test accuracy " << std::fixed << std::setprecision(2)
        << 100 * test_accuracy << "%";
  svg::Figure f{title.str(), {}};
  const double spe = static_cast<double>(steps_per_epoch);
  const std::string train_color = "#1f77b4", test_color = "#d62728";

  svg::Plot loss{"Loss", {"epoch"}, {"cross-entropy loss"}};
  loss.x.lo = 0, loss.x.hi = c.epochs;
  loss.y.include_zero = true;
  svg::Series per_step{"train, per step", {}, {}, svg::Style::Line, train_color, 'o', 0.8, 0.35};
  for (const StepRecord& r : steps) {
    per_step.x.push_back(static_cast<double>(r.step) / spe);
    per_step.y.push_back(r.loss);
  }
  svg::Series train_loss{"train, epoch mean", {}, {}, svg::Style::LineMarkers, train_color};
  svg::Series test_loss{"test", {}, {}, svg::Style::LineMarkers, test_color, 's'};
  svg::Plot acc{"Accuracy", {"epoch"}, {"accuracy (%)"}};
  acc.x.lo = 0, acc.x.hi = c.epochs;
  acc.height = 220;
  svg::Series train_acc{"train (during the epoch)", {}, {}, svg::Style::LineMarkers, train_color};
  svg::Series test_acc{"test (after the epoch)", {}, {}, svg::Style::LineMarkers, test_color, 's'};
  for (const auto& e : epochs) {
    const double x = e.value("epoch", 0);
    train_loss.x.push_back(x), train_loss.y.push_back(e.value("train_loss", std::nan("")));
    test_loss.x.push_back(x), test_loss.y.push_back(e.value("test_loss", std::nan("")));
    train_acc.x.push_back(x), train_acc.y.push_back(100 * e.value("train_accuracy", std::nan("")));
    test_acc.x.push_back(x), test_acc.y.push_back(100 * e.value("test_accuracy", std::nan("")));
  }
  loss.series = {per_step, train_loss, test_loss};
  acc.series = {train_acc, test_acc};
  f.plots = {loss, acc};

  if (scaler_on) {
    int64_t skipped = 0;
    svg::Series scale{"loss scale S", {}, {}, svg::Style::Steps, "#2ca02c"};
    svg::Series skips{"skipped step (inf/NaN gradient;\nS is halved)", {}, {}, svg::Style::Markers, test_color, 'x'};
    for (const StepRecord& r : steps) {
      scale.x.push_back(static_cast<double>(r.step)), scale.y.push_back(r.scale);
      if (r.skipped) skips.x.push_back(static_cast<double>(r.step)), skips.y.push_back(r.scale), ++skipped;
    }
    svg::Plot sp{"Dynamic loss scaling (FP16): " + std::to_string(skipped) + " skipped " +
                     (skipped == 1 ? "step" : "steps"),
                 {"optimizer step"}, {"loss scale", svg::Scale::Log2}};
    if (!steps.empty()) {
      sp.x.lo = static_cast<double>(steps.front().step - 1);
      sp.x.hi = static_cast<double>(steps.back().step);
    }
    sp.series = {scale, skips};
    sp.height = 200;
    f.plots.push_back(sp);
  }
  return f;
}

// Every rank's state at the start, compared with rank 0's before the first step: the epoch and
// step it starts from, the data it loaded, and every tensor of the model, optimizer, schedule,
// loss scaler and RNG (a digest each). Each rank restores --resume from its own file (node-local
// copies), so a rank with another epoch, or other weights, is an error naming it and the first
// item that differs, instead of a hang or a silently diverged replica.
void check_same_start(distributed::ProcessGroup& pg, const Config& c, bool resumed, int epoch, int64_t step,
                      const data::TensorDataset& train, const data::TensorDataset& test, const nn::TrainingState& state) {
  distributed::AgreementItems items = {{"epoch", std::to_string(epoch)},
                                       {"step", std::to_string(step)},
                                       {"training images", distributed::tensor_digest(train.data())},
                                       {"training labels", distributed::tensor_digest(train.targets())},
                                       {"test images", distributed::tensor_digest(test.data())},
                                       {"test labels", distributed::tensor_digest(test.targets())}};
  const StateDict all = nn::state_tensors(state);
  for (const char* section : {"model.", "optim.", "sched.", "amp.", "fp8.", "rng."})  // model first: the likeliest to differ
    for (const auto& [name, t] : all)
      if (name.rfind(section, 0) == 0) items.emplace_back("tensor '" + name + "'", distributed::tensor_digest(t));
  distributed::check_same_on_all_ranks(
      pg, items, "starting state",
      resumed ? "every rank restores --resume '" + c.resume_path + "' itself: give every rank the same checkpoint"
              : "every rank must load the same --data");
}

// --cuda-graph replays the training step as CUDA graphs: a CUDA device (`at`: the device once
// picked, or before that the CPU when --device says so) and one process.
void check_cuda_graph(const Config& c, std::optional<Device> at, int world) {
  if (at && !at->is_cuda())
    MT_ERROR("--cuda-graph replays the training step as a CUDA graph and needs --device cuda (or auto with a usable "
             "GPU); this run is on ", at->str(),
             c.device == "auto" ? " (--device auto: " + cuda::unavailable_reason() + ")" : "");
  // Under mpirun the graph holds DDP's NCCL all-reduces (docs/DISTRIBUTED.md, "DDP in a CUDA graph").
  // One graph is replayed for every micro-batch, but DDP reduces at the group's last one only.
  MT_CHECK(world == 1 || c.accumulate == 1, "--cuda-graph with --accumulate ", c.accumulate, " is not supported with "
           "several ranks (", world, " under mpirun): the captured micro-step is replayed for every micro-batch, but "
           "DistributedDataParallel reduces at the last one only; use --accumulate 1, or leave --cuda-graph out");
}

int run(const Config& c, const nlohmann::json& computation_options) {
  // mpirun -np N: N ranks, each training on its share of every global batch (docs/DISTRIBUTED.md);
  // without mpirun a world of one, and everything below is the single-process job.
  distributed::ProcessGroup& pg = distributed::init_process_group();
  const int world = pg.world_size(), rank = pg.rank();
  const bool lead = rank == 0;  // prints, writes metrics and checkpoints
  if (c.threads > 0) {
    set_num_threads(c.threads);
  } else if (world > 1) {
    // The ranks on this host share its cores (Open MPI announces how many run here).
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int here = local ? std::max(1, std::atoi(local)) : 1;
    set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / here));
  }
  if (!lead) std::cout.setstate(std::ios::failbit);  // rank 0 alone reports
  if (world > 1) {
    check_same_config(pg, computation_options);
    MT_CHECK(c.batch_size % world == 0, "--batch-size ", c.batch_size, " is the global batch and must divide evenly "
             "over the ", world, " ranks");
  }
  const int64_t local_batch = c.batch_size / world;
  const std::optional<amp::Fp8Recipe> fp8 = fp8_recipe(c);
  if (world == 1 && (c.shard_optimizer || c.reduce_dtype != "f32" || c.gradient_as_bucket_view))
    std::cout << "note: --shard-optimizer, --reduce-dtype and --gradient-as-bucket-view change how several ranks "
                 "share the gradients and the optimizer state; one process has nothing to share, so they do "
                 "nothing here (run under mpirun -np N)\n";
  if (c.cuda_graph) check_cuda_graph(c, c.device == "cpu" ? std::optional<Device>(Device::CPU()) : std::nullopt, world);
  manual_seed(c.seed);
  const std::string curves = curves_path(c);
  for (const std::string& f : {c.metrics_file, c.summary_file, c.save_path, curves}) {
    auto parent = std::filesystem::path(f).parent_path();
    if (lead && !f.empty() && !parent.empty()) std::filesystem::create_directories(parent);
  }
  // A save killed midway leaves its temporary (nn::save_checkpoint's one name, path.tmp): gone
  // at the start, not only at the next save.
  if (lead && !c.save_path.empty()) std::filesystem::remove(c.save_path + ".tmp");
  // The picture is written last: a folder it cannot go to fails now, not after the training.
  if (lead) {
    auto parent = std::filesystem::path(curves).parent_path();
    MT_CHECK(::access(parent.empty() ? "." : parent.c_str(), W_OK) == 0, "cannot write --curves '", curves,
             "': its folder is not writable");
  }
  // Read (not yet apply) the checkpoint first: a wrong file fails before minutes of data loading.
  std::optional<nn::Checkpoint> resume;
  if (!c.resume_path.empty()) {
    resume = nn::read_checkpoint(c.resume_path);
    check_resume_config(c, *resume);
  }

  auto train_set = load_split(c, true, c.limit_train);
  auto test_set = load_split(c, false, c.limit_test);
  // Fashion-MNIST pixel statistics over the training set.
  data::Transform norm = data::normalize({0.2860f}, {0.3530f});
  data::Transform train_tf = c.augment ? data::compose({data::random_crop(28, 2), data::random_horizontal_flip(), norm}) : norm;
  // The loader's shuffle order and augmentation draws are functions of (seed, epoch): restoring
  // its epoch restores both streams.
  // With N ranks, DistributedSampler gives each its shard of the epoch's permutation (the same
  // permutation a single process shuffles with, so one rank trains exactly as before); the
  // augmentation draws differ by rank.
  auto sampler = std::make_shared<data::DistributedSampler>(
      train_set->size(), world, rank, data::DistributedSamplerOptions{.shuffle = true, .seed = c.seed});
  data::DataLoader train_loader(train_set, {.batch_size = local_batch,
                                            .seed = c.seed ^ (static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull),
                                            .drop_last = true, .prefetch = 2, .transform = train_tf,
                                            .sampler = sampler});
  data::DataLoader test_loader(test_set, {.batch_size = 500, .prefetch = 2, .transform = norm,
                                          .sampler = std::make_shared<StridedShard>(test_set->size(), world, rank)});

  auto model = make_model(c.model);
  if (c.model == "mlp") {
    // The MLP takes flat vectors: flatten inside a wrapper so the loop below stays the same.
    auto seq = std::make_shared<nn::Sequential>();
    seq->push_back(std::make_shared<nn::Flatten>());
    seq->push_back(model);
    model = seq;
  }
  const std::optional<DType> autocast = amp_dtype(c);
  MT_CHECK(!c.master_weights || autocast,
           "--master-weights keeps FP32 masters of a 16-bit model; it needs --amp fp16, bf16, fp8, fp8-current or "
           "mxfp8 (the FP8 modes make the model BF16)");
  MT_CHECK(c.accumulate >= 1, "--accumulate must be >= 1, got ", c.accumulate);
  if (c.checkpoint_activations) {
    auto* resnet = dynamic_cast<models::ResNet*>(model.get());
    MT_CHECK(resnet, "--checkpoint-activations is supported for resnet8 and resnet20, not ", c.model);
    resnet->checkpoint_activations = true;
  }
  // --master-weights: the model itself becomes 16-bit (BatchNorm stays FP32); the optimizer then
  // keeps an FP32 master and FP32 state for every 16-bit parameter.
  if (c.master_weights) model->to(*autocast);
  Device device = pick_device(c.device);
  // Several ranks on CUDA: one device each, by local rank (--device cuda:N pins one for all).
  if (world > 1 && device.is_cuda() && c.device.find(':') == std::string::npos) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    device = Device::CUDA((local ? std::atoi(local) : rank) % cuda::device_count());
    const char* here = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int ranks_here = here ? std::atoi(here) : world;
    MT_CHECK(std::string(pg.cuda_backend_name()) != "nccl" || ranks_here <= cuda::device_count(),
             "--device cuda with NCCL needs one CUDA device per rank: ", ranks_here, " ranks on this host, ",
             cuda::device_count(), " device(s) (run fewer ranks, or MIXTAPE_DIST_CUDA=host to reduce through host memory)");
  }
  if (c.cuda_graph) check_cuda_graph(c, device, world);
  model->to(device);  // before the optimizer, which keeps its state (and FP32 masters) beside the parameters
  // Delayed scaling's metadata: one meta per linear/conv weight, on the weights' device (so made
  // after the to() calls). Under mpirun every rank's amaxes are all-reduced with max before each
  // scale update, so all ranks keep the same scales (as Transformer Engine does).
  std::optional<amp::Fp8Metas> fp8_metas;
  if (fp8 && std::holds_alternative<amp::DelayedScaling>(*fp8))
    fp8_metas.emplace(std::get<amp::DelayedScaling>(*fp8), model->named_parameters());
  Precision precision{autocast, fp8, fp8_metas ? &*fp8_metas : nullptr, {}};
  if (fp8_metas && world > 1)
    precision.amax_reducer = [&pg](Tensor& amaxes) { pg.all_reduce(amaxes, distributed::ReduceOp::Max); };
  // The training batches on the device: on CUDA the next batch's copy (pinned staging, a copy
  // stream) overlaps the current step (docs/CUDA.md, "The data path"); on the CPU they pass through.
  data::DevicePrefetcher train_batches(train_loader, device);
  // Several ranks: rank 0's initial weights everywhere, gradients averaged during backward.
  // --reduce-dtype f16 under --amp fp16 sums the loss-scaled gradients before dividing (an
  // overflow is inf on every rank, which the scaler skips); without a scaler it divides first and
  // sums, as PyTorch's fp16_compress_hook does (docs/DISTRIBUTED.md, "Reduction precision").
  std::shared_ptr<distributed::DistributedDataParallel> ddp;
  if (world > 1) {
    distributed::DataParallelOptions ddp_options;
    ddp_options.reduce_dtype = reduce_dtype(c);
    ddp_options.predivide = !(c.reduce_dtype == "f16" && c.amp == "fp16");
    ddp_options.gradient_as_bucket_view = c.gradient_as_bucket_view;
    MT_CHECK(!(c.shard_optimizer && c.gradient_as_bucket_view), "--gradient-as-bucket-view cannot be combined with "
             "--shard-optimizer: each rank receives only its shard of the reduced gradients, which live in the "
             "optimizer's shard, not in the buckets; leave one of them out");
    ddp = std::make_shared<distributed::DistributedDataParallel>(model, pg, ddp_options);
  } else {
    reduce_dtype(c);  // an unknown name is refused on one process too
  }
  nn::Module& net = ddp ? static_cast<nn::Module&>(*ddp) : *model;  // what the training forward calls
  int64_t n_params = 0;
  for (const Tensor& p : model->parameters()) n_params += p.numel();
  // --shard-optimizer (ZeRO-1): each rank keeps and steps the optimizer state of its shard only.
  std::unique_ptr<distributed::ZeroRedundancyOptimizer> zero;
  std::unique_ptr<optim::Optimizer> unsharded;
  if (c.shard_optimizer && ddp)
    zero = std::make_unique<distributed::ZeroRedundancyOptimizer>(
        *ddp, [&c](std::vector<optim::ParamGroup> groups) { return make_optimizer(c, std::move(groups)); });
  else
    unsharded = make_optimizer(c, {optim::ParamGroup(model->parameters())});
  optim::Optimizer* const opt = zero ? &zero->optimizer() : unsharded.get();
  // Loss scaling for FP16 only: BF16 has FP32's exponent range, so its gradients do not underflow;
  // nor do FP8's, whose per-tensor scales do the scaler's work (docs/FP8.md).
  // --cuda-graph: a step that reads nothing on the host (docs/CUDA.md, "A step with no host sync").
  amp::GradScaler scaler({.enabled = c.amp == "fp16", .sync_free = c.cuda_graph});
  // Sharded, an inf in one rank's shard of the gradients must skip every rank's step.
  if (zero && scaler.is_enabled()) scaler.set_found_inf_reducer(distributed::found_inf_reducer(pg));
  // --accumulate N: one optimizer step per N micro-batches (an incomplete group at the end of an
  // epoch is dropped, so every step sees N of them).
  int64_t steps_per_epoch = train_loader.num_batches() / c.accumulate;
  if (steps_per_epoch == 0) {
    const int64_t images = train_set->size(), batches = train_loader.num_batches();
    MT_ERROR("the training set has ", images, images == 1 ? " image" : " images", "; with --batch-size ",
             c.batch_size, " and the last partial batch dropped (drop_last) an epoch has ", batches,
             batches == 1 ? " batch" : " batches", ", fewer than --accumulate ", c.accumulate, " (one step needs ",
             c.batch_size * c.accumulate, " images: use more images or a smaller --batch-size or --accumulate)");
  }
  int64_t total_steps = steps_per_epoch * c.epochs;
  std::unique_ptr<optim::LRScheduler> sched;
  if (c.schedule == "cosine")
    sched = std::make_unique<optim::WarmupCosine>(*opt, std::min<int64_t>(100, total_steps / 10), total_steps);
  else if (c.schedule != "none")
    MT_ERROR("unknown --schedule '", c.schedule, "' (cosine, none)");
  nn::TrainingState state{*model, *opt, sched.get()};
  if (scaler.is_enabled()) {
    state.amp_state = [&] { return scaler.state_dict(); };
    state.load_amp_state = [&](const StateDict& sd) { scaler.load_state_dict(sd); };
  }
  if (fp8_metas) {
    state.fp8_state = [&] { return fp8_metas->state_dict(); };
    state.load_fp8_state = [&](const StateDict& sd) { fp8_metas->load_state_dict(sd); };
  }
  // Sharded, checkpoints hold the unsharded optimizer's state_dict (so they resume on any world
  // size, or on one process): gathering it is a collective, so every rank refreshes `gathered`
  // wherever rank 0 may need it (before the restore, before the start check, after every epoch).
  StateDict gathered;
  if (zero) {
    state.optimizer_state = [&] { return gathered; };
    state.load_optimizer_state = [&](const StateDict& sd) { zero->load_state_dict(sd); };
    gathered = zero->state_dict();
  }

  int start_epoch = 0;
  int64_t step = 0;
  nlohmann::json epochs = nlohmann::json::array();  // per-epoch results, carried across resumes
  if (resume) {
    nn::restore_checkpoint(*resume, state);
    start_epoch = static_cast<int>(resume->progress.epoch);
    step = resume->progress.step;
    train_loader.set_epoch(start_epoch);
    if (auto it = resume->progress.extra.find("history"); it != resume->progress.extra.end())
      epochs = nlohmann::json::parse(it->second);
    // The state is not sharded, so any world size resumes it; only the split of each global
    // batch over the ranks (and so the exact arithmetic) follows the new world size.
    if (auto it = resume->progress.extra.find("world_size"); it != resume->progress.extra.end() &&
                                                             it->second != std::to_string(world))
      std::cout << "note: the checkpoint was written by " << it->second << " rank(s), this run has " << world
                << "; the state carries over, the per-rank split of each batch changes\n";
    if (auto it = resume->progress.extra.find("threads"); lead && it != resume->progress.extra.end() &&
                                                          it->second != std::to_string(get_num_threads()))
      std::cerr << "train_fashion_mnist: warning: the checkpoint was written with " << it->second << " threads, this run has "
                << get_num_threads() << "; results will not match an uninterrupted run bit for bit (use --threads "
                << it->second << ")\n";
  }
  if (zero) gathered = zero->state_dict();
  if (world > 1)
    check_same_start(pg, c, resume.has_value(), start_epoch, step, *train_set, *test_set, state);
#if MIXTAPE_WITH_CUDA
  // --cuda-graph: the optimizer keeps its counts and lr on the device (after the restore: they
  // start from the restored ones), and the step is replayed (examples/graphed_training.h).
  std::unique_ptr<examples::GraphedTraining> graphed;
  if (c.cuda_graph) {
    opt->set_capturable(true);
    // The forward's region as the eager loop opens it; FP8's delayed scales update at the first
    // micro-batch only, so with --accumulate that micro-batch gets a graph of its own.
    auto precision_scope = [&precision](bool update_scales, const std::function<void()>& body) {
      PrecisionRegion region(precision, DeviceType::CUDA, update_scales);
      body();
    };
    graphed = std::make_unique<examples::GraphedTraining>(net, *opt, scaler, sched.get(), precision_scope,
                                                          fp8_metas.has_value(), c.accumulate, device);
  }
#endif
  // The learning rate this run uses: the optimizer's (the schedule's base), restored from the
  // checkpoint when resuming (check_resume_config refuses a --lr that differs from it).
  const double lr_used = sched ? sched->base_lrs()[0] : opt->param_groups()[0].lr();

  std::cout << "mixtape: training " << c.model << " (" << n_params << " parameters) on Fashion-MNIST ("
            << (data::is_image_folder_split(c.data_dir) ? "ImageFolder" : "IDX") << " in " << c.data_dir << "): "
            << train_set->size() << " train / " << test_set->size() << " test images, batch " << c.batch_size << ", "
            << c.epochs << " epochs, " << c.optimizer << " lr " << lr_used << ", "
            << (device.is_cpu() ? std::to_string(get_num_threads()) + " threads (BLAS: " + cpu::blas_info_line() + ")"
                                : "on " + device.str());
  if (autocast)
    std::cout << ", AMP " << c.amp << (fp8 ? " (FP8 GEMMs: " + amp::recipe_string(*fp8) + "; BF16 autocast elsewhere)" : "")
              << (c.master_weights ? " with a 16-bit model and FP32 master weights" : "")
              << (scaler.is_enabled() ? ", dynamic loss scaling" : ", no loss scaling (" + c.amp + ")");
  if (c.accumulate > 1) std::cout << ", " << c.accumulate << " micro-batches per step";
  if (c.checkpoint_activations) std::cout << ", activation checkpointing";
  if (c.cuda_graph) std::cout << ", each step replayed as a CUDA graph";
  if (world > 1) {
    const size_t nb = ddp->bucket_layout().size();
    std::cout << ", " << world << " ranks (MPI) x " << local_batch << " images, gradients averaged in " << nb
              << (nb == 1 ? " bucket" : " buckets") << (device.is_cuda() ? std::string(" by ") + pg.cuda_backend_name() : "")
              << (c.reduce_dtype != "f32" ? " reduced in " + c.reduce_dtype : "")
              << (c.gradient_as_bucket_view ? " (gradients as bucket views)" : "")
              << (zero ? ", optimizer state sharded (ZeRO-1)" : "");
  }
  std::cout << std::endl;
  if (resume)
    std::cout << "resuming from " << c.resume_path << " after epoch " << start_epoch << " (step " << step << ")"
              << std::endl;

  std::ofstream csv;
  if (lead) {
    csv.open(c.metrics_file);
    MT_CHECK(csv.good(), "cannot write --metrics '", c.metrics_file, "'");
    csv << "step,epoch,loss,lr,images_per_s,loss_scale,skipped\n" << std::flush;
  }
  // The CSV reaches the file at every epoch's end and at least every few seconds, so a run
  // that is killed keeps its metrics up to then.
  auto csv_flushed = Clock::now();
  reset_peak_memory();
  auto t_start = Clock::now();
  double train_seconds = 0;
  int64_t images = 0, steps_run = 0, skipped_steps = 0;
  int64_t skipped_in_a_row = 0, skipping_since = 0;  // --max-skipped-steps
  Progress progress(lead ? c.log_every : 0, total_steps, lead);
  std::vector<StepRecord> step_records;  // for the curves
  step_records.reserve(static_cast<size_t>(std::max<int64_t>(total_steps - step, 0)));
  EvalResult last;
  if (!epochs.empty()) last = {epochs.back().value("test_loss", 0.0), epochs.back().value("test_accuracy", 0.0)};
  for (int epoch = start_epoch; epoch < c.epochs; ++epoch) {
    model->train();
    auto t_epoch = Clock::now();
    double loss_sum = 0;
    int64_t correct = 0, seen = 0, step_in_epoch = 0;
    int micro = 0;
    double step_loss = 0;
    int64_t step_images = 0;
    auto t_step = Clock::now();
    // One micro-batch's figures: its loss, images and correct predictions.
    auto count_micro = [&](double l, int64_t n, int64_t right) {
      // A non-finite loss with no GradScaler to skip its step: the run has diverged, and every
      // later step would only print NaN. (Under --amp fp16 the scaler skips such steps itself.)
      if (!std::isfinite(l) && !scaler.is_enabled() && !c.allow_nonfinite_loss)
        MT_ERROR("the training loss is ", l, " at step ", step + 1, " (epoch ", epoch + 1, ", batch ", seen / c.batch_size + 1,
                 "): training has diverged. Try a lower --lr (now ", c.lr, ") or a warmup (--schedule cosine). A "
                 "loss scaler does not apply here: it exists only for --amp fp16, where it skips non-finite steps, "
                 "and FP32 or BF16 runs have no scale to lower. --allow-nonfinite-loss goes on regardless.");
      step_loss += l / c.accumulate;
      step_images += n;
      loss_sum += l * static_cast<double>(n);
      correct += right;
      seen += n;
      images += n;
    };
    // One optimizer step done (its micro-batches counted): the skip counts, the CSV row, the
    // give-up rule, the curves and the progress line. `scale_now`: the scale after its update.
    auto finish_step = [&](double scale_used, bool stepped, double scale_now, double dt) {
      if (!stepped) ++skipped_steps;
      if (stepped) {
        skipped_in_a_row = 0;
      } else if (skipped_in_a_row++ == 0) {
        skipping_since = step + 1;
      }
      ++step;
      ++steps_run;
      ++step_in_epoch;
      double lr = opt->param_groups()[0].options.get("lr");
      if (lead) {
        csv << step << ',' << epoch << ',' << step_loss << ',' << lr << ',' << static_cast<double>(step_images) / dt
          << ',' << (scaler.is_enabled() ? scale_used : 1.0) << ',' << (stepped ? 0 : 1) << '\n';
        if (Clock::now() - csv_flushed > std::chrono::seconds(2)) csv.flush(), csv_flushed = Clock::now();
      }
      // A dead FP16 run: every gradient inf/NaN, the scaler halving its scale step after step
      // (towards 0) while the loop goes on. The same on every rank (the gradients are averaged).
      if (c.max_skipped_steps > 0 && skipped_in_a_row >= c.max_skipped_steps) {
        if (lead) csv.flush();
        MT_ERROR("the loss scale collapsed: ", skipped_in_a_row, " optimizer steps in a row were skipped for inf/NaN "
                 "gradients, since step ", skipping_since, " (epoch ", epoch + 1, "); the scale is now ",
                 scale_now, ": training has diverged. Try a lower --lr (now ", lr_used, ") or a warmup "
                 "(--schedule cosine); --max-skipped-steps ", c.max_skipped_steps, " is the limit (0: never stop)");
      }
      step_records.push_back({step, step_loss, scaler.is_enabled() ? scale_used : 1.0, !stepped});
      double elapsed = train_seconds + std::chrono::duration<double>(Clock::now() - t_epoch).count();
      progress.update(epoch + 1, c.epochs, step_in_epoch, steps_per_epoch, step, step_loss, lr,
                      static_cast<double>(images * world) / elapsed, static_cast<double>(steps_run) / elapsed);
      step_loss = 0;
      step_images = 0;
    };
    // The step's loss over the whole global batch: each rank's mean over its share, averaged.
    auto average_over_ranks = [&] {
      if (world == 1) return;
      Tensor sl = tensor({step_loss}, {1}, TensorOptions(DType::Float64));
      pg.all_reduce(sl, distributed::ReduceOp::Avg);
      step_loss = sl.to_vector<double>()[0];
      step_images *= world;
    };
#if MIXTAPE_WITH_CUDA
    // --cuda-graph: a step's figures are read once the next one is queued (examples/graphed_training.h).
    // A step's time is from the previous read (or its queueing) to its own read.
    int64_t queued = 0;
    auto read_graphed_step = [&] {
      const examples::GraphedStepResult r = graphed->read_oldest();
      for (size_t m = 0; m < r.losses.size(); ++m) count_micro(r.losses[m], local_batch, r.correct[m]);
      average_over_ranks();  // as the eager loop does
      const auto now = Clock::now();
      const double dt = std::chrono::duration<double>(now - t_step).count();
      t_step = now;
      finish_step(r.scale_used, !r.skipped, r.scale_after, dt);
    };
#endif
    for (const data::DeviceBatch& db : train_batches) {
      const data::Batch& b = db.host;  // what the host reads (targets for the accuracy)
#if MIXTAPE_WITH_CUDA
      if (graphed) {
        if (queued == steps_per_epoch) break;  // the incomplete last group of --accumulate
        graphed->queue_micro(db.device, micro);
        if (++micro < c.accumulate) continue;
        micro = 0;
        graphed->end_step();
        ++queued;
        if (graphed->replayed_steps() == 1)
          std::cout << "CUDA graph: the step was captured after " << examples::GraphedTraining::kWarmupSteps
                    << " eager warm-up steps; the later steps replay it" << std::endl;
        profiler::step();
        if (graphed->unread() > 1) read_graphed_step();
        continue;
      }
#endif
      if (step_in_epoch == steps_per_epoch) break;  // the incomplete last group of --accumulate
      if (micro == 0) {
        t_step = Clock::now();
        opt->zero_grad();
      }
      Tensor logits, loss;
      {
        // Forward and loss under autocast; backward outside it (as torch.amp documents). FP8's
        // delayed scales are updated once per optimizer step, by its first micro-batch.
        PrecisionRegion region(precision, device.type(), /*update_scales=*/micro == 0);
        logits = net(db.device.data);
        loss = cross_entropy(logits, db.device.target);
      }
      // Micro-batch losses are averaged: each contributes loss / N, scaled by the same S.
      {
        // Under DDP only the group's last micro-batch communicates: the others accumulate locally.
        std::optional<distributed::DistributedDataParallel::NoSync> local_only;
        if (ddp && micro + 1 < c.accumulate) local_only.emplace(*ddp);
        scaler.scale(c.accumulate > 1 ? loss / static_cast<double>(c.accumulate) : loss).backward();
      }
      const auto p = argmax(logits, 1).to_vector<int64_t>(), y = b.target.to_vector<int64_t>();
      int64_t right = 0;
      for (size_t i = 0; i < p.size(); ++i) right += p[i] == y[i];
      count_micro(loss.item<double>(), b.target.size(0), right);
      if (++micro < c.accumulate) continue;
      micro = 0;
      average_over_ranks();
      const double scale_used = scaler.get_scale();
      const bool stepped = scaler.step(*opt);  // skipped when a gradient is inf/NaN
      scaler.update();
      profiler::step();  // MIXTAPE_PROFILE=1: the table's per-step column
      if (sched) sched->step(stepped);          // a skipped step does not advance the schedule
      const double dt = std::chrono::duration<double>(Clock::now() - t_step).count();
      finish_step(scale_used, stepped, scaler.get_scale(), dt);
    }
#if MIXTAPE_WITH_CUDA
    if (graphed) {
      while (graphed->unread() > 0) read_graphed_step();  // the epoch's last step
      if (scaler.is_enabled()) scaler.poll();  // the scale for the summary; the collapse errors update() raises eagerly
    }
#endif
    progress.end_line();
    if (lead) csv.flush(), csv_flushed = Clock::now();
    double epoch_s = std::chrono::duration<double>(Clock::now() - t_epoch).count();
    train_seconds += epoch_s;
    if (world > 1) {
      Tensor sums = tensor({loss_sum, static_cast<double>(correct), static_cast<double>(seen)}, {3},
                           TensorOptions(DType::Float64));
      pg.all_reduce(sums);
      auto v = sums.to_vector<double>();
      loss_sum = v[0], correct = static_cast<int64_t>(v[1]), seen = static_cast<int64_t>(v[2]);
      ddp->sync_buffers();  // evaluate (and save) rank 0's BatchNorm statistics on every rank
    }
    last = evaluate(*model, test_loader, precision, device, pg);
    double train_acc = static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(seen, 1));
    std::cout << "epoch " << epoch + 1 << ": train loss " << std::fixed << std::setprecision(4)
              << loss_sum / static_cast<double>(std::max<int64_t>(seen, 1)) << ", train acc " << std::setprecision(2)
              << 100 * train_acc << "%, test loss " << std::setprecision(4) << last.loss << ", test acc "
              << std::setprecision(2) << 100 * last.accuracy << "%, " << std::setprecision(1) << epoch_s << " s ("
              << std::setprecision(0) << static_cast<double>(seen) / epoch_s << " images/s)" << std::defaultfloat << std::endl;
    epochs.push_back({{"epoch", epoch + 1},
                      {"train_loss", loss_sum / static_cast<double>(std::max<int64_t>(seen, 1))},
                      {"train_accuracy", train_acc},
                      {"test_loss", last.loss},
                      {"test_accuracy", last.accuracy},
                      {"seconds", epoch_s}});
    if (zero) gathered = zero->state_dict();  // on every rank: a collective
    if (lead && !c.save_path.empty()) {
      nn::TrainingProgress done{.model_name = c.model, .epoch = epoch + 1, .step = step, .data_seed = c.seed,
                                .extra = {{"config", resume_relevant(c).dump()},
                                          {"history", epochs.dump()},
                                          {"threads", std::to_string(get_num_threads())},
                                          {"world_size", std::to_string(world)}}};
      nn::save_checkpoint(c.save_path, state, done);
      std::cout << "saved checkpoint " << c.save_path << " (epoch " << epoch + 1 << ")" << std::endl;
    }
    // The checkpoint is complete before any rank goes on. On every rank, whether or not it was
    // given --save (a per-rank option: a barrier on some ranks only would pair with another
    // collective on the others).
    if (world > 1) pg.barrier();
  }
#if MIXTAPE_WITH_CUDA
  if (graphed)
    std::cout << "CUDA graph: " << graphed->replayed_steps() << " steps replayed" << std::endl;
#endif
  double wall = std::chrono::duration<double>(Clock::now() - t_start).count();
  // Optimizer state (masters and buffers) on the rank that holds the most, and what one
  // unsharded optimizer holds (the sum over the shards), per parameter.
  int64_t state_bytes = opt->state_bytes(), unsharded_bytes = state_bytes;
  if (zero) {
    unsharded_bytes = zero->optimizer_state_bytes_all_ranks();
    Tensor most = tensor({static_cast<double>(state_bytes)}, {1}, TensorOptions(DType::Float64));
    pg.all_reduce(most, distributed::ReduceOp::Max);
    state_bytes = static_cast<int64_t>(most.to_vector<double>()[0]);
  }
  if (world > 1) {
    const double np = static_cast<double>(std::max<int64_t>(n_params, 1));
    std::cout << "optimizer state per rank: " << state_bytes << " bytes (" << std::fixed << std::setprecision(2)
              << static_cast<double>(state_bytes) / np << " B/parameter)";
    if (zero)
      std::cout << ", sharded over " << world << " ranks; unsharded: " << unsharded_bytes << " bytes ("
                << static_cast<double>(unsharded_bytes) / np << " B/parameter)";
    else
      std::cout << ", unsharded (--shard-optimizer keeps about 1/" << world << " of it per rank)";
    std::cout << std::defaultfloat << std::endl;
  }
  nlohmann::json summary = {{"model", c.model},
                            {"parameters", n_params},
                            {"optimizer", c.optimizer},
                            {"epochs", c.epochs},
                            {"batch_size", c.batch_size},
                            {"seed", c.seed},
                            {"threads", get_num_threads()},
                            {"blas", cpu::blas_info_line()},
                            {"train_images", train_set->size()},
                            {"test_accuracy", last.accuracy},
                            {"test_loss", last.loss},
                            {"train_images_per_s", train_seconds > 0 ? static_cast<double>(images * world) / train_seconds : 0.0},
                            {"world_size", world},
                            {"wall_seconds", wall},
                            {"device", device.str()},
                            {"peak_bytes", memory_stats(device).peak_bytes},
                            {"amp", c.amp},
                            {"fp8_recipe", fp8 ? amp::recipe_string(*fp8) : ""},
                            {"shard_optimizer", zero != nullptr},
                            {"reduce_dtype", c.reduce_dtype},
                            {"optimizer_state_bytes_per_rank", state_bytes},
                            {"master_weights", c.master_weights},
                            {"accumulate", c.accumulate},
                            {"checkpoint_activations", c.checkpoint_activations},
                            {"skipped_steps", skipped_steps},
                            {"final_loss_scale", scaler.is_enabled() ? scaler.get_scale() : 1.0},
                            {"resumed_from_epoch", start_epoch},
                            {"per_epoch", epochs}};
  if (lead) {
    std::ofstream(c.summary_file) << summary.dump(2) << "\n";
    svg::write(curves, training_curves(c, epochs, step_records, steps_per_epoch, scaler.is_enabled(), last.accuracy));
  }
  std::cout << "test accuracy " << std::fixed << std::setprecision(2) << 100 * last.accuracy << "% after " << c.epochs
            << " epochs (" << std::setprecision(1) << wall << " s); metrics in " << c.metrics_file << ", summary in " << c.summary_file << "\n";
  std::cout << "curves (loss, accuracy" << (scaler.is_enabled() ? ", loss scale" : "") << "): " << curves
            << "  (open it in a web browser)\n";
  zero.reset();  // before ddp, which it puts in sharded mode
  ddp.reset();
  distributed::destroy_process_group();
  return 0;
}

// The command line. Every option is registered with its scope: Computation options change what
// the job computes, so under mpirun every rank must get the same value (check_same_config
// compares all of them); PerRank options only say where a rank reads or writes, or how it uses
// its own host, and may differ between ranks (what they lead to is checked instead: the data
// and the restored checkpoint, by check_same_start).
enum class Scope { Computation, PerRank };

class Options {
 public:
  explicit Options(CLI::App& app) : app_(app) {}
  template <class T>
  CLI::Option* option(const std::string& names, T& field, Scope scope, const std::string& help = "") {
    record(names, field, scope);
    return app_.add_option(names, field, help);
  }
  CLI::Option* flag(const std::string& names, bool& field, Scope scope, const std::string& help) {
    record(names, field, scope);
    return app_.add_flag(names, field, help);
  }
  // The Computation options' values, by their first name without dashes.
  nlohmann::json computation() const {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [name, value] : computation_) out[name] = value();
    return out;
  }

 private:
  template <class T>
  void record(const std::string& names, T& field, Scope scope) {
    if (scope != Scope::Computation) return;
    const std::string first = names.substr(0, names.find(','));
    computation_.emplace_back(first.substr(first.find_first_not_of('-')), [&field] { return nlohmann::json(field); });
  }
  CLI::App& app_;
  std::vector<std::pair<std::string, std::function<nlohmann::json()>>> computation_;
};

// A number option's lower bound, said plainly ("--batch-size must be >= 1, got 0"); text that
// is not a number is left to CLI11's conversion error.
CLI::Validator at_least(double low) {
  return CLI::Validator(
      [low](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || v >= low) return "";
        std::ostringstream os;
        os << "must be >= " << low << ", got " << text;
        return os.str();
      },
      ">= " + std::to_string(static_cast<long long>(low)));
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"Train a CNN on Fashion-MNIST with mixtape"};
  Options o(app);
  const auto all = Scope::Computation, mine = Scope::PerRank;
  o.option("--model", c.model, all, "smallcnn | lenet5 | mlp | resnet8 | resnet20")->capture_default_str();
  o.option("--optimizer", c.optimizer, all, "sgd | adam | adamw")->capture_default_str();
  o.option("--schedule", c.schedule, all, "cosine (linear warmup + cosine decay) | none")->capture_default_str();
  o.option("--epochs", c.epochs, all, "total epochs (with --resume: including those already done)")
      ->capture_default_str()->check(at_least(1));
  o.option("--batch-size", c.batch_size, all)->capture_default_str()->check(at_least(1));
  o.option("--lr", c.lr, all, "learning rate (with --resume: must be the checkpoint's, which the optimizer restores)")
      ->capture_default_str();
  o.option("--momentum", c.momentum, all, "SGD momentum")->capture_default_str();
  o.flag("--nesterov", c.nesterov, all, "Nesterov momentum (SGD)");
  o.option("--weight-decay", c.weight_decay, all)->capture_default_str();
  o.option("--seed", c.seed, all)->capture_default_str();
  o.option("--threads", c.threads, mine, "CPU threads (0 = all)")->capture_default_str()->check(at_least(0));
  o.option("--device", c.device, mine, "cpu | cuda | cuda:N | auto (CUDA when a GPU is usable)")->capture_default_str();
  o.option("--data", c.data_dir, mine,
           "the dataset: a folder with the Fashion-MNIST IDX files, or an ImageFolder with train/<class>/*.png "
           "and test/<class>/*.png (as export_images writes them)")
      ->capture_default_str();
  o.option("--metrics", c.metrics_file, mine,
           "per-step CSV: step, epoch, loss, lr, images/s, loss_scale, skipped (a resumed run writes the steps it "
           "runs; flushed every epoch and every few seconds)")
      ->capture_default_str();
  o.option("--summary-json", c.summary_file, mine, "final summary (accuracy, loss, images/s, peak bytes)")
      ->capture_default_str();
  o.option("--curves", c.curves_file, mine,
           "SVG of the training curves: train/test loss and accuracy, and under --amp fp16 the loss scale and "
           "skipped steps (default: curves.svg beside --metrics)");
  o.option("--limit,--limit-train", c.limit_train, all,
           "use only N training images (0 = all): the first N, or every k-th of an ImageFolder")
      ->check(at_least(0));
  o.option("--limit-test", c.limit_test, all, "use only N test images (0 = all), chosen as for --limit")
      ->check(at_least(0));
  o.flag("--augment", c.augment, all, "random crop (pad 2) and horizontal flip");
  o.option("--log-every", c.log_every, mine,
           "print a progress line every N steps when stderr is not a terminal (a terminal gets a progress bar)")
      ->capture_default_str()->check(at_least(0));
  o.option("--save", c.save_path, mine,
           "checkpoint (model, optimizer, LR schedule, RNG, epoch) written atomically after every epoch");
  o.option("--resume", c.resume_path, mine,
           "continue from a --save checkpoint; --epochs is the total (e.g. saved after 2, --epochs 3 runs one "
           "more), and with the same --threads the result equals an uninterrupted run bit for bit. The other "
           "options must be the saved run's (--lr, --momentum and --weight-decay too: a new value is refused). "
           "Under mpirun each rank reads its own copy, and every rank's restored state must equal rank 0's");
  o.option("--amp", c.amp, all,
           "mixed precision: off | fp16 (autocast to FP16 + dynamic loss scaling) | bf16 (autocast to BF16, "
           "no scaling needed) | fp8 (linear/conv GEMMs in FP8, delayed scaling, E4M3 forward and E5M2 gradients; "
           "BF16 elsewhere) | fp8-current (FP8 with per-tensor scales from the current amax) | mxfp8 (FP8 with a "
           "power-of-two scale per 32 values); the FP8 modes need no loss scaler and run on the CPU or CUDA (mxfp8 "
           "there through BF16; docs/FP8.md)")
      ->capture_default_str();
  o.flag("--allow-nonfinite-loss", c.allow_nonfinite_loss, all,
         "keep training after a NaN/inf loss that no loss scaler handles (default: stop with an error)");
  o.option("--max-skipped-steps", c.max_skipped_steps, all,
           "--amp fp16: stop with an error once this many optimizer steps in a row were skipped for inf/NaN "
           "gradients (the loss scale has collapsed; 0 = never stop)")
      ->capture_default_str()->check(at_least(0));
  o.flag("--master-weights", c.master_weights, all,
         "make the model itself 16-bit (BatchNorm stays FP32) and keep FP32 master weights in the optimizer");
  o.option("--accumulate", c.accumulate, all, "micro-batches of --batch-size per optimizer step (gradient accumulation)")
      ->capture_default_str()->check(at_least(1));
  o.flag("--checkpoint-activations", c.checkpoint_activations, all,
         "recompute each residual block in backward instead of keeping its activations (resnet8/resnet20)");
  o.flag("--cuda-graph", c.cuda_graph, all,
         "--device cuda: capture the training step once as a CUDA graph (after 3 eager warm-up steps) and replay "
         "it; each step's loss and skip reach the host one step late. Every --amp mode: the FP8 modes' casts, amax "
         "history and delayed scale update run inside the graph (docs/CUDA.md, \"CUDA graphs\")");
  o.flag("--shard-optimizer", c.shard_optimizer, all,
         "under mpirun: ZeRO-1, each rank keeps and updates the optimizer state (and FP32 masters) of 1/N of the "
         "parameters; the gradients are reduce-scattered and the parameters all-gathered. Checkpoints hold the "
         "unsharded state (any world size resumes them). One process: nothing to shard, no effect");
  o.option("--reduce-dtype", c.reduce_dtype, all,
           "under mpirun: the dtype the gradients are summed in: f32 | bf16 | f16 (with --amp fp16 the loss-scaled "
           "FP16 reduction, an overflow skipped by the scaler; otherwise divided before the sum, like PyTorch's "
           "fp16_compress_hook)")
      ->capture_default_str();
  o.flag("--gradient-as-bucket-view", c.gradient_as_bucket_view, all,
         "under mpirun: each .grad is a view of its place in the reduction bucket (no copy out, no extra gradient "
         "memory), as PyTorch's DDP option");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(c, o.computation());
  } catch (const std::exception& e) {  // the one place the program's name is put before an error
    // Under mpirun the failing rank ends every rank, naming itself, instead of leaving the
    // others inside a collective until the timeout.
    distributed::abort_if_distributed(std::string("train_fashion_mnist: ") + e.what());
    std::cerr << "train_fashion_mnist: " << e.what() << "\n";
    return 1;
  }
}
