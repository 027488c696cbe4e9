// tests/distributed/shared_segments_model.h — a model whose Linear `shared` is used by two
// segments in a row, checkpointed or not: what DDP must accept with non-reentrant
// checkpointing (one gradient per parameter and backward, as in the plain graph).
#pragma once
#include <memory>

#include "autograd/checkpoint.h"
#include "mixtape/mixtape.h"

namespace mixtape::dist_test {

enum class Segments { Plain, Checkpointed, Reentrant };

class SharedBySegments : public nn::Module {
 public:
  SharedBySegments(uint64_t seed, Segments mode) : nn::Module("SharedBySegments"), mode_(mode) {
    manual_seed(seed);
    shared = register_module("shared", std::make_shared<nn::Linear>(20, 20));
    head = register_module("head", std::make_shared<nn::Linear>(20, 10));
  }
  Tensor forward(const Tensor& x) override {
    auto segment = [this](const Tensor& t) { return relu((*shared)(t)); };
    Tensor h = x;
    for (int i = 0; i < 2; ++i)
      h = mode_ == Segments::Plain ? segment(h)
                                   : autograd::checkpoint(segment, h, {.use_reentrant = mode_ == Segments::Reentrant});
    return (*head)(h);
  }
  std::shared_ptr<nn::Linear> shared, head;

 private:
  Segments mode_;
};

}  // namespace mixtape::dist_test
