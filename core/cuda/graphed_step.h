// core/cuda/graphed_step.h — a whole training step as one CUDA graph (PyTorch's whole-network
// capture recipe, docs/CUDA.md "CUDA graphs"): the step (forward, backward, scaler.step/update,
// optimizer.step, on static input buffers) runs eagerly for its first `warmup_steps` calls, on a
// side stream ordered with the current one, so lazily made state (optimizer buffers, the scaler's
// tensors, cuDNN choices, handles) exists; the next call captures it once and replays it, and every
// later call replays it. Each call is exactly one step of training, so a graphed run equals the
// eager run of the same calls bit for bit. CUDA builds only (C++17-clean).
//
//   cuda::GraphedStep step([&] { <zero_grad, forward on static_x, backward, scaler/optimizer> });
//   for (...) { static_x.copy_(batch.x); static_y.copy_(batch.y); step(); }
//
// The step must launch the same work every call (no host reads: a capturable optimizer and a
// sync_free GradScaler; dropout from the default generator) and keep reading and writing the same
// tensors. Gradient accumulation: capture the micro-step and the optimizer step as two
// GraphedSteps, with nn::backward_into_grads() (models/backward_into_grads.h: autograd's
// accumulation is out of place, so a captured `grad = grad + g` would read the capture-time buffer
// on every replay) and zero_grad(false).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "core/cuda/graph.h"

namespace mixtape::cuda {

class GraphedStep {
 public:
  // warmup_steps >= 1 (PyTorch recommends a few; 3 here by default).
  explicit GraphedStep(std::function<void()> step, int warmup_steps = 3);
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;

  // One training step: eager (warm-up), or capture then replay, or replay.
  void operator()();

  int64_t steps() const { return steps_; }  // calls so far
  bool captured() const { return graph_.captured(); }
  Graph& graph() { return graph_; }

 private:
  std::function<void()> step_;
  int warmup_steps_;
  int64_t steps_ = 0;
  cudaStream_t side_ = nullptr;  // the warm-up's stream (created on first use)
  Graph graph_;
};

}  // namespace mixtape::cuda
