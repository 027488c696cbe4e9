// data/cuda/batch_copier.h — data::BatchCopier, the CUDA half of data::DevicePrefetcher: copies
// host batches to one device on a copy stream of its own, through pinned staging buffers, ordered
// by events (CUDA builds only). docs/CUDA.md, "The data path".
// Invariants (the three orders a copy on another stream needs):
//   - the consumer (the stream that was current at start()) waits for a batch's copy event at
//     take(), before any of its work can read the batch;
//   - a staging slot is rewritten by the host only once its previous copy has completed (the
//     slot's event, queried; waited for only when every slot is busy);
//   - a batch's device tensors are allocated on the consumer stream, and the copy stream waits for
//     an event recorded there at start(): memory the consumer freed (a batch from earlier steps)
//     is written only after the consumer's queued work that used it. Afterwards the caching
//     allocator's stream rule holds as for any tensor of the consumer stream.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/cuda/stream.h"
#include "data/dataset.h"

namespace mixtape::data {

class BatchCopier {
 public:
  // Copies to cuda:`device`; its copy stream is a non-blocking stream there (a blocking one would
  // be serialised with the legacy default stream, where an eager training loop runs).
  explicit BatchCopier(int device);
  ~BatchCopier();  // waits for the copies still queued, taken or not (their staging slots are freed)
  BatchCopier(const BatchCopier&) = delete;
  BatchCopier& operator=(const BatchCopier&) = delete;

  // Starts copying host batch `b` (CPU tensors) to the device; the current stream is the consumer.
  // Returns at once. Refused during CUDA graph capture.
  void start(const Batch& b);
  // The oldest started batch, on the device: the current stream (which must be the consumer the
  // batch was started for) waits for its copy. No host wait.
  Batch take();
  // Started batches not taken yet.
  size_t started() const { return started_.size(); }
  // Drops the started batches, after their copies (a host wait when one is still queued).
  void discard();

  cudaStream_t copy_stream() const { return copy_; }
  // Pinned staging slots made so far (at most kMaxSlots).
  size_t staging_slots() const { return slots_.size(); }
  // A loop that takes each batch before starting the next after it needs two or three (a copy in
  // flight, one the device may still be copying when the host starts the next); beyond this the
  // host waits for the oldest copy instead of pinning more memory.
  static constexpr size_t kMaxSlots = 4;

 private:
  struct Slot {
    Tensor staging;       // pinned bytes: the batch's data, then its target
    cuda::Event copied;   // recorded on the copy stream after the slot's copies
    bool busy = false;    // a copy was issued that has not been seen complete
    uint64_t issued = 0;  // when (start() count), to find the oldest
  };
  struct Started {
    Batch device;
    Slot* slot;
    cudaStream_t consumer;
  };
  Slot& free_slot();

  int device_;
  cudaStream_t copy_ = nullptr;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::deque<Started> started_;
  std::unique_ptr<cuda::Event> consumer_mark_;  // the consumer's position at start(), for the copy stream
  uint64_t starts_ = 0;
};

}  // namespace mixtape::data
