// core/cuda/stream.cpp — error reporting for the check macros, the current device and stream,
// the RAII guards and events (core/cuda/stream.h, core/cuda/check.h).
// Invariant: every runtime call is checked; the current stream is per host thread and per device
// and defaults to the legacy default stream, so code that never uses StreamGuard is ordered
// exactly as plain CUDA code on stream 0.
#include "core/cuda/stream.h"

#include <cstdio>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/graph.h"
#include "core/cuda/handles.h"
#include "core/cuda_api.h"

namespace mixtape::cuda {

namespace detail {
namespace {
std::string where(const char* file, int line) {
  std::string f = file;
  // Report paths from the repository root (ops/cuda/x.cu), not the build machine's absolute path.
  for (const char* root : {"/core/", "/ops/", "/amp/", "/optim/", "/autograd/", "/models/", "/data/", "/tests/"}) {
    auto pos = f.rfind(root);
    if (pos != std::string::npos) {
      f = f.substr(pos + 1);
      break;
    }
  }
  return f + ":" + std::to_string(line);
}
}  // namespace

void throw_cuda_error(cudaError_t status, const char* call, const char* op, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  // The stream-capture family (cudaErrorStreamCaptureUnsupported .. WrongThread): say what it means.
  const bool capture = status >= cudaErrorStreamCaptureUnsupported && status <= cudaErrorStreamCaptureWrongThread;
  MT_ERROR(op, ": CUDA call ", call, " failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status),
           ") at ", where(file, line),
           capture ? ": the call cannot be made during CUDA graph capture, which it invalidated "
                     "(docs/CUDA.md, \"CUDA graphs\")"
                   : "");
}

const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* op, const char* file, int line) {
  MT_ERROR(op, ": cuBLAS call ", call, " failed: ", cublas_status_name(status), " (",
           cublasGetStatusString(status), ") at ", where(file, line));
}

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* op, const char* file, int line) {
  MT_ERROR(op, ": cuDNN call ", call, " failed: ", cudnnGetErrorString(status), " (status ",
           static_cast<int>(status), ") at ", where(file, line));
}
}  // namespace detail

int current_device() {
  check_available("cuda::current_device");
  int d = 0;
  MT_CUDA_CHECK(cudaGetDevice(&d), "cuda::current_device");
  return d;
}

void set_device(int device) {
  check_device(device, "cuda::set_device");
  MT_CUDA_CHECK(cudaSetDevice(device), "cuda::set_device");
}

namespace {
// This thread's current stream per device index (nullptr: the legacy default stream).
std::vector<cudaStream_t>& thread_streams() {
  thread_local std::vector<cudaStream_t> streams;
  int n = device_count();
  if (static_cast<int>(streams.size()) < n) streams.resize(static_cast<size_t>(n), nullptr);
  return streams;
}
}  // namespace

cudaStream_t current_stream(int device) {
  if (device < 0) device = current_device();
  check_device(device, "cuda::current_stream");
  return thread_streams()[static_cast<size_t>(device)];
}

void set_current_stream(cudaStream_t stream, int device) {
  if (device < 0) device = current_device();
  check_device(device, "cuda::set_current_stream");
  thread_streams()[static_cast<size_t>(device)] = stream;
}

cudaStream_t create_stream() {
  cudaStream_t s = nullptr;
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cuda::create_stream");
  return s;
}

DeviceGuard::DeviceGuard(int device) {
  if (device < 0) return;
  previous_ = current_device();
  if (previous_ != device) set_device(device);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ < 0) return;
  cudaError_t status = cudaSetDevice(previous_);
  if (status != cudaSuccess)
    std::fprintf(stderr, "mixtape: DeviceGuard could not restore cuda:%d: %s\n", previous_,
                 cudaGetErrorString(status));
}

StreamGuard::StreamGuard(cudaStream_t stream) : device_(current_device()), previous_(current_stream(device_)) {
  set_current_stream(stream, device_);
}

StreamGuard::~StreamGuard() {
  // Cannot fail: device_ was valid when the guard was made and the table only grows.
  thread_streams()[static_cast<size_t>(device_)] = previous_;
}

OwnedStream::OwnedStream() : stream_(create_stream()) {}

OwnedStream::~OwnedStream() {
  if (!stream_) return;
  cudaError_t status = cudaStreamSynchronize(stream_);
  if (status == cudaSuccess) release_cublas_workspace(stream_);  // its GEMMs are done
  if (status == cudaSuccess) status = cudaStreamDestroy(stream_);
  if (status != cudaSuccess)
    std::fprintf(stderr, "mixtape: OwnedStream could not be destroyed: %s\n", cudaGetErrorString(status));
}

Event::Event(bool enable_timing) : device_(current_device()) {
  check_not_capturing("cuda::Event", "creates an event");
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, enable_timing ? cudaEventDefault : cudaEventDisableTiming),
                "cuda::Event");
}

Event::~Event() {
  if (event_) (void)cudaEventDestroy(event_);
}

void Event::record(cudaStream_t stream) {
  DeviceGuard guard(device_);
  MT_CUDA_CHECK(cudaEventRecord(event_, stream), "cuda::Event::record");
}

void Event::record() { record(current_stream(device_)); }

void Event::wait(cudaStream_t stream) const {
  MT_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0), "cuda::Event::wait");
}

void Event::synchronize() const {
  check_not_capturing("cuda::Event::synchronize", "waits for an event (a synchronisation)");
  MT_CUDA_CHECK(cudaEventSynchronize(event_), "cuda::Event::synchronize");
}

bool Event::query() const {
  check_not_capturing("cuda::Event::query", "asks whether an event has happened");
  cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  MT_CUDA_CHECK(status, "cuda::Event::query");
  return true;
}

float Event::elapsed_ms(const Event& later) const {
  float ms = 0.f;
  MT_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, later.event_), "cuda::Event::elapsed_ms");
  return ms;
}

}  // namespace mixtape::cuda
