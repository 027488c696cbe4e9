// examples/graphed_training.h — train_fashion_mnist --cuda-graph (CUDA builds only): the training
// step replayed as CUDA graphs (core/cuda/graphed_step.h), and what the host learns of each step,
// one step late. Owns the static input/target buffers, the graphs, the per-step figures on the
// device and the LR schedule's one-step-late bookkeeping.
// The forward runs under the program's precision (autocast, or an FP8 region); delayed FP8 scaling
// updates its scales at a step's first micro-batch only, so with --accumulate that micro-batch
// has a graph of its own (the update captured in it), the later ones another (without).
// Invariant: a step's figures (loss and correct predictions per micro-batch, the loss scale it
// used and after its update, whether it was skipped) reach the host only once the next step is
// queued; every step runs with the lr the eager loop gives it (a skipped step does not advance the
// schedule): the host schedule is told about every step whose figures were read, and for the one
// not read yet the device picks the held or the advanced lr by its found_inf.
#pragma once
#include <array>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <mixtape/mixtape.h>

#include "amp/grad_scaler.h"
#include "core/cuda/graphed_step.h"
#include "core/cuda/stream.h"
#include "models/backward_into_grads.h"

namespace mixtape::examples {

// One optimizer step as the host reads it.
struct GraphedStepResult {
  std::vector<double> losses;    // per micro-batch: the loss (as loss.item<double>() reads it)
  std::vector<int64_t> correct;  // per micro-batch: correct predictions
  double scale_used = 1.0;       // the loss scale the gradients were scaled by (1: no scaler)
  double scale_after = 1.0;      // the scale after the step's update()
  bool skipped = false;          // inf/NaN in the gradients: the optimizer did not step
};

// Runs `body` (the model's forward and the loss) under the training's precision: autocast, or an
// FP8 region whose delayed scales are updated at entry when `update_scales` (the first micro-batch
// of an optimizer step).
using PrecisionScope = std::function<void(bool update_scales, const std::function<void()>& body)>;

class GraphedTraining {
 public:
  // `opt` capturable, `scaler` sync_free (or disabled); the model on `device`, in train mode. Under
  // mpirun `model` is the DistributedDataParallel wrapper, accumulate 1: its NCCL all-reduces are
  // captured with the step (docs/DISTRIBUTED.md, "DDP in a CUDA graph").
  // accumulate == 1: the whole step is one graph; > 1: the micro-step and the optimizer step are
  // two (nn::backward_into_grads; the optimizer step zeroes the gradients in place), and three when
  // `first_micro_differs` (the precision does something else at the first micro-batch: delayed FP8
  // scaling's update): the first micro-step, the later micro-steps and the optimizer step.
  GraphedTraining(nn::Module& model, optim::Optimizer& opt, amp::GradScaler& scaler,
                  optim::LRScheduler* sched, PrecisionScope precision, bool first_micro_differs, int accumulate,
                  Device device)
      : device_(device.index()), model_(model), opt_(opt), scaler_(scaler), sched_(sched),
        precision_(std::move(precision)), accumulate_(accumulate), params_(model.parameters()) {
    NoGradGuard no_grad;
    const TensorOptions f64 = TensorOptions(DType::Float64).with_device(device);
    micro_stats_ = zeros({2}, f64);
    opt_stats_ = tensor({1.0, 0.0, 1.0}, {3}, TensorOptions(DType::Float64)).to(device);
    for (Tensor& r : ring_) r = zeros({2 * accumulate_ + 3}, f64);
    if (accumulate_ == 1) {
      whole_ = std::make_unique<cuda::GraphedStep>([this] {
        opt_.zero_grad();
        scaler_.scale(forward(true)).backward();
        optimizer_step();
      }, kWarmupSteps);
    } else {
      auto micro_step = [this](bool first) {
        return [this, first] {
          nn::backward_into_grads(scaler_.scale(forward(first) / static_cast<double>(accumulate_)), params_);
        };
      };
      micro_ = std::make_unique<cuda::GraphedStep>(micro_step(!first_micro_differs), kWarmupSteps);
      if (first_micro_differs) first_micro_ = std::make_unique<cuda::GraphedStep>(micro_step(true), kWarmupSteps);
      opt_step_ = std::make_unique<cuda::GraphedStep>([this] {
        optimizer_step();
        opt_.zero_grad(false);  // in place: the captured micro-step adds into these buffers
      }, kWarmupSteps);
    }
  }
  GraphedTraining(const GraphedTraining&) = delete;
  GraphedTraining& operator=(const GraphedTraining&) = delete;

  // Micro-batch `micro` (0-based) of the next step: the batch (on the device: data::DevicePrefetcher;
  // or on the host) is copied into the static buffers on the current stream, the one the graphs
  // replay on, so the copy runs after the previous replay has read them and before this one (a
  // copy stream writing them directly would have to wait for that replay, losing the overlap);
  // enqueued copies; a batch of another shape is refused: the graph was captured for one), then
  // the micro-step (or the whole step) runs: eagerly for the first 3 calls, then captured and
  // replayed. Before the step's first micro-batch the schedule advances for the previous step.
  void queue_micro(const data::Batch& b, int micro) {
    if (micro == 0) {
      MT_CHECK(pending_.size() < ring_.size(), "train_fashion_mnist --cuda-graph: ", pending_.size(),
               " steps are unread; read one before queueing another");
      advance_schedule_for_unread_step();
    }
    if (!static_x_.defined()) {
      static_x_ = Tensor::empty(b.data.sizes(), TensorOptions(b.data.dtype()).with_device(micro_stats_.device()));
      static_y_ = Tensor::empty(b.target.sizes(), TensorOptions(b.target.dtype()).with_device(micro_stats_.device()));
    }
    MT_CHECK(b.data.sizes() == static_x_.sizes() && b.target.sizes() == static_y_.sizes(),
             "train_fashion_mnist --cuda-graph: a batch of ", shape_str(b.data.sizes()), " images, the graph was "
             "captured for ", shape_str(static_x_.sizes()), " (the training loader drops the last partial batch)");
    static_x_.copy_(b.data);
    static_y_.copy_(b.target);
    if (whole_) (*whole_)();
    else if (micro == 0 && first_micro_) (*first_micro_)();
    else (*micro_)();
    NoGradGuard no_grad;
    Tensor dst = ring_[slot_].narrow(0, 2 * micro, 2);
    dst.copy_(micro_stats_);
  }

  // After the step's last micro-batch: the optimizer step (accumulation), its figures into the
  // step's ring slot, and an event the host waits on to read them.
  void end_step() {
    if (opt_step_) (*opt_step_)();
    NoGradGuard no_grad;
    Tensor dst = ring_[slot_].narrow(0, 2 * accumulate_, 3);
    dst.copy_(opt_stats_);
    events_[slot_].record();
    pending_.push_back({slot_, false, std::nullopt});
    slot_ = (slot_ + 1) % ring_.size();
  }

  size_t unread() const { return pending_.size(); }
  bool captured() const {
    return whole_ ? whole_->captured()
                  : micro_->captured() && opt_step_->captured() && (!first_micro_ || first_micro_->captured());
  }
  static constexpr int kWarmupSteps = 3;  // cuda::GraphedStep's default
  // Optimizer steps replayed from the captured graph(s) so far.
  int64_t replayed_steps() const {
    const cuda::GraphedStep& s = whole_ ? *whole_ : *opt_step_;
    return s.captured() ? s.steps() - kWarmupSteps : 0;
  }

  // The oldest unread step's figures: the host waits for that step (and its copy) only, not for
  // the steps queued after it. The schedule is then told whether it stepped: advanced if it had
  // not been yet, or its advance (made as if it stepped) undone if it was skipped.
  GraphedStepResult read_oldest() {
    MT_CHECK(!pending_.empty(), "train_fashion_mnist --cuda-graph: no step to read");
    Tensor host;
    {
      cuda::StreamGuard on_reader(reader_.get());
      events_[pending_.front().slot].wait(reader_.get());
      host = ring_[pending_.front().slot].to(Device::CPU());
    }
    // Taken off the queue once read: a read that throws (a deferred device check reported at this
    // wait) leaves the step's schedule bookkeeping in place.
    Pending p = std::move(pending_.front());
    pending_.pop_front();
    const double* v = host.data_ptr<double>();
    GraphedStepResult r;
    for (int m = 0; m < accumulate_; ++m) {
      r.losses.push_back(v[2 * m]);
      r.correct.push_back(static_cast<int64_t>(v[2 * m + 1]));
    }
    r.scale_used = v[2 * accumulate_];
    r.skipped = v[2 * accumulate_ + 1] != 0.0;
    r.scale_after = v[2 * accumulate_ + 2];
    if (sched_) {
      if (!p.advanced) {
        sched_->step(!r.skipped);
      } else if (r.skipped) {
        // The advance made for it as if it stepped is undone on the host (the device kept the
        // held lr for the next step already).
        sched_->load_state_dict(*p.before_advance);
        auto& groups = opt_.param_groups();
        for (size_t g = 0; g < groups.size(); ++g) groups[g].set_lr(sched_->get_last_lr()[g]);
        opt_.write_device_lr();
      }
    }
    return r;
  }

 private:
  struct Pending {
    size_t slot;
    bool advanced;                            // the schedule advanced for it before its result was read
    std::optional<StateDict> before_advance;  // the schedule before that advance (a skip undoes it)
  };

  // The step about to be queued must run with the lr of a schedule told about every earlier step,
  // but the previous step's result is not read yet. The schedule advances as if it stepped (the
  // host writes that lr to the device), and when a scaler may have skipped it, a device-side
  // select keeps the held lr instead where its found_inf (still in opt_stats_) is set: the lr
  // is the eager run's either way, with no host read. Reading a skip later undoes the advance on
  // the host (read_oldest).
  void advance_schedule_for_unread_step() {
    if (!sched_ || pending_.empty() || pending_.back().advanced) return;
    Pending& prev = pending_.back();
    auto& groups = opt_.param_groups();
    std::vector<double> held;
    for (const optim::ParamGroup& g : groups) held.push_back(g.lr());
    if (scaler_.is_enabled()) prev.before_advance = sched_->state_dict();
    sched_->step(true);
    prev.advanced = true;
    if (!scaler_.is_enabled()) return;  // nothing skips
    NoGradGuard no_grad;
    const Device device = opt_stats_.device();
    const Tensor found = opt_stats_.select(0, 1);
    const Tensor clean = eq(found, zeros({}, TensorOptions(DType::Float64).with_device(device)));  // NaN: skipped
    for (size_t g = 0; g < groups.size(); ++g) {
      Tensor lr = opt_.device_lr(g, device);
      lr.copy_(where(clean, lr, full({}, held[g], TensorOptions(DType::Float64).with_device(device))));
    }
  }

  // first: the step's first micro-batch (FP8's delayed scales update there).
  Tensor forward(bool first) {
    Tensor logits, loss;
    precision_(first, [&] {
      logits = model_(static_x_);
      loss = cross_entropy(logits, static_y_);
    });
    NoGradGuard no_grad;
    Tensor l = micro_stats_.select(0, 0), correct = micro_stats_.select(0, 1);
    l.copy_(loss.detach());
    correct.copy_(sum(eq(argmax(logits.detach(), 1), static_y_)));
    return loss;
  }

  void optimizer_step() {
    if (scaler_.is_enabled()) {
      NoGradGuard no_grad;
      Tensor used = opt_stats_.select(0, 0);
      used.copy_(scaler_.scale_tensor());
    }
    scaler_.step(opt_);
    if (scaler_.is_enabled()) {  // the step's found_inf, copied where the host reads it late
      NoGradGuard no_grad;
      Tensor found = opt_stats_.select(0, 1);
      found.copy_(scaler_.found_inf());
    }
    scaler_.update();
    if (scaler_.is_enabled()) {
      NoGradGuard no_grad;
      Tensor after = opt_stats_.select(0, 2);
      after.copy_(scaler_.scale_tensor());
    }
  }

  static std::string shape_str(const IntList& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
  }

  // The model's device is the current one while this lives, and first of all: the events, the
  // reader stream and the graphs' capture stream are made on the current device, and a capture
  // serves only the current device's allocations (--device cuda:1 would otherwise capture on 0).
  cuda::DeviceGuard device_;
  nn::Module& model_;
  optim::Optimizer& opt_;
  amp::GradScaler& scaler_;
  optim::LRScheduler* sched_;
  PrecisionScope precision_;
  int accumulate_;
  std::vector<Tensor> params_;
  Tensor static_x_, static_y_;
  // Written by the graphs: {loss, correct} of the micro-batch; {scale used, found_inf, scale after}.
  Tensor micro_stats_, opt_stats_;
  // Per step in flight: the figures copied out of the graphs' buffers, and the event after them.
  std::array<Tensor, 2> ring_;
  std::array<cuda::Event, 2> events_;
  size_t slot_ = 0;
  std::deque<Pending> pending_;
  cuda::OwnedStream reader_;  // the reads' stream: waits for one step's event, not for later steps
  // whole_ (accumulate 1), or micro_ and opt_step_, with first_micro_ when the first micro-batch differs.
  std::unique_ptr<cuda::GraphedStep> whole_, first_micro_, micro_, opt_step_;
};

}  // namespace mixtape::examples
