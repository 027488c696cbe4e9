// core/cuda/stream.h — the current device, the current stream per device, events, and the RAII
// guards that change them (CUDA builds only; C++17-clean for .cu files).
// Rules:
//   - The current device is the CUDA runtime's (cudaGetDevice/cudaSetDevice), per host thread.
//   - Each device has a current stream per host thread; it starts as the legacy default stream
//     (nullptr), and StreamGuard sets it for a scope. Kernels, copies, cuBLAS and cuDNN calls
//     are issued on current_stream(); the caching allocator tags blocks with it.
//   - Guards restore what they changed on scope exit, exceptions included; they never throw
//     from a destructor (a failure there is reported on stderr).
#pragma once
#include <cuda_runtime_api.h>

namespace mixtape {
class Tensor;
}

namespace mixtape::cuda {

// The calling thread's current device (checked; throws when no device is usable).
int current_device();
// Sets the current device (checked; the index must be < device_count()).
void set_device(int device);

// This thread's current stream on `device` (-1: the current device).
cudaStream_t current_stream(int device = -1);
// Makes `stream` the current stream of `device` (-1: the current device) on this thread.
void set_current_stream(cudaStream_t stream, int device = -1);

// A new non-blocking stream on the current device; the caller destroys it (or use OwnedStream).
cudaStream_t create_stream();

// RAII: the current device is `device` until scope exit; a negative index changes nothing.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// RAII: `stream` is the current stream of the current device until scope exit.
class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_ = 0;
  cudaStream_t previous_ = nullptr;
};

// RAII owner of a stream made by create_stream() (synchronised, then destroyed at scope exit).
class OwnedStream {
 public:
  OwnedStream();
  ~OwnedStream();
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// A CUDA event (timing disabled unless asked): record on a stream, make another stream wait for
// it without blocking the host, or block the host until it has happened. Creating one, query()
// and synchronize() are refused during CUDA graph capture (core/cuda/graph.h); record and wait
// are captured.
class Event {
 public:
  explicit Event(bool enable_timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(cudaStream_t stream);              // on `stream`
  void record();                                 // on the current stream
  void wait(cudaStream_t stream) const;          // `stream` waits until this event has happened
  void synchronize() const;                      // the host waits
  bool query() const;                            // happened already?
  float elapsed_ms(const Event& later) const;    // both recorded with timing enabled
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
  int device_ = 0;
};

// Tells the caching allocator that t's memory is also used by work on `stream`, not only on the
// stream it was allocated for (PyTorch's Tensor.record_stream): when that memory is freed, it is
// handed out again only after the work queued on `stream` until then has run. Without it, memory
// freed while another stream still reads or writes it can be reused and overwritten under it.
void record_stream(const Tensor& t, cudaStream_t stream);

}  // namespace mixtape::cuda
