// core/cuda/graphed_step.cpp — cuda::GraphedStep (core/cuda/graphed_step.h).
// Invariant: calls [0, warmup_steps) ran eagerly on the side stream, each ordered after the
// current stream's earlier work and before its later work; call warmup_steps captured the step and
// replayed it; every call ran the step exactly once.
#include "core/cuda/graphed_step.h"

#include "core/cuda/check.h"
#include "core/cuda/handles.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace mixtape::cuda {

GraphedStep::GraphedStep(std::function<void()> step, int warmup_steps)
    : step_(std::move(step)), warmup_steps_(warmup_steps) {
  MT_CHECK(step_, "cuda::GraphedStep: the step is empty");
  MT_CHECK(warmup_steps_ >= 1, "cuda::GraphedStep: warmup_steps must be >= 1 (the step's lazily made state must exist "
           "before capture), got ", warmup_steps_);
}

GraphedStep::~GraphedStep() {
  if (side_) {
    // The warm-up's GEMMs made the side stream's cuBLAS workspace (core/cuda/handles.h): it goes
    // back with the stream, once the stream's work is done.
    if (cudaStreamSynchronize(side_) == cudaSuccess) release_cublas_workspace(side_);
    (void)cudaStreamDestroy(side_);
  }
}

void GraphedStep::operator()() {
  if (steps_ < warmup_steps_) {
    // PyTorch's recipe: warm up on a side stream, ordered both ways with the current stream.
    cudaStream_t current = current_stream();
    if (!side_) side_ = create_stream();
    {
      Event ready;
      ready.record(current);
      ready.wait(side_);
    }
    {
      StreamGuard guard(side_);
      step_();
    }
    Event done;
    done.record(side_);
    done.wait(current);
  } else {
    if (!graph_.captured()) {
      graph_.capture_begin();
      try {
        step_();
      } catch (...) {
        graph_.reset();  // ends the capture, keeps nothing
        throw;
      }
      graph_.capture_end();
    }
    graph_.replay();
  }
  ++steps_;
}

}  // namespace mixtape::cuda
