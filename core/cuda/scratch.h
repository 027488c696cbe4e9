// core/cuda/scratch.h — temporary device bytes (cuDNN workspaces, reduction partials) from the
// CUDA caching allocator, released at scope exit (CUDA builds only; C++17-clean).
// Rule (the caching allocator's stream rule): the bytes are tagged with the stream current at
// construction; work using them must be issued on that stream. They may be released as soon as
// that work is enqueued — a later allocation on the same stream runs after it.
#pragma once
#include <cstddef>

namespace mixtape::cuda {

class Scratch {
 public:
  // nbytes on `device` (-1: the current device); 0 bytes gives data() == nullptr.
  explicit Scratch(size_t nbytes, int device = -1);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }
  size_t size() const { return nbytes_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  int device_ = 0;
};

}  // namespace mixtape::cuda
