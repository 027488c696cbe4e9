// tests/cuda_emulator/runtime.cpp — the CUDA runtime API on the host, for MIXTAPE_CUDA=EMULATOR
// builds: devices, guarded device memory, copies, memset, streams, events and the last-error
// state, defined as the extern "C" functions <cuda_runtime_api.h> declares (the compiler checks
// each definition against the toolkit's declaration).
//
// Semantics follow the runtime API reference where mixtape relies on them: cudaMalloc(0) gives
// nullptr; an explicit copy kind must match where the pointers live (cudaErrorInvalidValue
// otherwise, which is stricter than a UVA GPU and catches a swapped direction); a failed call
// sets the calling thread's last error, read and cleared by cudaGetLastError; events must be
// recorded (and created with timing) before cudaEventElapsedTime. Every device has
// MIXTAPE_CUDA_EMULATOR_MEMORY_MB of memory (default 4096), so out-of-memory paths can be driven.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "tests/cuda_emulator/emulator.h"

struct CUstream_st {
  int device;
  unsigned flags;
};
struct CUevent_st {
  int device;
  unsigned flags;
  bool recorded = false;
  std::chrono::steady_clock::time_point when;
};

namespace mixtape::cuda_emulator {
namespace {

struct Block {
  size_t size;      // what was asked for
  size_t mapped;    // the mapping, rounded up to pages, plus one guard page that is never opened
  int device;
};

struct State {
  std::recursive_mutex mu;  // serialises every emulated call that touches device memory
  std::map<uintptr_t, Block> blocks;
  std::vector<size_t> used;  // bytes in use per device
  int access_depth = 0;
};
State& state() {
  static State* s = new State;  // leaked: device memory may be freed during static destruction
  return *s;
}

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;

size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

size_t env_size(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (*end != '\0' || x == 0) fault("%s=%s is not a positive integer", name, v);
  return static_cast<size_t>(x);
}

size_t device_capacity() {
  static const size_t bytes = env_size("MIXTAPE_CUDA_EMULATOR_MEMORY_MB", 4096) << 20;
  return bytes;
}

void protect(const Block& b, uintptr_t base, bool open) {
  const size_t usable = b.mapped - page_size();  // the guard page stays PROT_NONE
  if (mprotect(reinterpret_cast<void*>(base), usable, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
    fault("mprotect of device block %p (%zu bytes) failed", reinterpret_cast<void*>(base), usable);
}

// The block holding [p, p + bytes), or end(); the caller holds the lock.
std::map<uintptr_t, Block>::iterator find_block(const void* p, size_t bytes) {
  auto& blocks = state().blocks;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = blocks.upper_bound(a);
  if (it == blocks.begin()) return blocks.end();
  --it;
  if (a - it->first + bytes > it->second.size || a < it->first) return blocks.end();
  return it;
}

cudaError_t fail(cudaError_t e) {
  t_last_error = e;
  return e;
}

bool valid_device(int d) { return d >= 0 && d < device_count(); }

}  // namespace

int device_count() {
  static const int n = static_cast<int>(env_size("MIXTAPE_CUDA_EMULATOR_DEVICES", 2));
  return n;
}
int current_device() { return t_device; }
int stream_device(cudaStream_t s) { return s ? s->device : t_device; }

DeviceAccess::DeviceAccess() {
  State& st = state();
  st.mu.lock();
  if (st.access_depth++ == 0)
    for (auto& [base, b] : st.blocks) protect(b, base, true);
}
DeviceAccess::~DeviceAccess() {
  State& st = state();
  if (--st.access_depth == 0)
    for (auto& [base, b] : st.blocks) protect(b, base, false);
  st.mu.unlock();
}

bool is_device_range(const void* p, size_t bytes, int* device) {
  State& st = state();
  std::lock_guard<std::recursive_mutex> lock(st.mu);
  auto it = find_block(p, bytes);
  if (it == st.blocks.end()) return false;
  if (device) *device = it->second.device;
  return true;
}

void require_device_range(const void* p, size_t bytes, const char* what) {
  if (bytes == 0) return;
  if (!is_device_range(p, bytes))
    fault("%s: [%p, +%zu bytes) is not inside one live device allocation (a host pointer, freed memory, or "
          "out of bounds)",
          what, p, bytes);
}

void fault(const char* fmt, ...) {
  std::fputs("mixtape CUDA emulator: ", stderr);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  std::fflush(stderr);
  std::abort();
}

// For the kernel engine: a launch's failures are reported through the last error as well.
cudaError_t record_error(cudaError_t e) { return e == cudaSuccess ? e : fail(e); }

}  // namespace mixtape::cuda_emulator

using namespace mixtape::cuda_emulator;

extern "C" {

// ---- devices ----

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  *count = device_count();
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (!device) return fail(cudaErrorInvalidValue);
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }  // work ran at enqueue time

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (!free || !total) return fail(cudaErrorInvalidValue);
  State& st = state();
  std::lock_guard<std::recursive_mutex> lock(st.mu);
  const size_t used = static_cast<size_t>(t_device) < st.used.size() ? st.used[t_device] : 0;
  *total = device_capacity();
  *free = device_capacity() - used;
  return cudaSuccess;
}

// ---- errors ----

cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define MT_EMU_NAME(code) \
  case code: return #code;
    MT_EMU_NAME(cudaSuccess)
    MT_EMU_NAME(cudaErrorInvalidValue)
    MT_EMU_NAME(cudaErrorMemoryAllocation)
    MT_EMU_NAME(cudaErrorInvalidConfiguration)
    MT_EMU_NAME(cudaErrorInvalidDevice)
    MT_EMU_NAME(cudaErrorInvalidResourceHandle)
    MT_EMU_NAME(cudaErrorNotReady)
    MT_EMU_NAME(cudaErrorNoDevice)
    MT_EMU_NAME(cudaErrorInsufficientDriver)
    MT_EMU_NAME(cudaErrorInvalidDevicePointer)
    MT_EMU_NAME(cudaErrorInvalidMemcpyDirection)
    MT_EMU_NAME(cudaErrorLaunchFailure)
#undef MT_EMU_NAME
    default: return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    default: return "unrecognized error code";
  }
}

// ---- memory ----

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (!ptr) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  State& st = state();
  std::lock_guard<std::recursive_mutex> lock(st.mu);
  if (st.used.size() < static_cast<size_t>(device_count())) st.used.resize(device_count(), 0);
  if (size > device_capacity() - st.used[t_device]) return fail(cudaErrorMemoryAllocation);
  const size_t page = page_size();
  const size_t mapped = (size + page - 1) / page * page + page;
  void* p = mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
  const uintptr_t base = reinterpret_cast<uintptr_t>(p);
  Block b{size, mapped, t_device};
  if (st.access_depth > 0) protect(b, base, true);
  st.blocks.emplace(base, b);
  st.used[t_device] += size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  State& st = state();
  std::lock_guard<std::recursive_mutex> lock(st.mu);
  auto it = st.blocks.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == st.blocks.end()) return fail(cudaErrorInvalidValue);
  st.used[it->second.device] -= it->second.size;
  munmap(ptr, it->second.mapped);
  st.blocks.erase(it);
  return cudaSuccess;
}

namespace {
// Checks a copy's pointers against its kind; cudaMemcpyDefault infers the direction.
cudaError_t check_copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (count == 0) return cudaSuccess;
  if (!dst || !src) return cudaErrorInvalidValue;
  const bool d_dev = is_device_range(dst, count), s_dev = is_device_range(src, count);
  switch (kind) {
    case cudaMemcpyHostToHost: return (!d_dev && !s_dev) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyHostToDevice: return (d_dev && !s_dev) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost: return (!d_dev && s_dev) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice: return (d_dev && s_dev) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDefault: return cudaSuccess;
    default: return cudaErrorInvalidMemcpyDirection;
  }
}
bool valid_stream(cudaStream_t s) { return !s || valid_device(s->device); }
}  // namespace

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = check_copy(dst, src, count, kind); e != cudaSuccess) return fail(e);
  if (count == 0) return cudaSuccess;
  DeviceAccess access;
  std::memmove(dst, src, count);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, count, kind, nullptr);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                                cudaStream_t stream) {
  if (!valid_device(dst_device) || !valid_device(src_device)) return fail(cudaErrorInvalidDevice);
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (count == 0) return cudaSuccess;
  int dd = -1, sd = -1;
  if (!is_device_range(dst, count, &dd) || !is_device_range(src, count, &sd) || dd != dst_device ||
      sd != src_device)
    return fail(cudaErrorInvalidValue);
  DeviceAccess access;
  std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (count == 0) return cudaSuccess;
  if (!is_device_range(ptr, count)) return fail(cudaErrorInvalidValue);
  DeviceAccess access;
  std::memset(ptr, value, count);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t count) { return cudaMemsetAsync(ptr, value, count, nullptr); }

// ---- streams ----

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (!stream || (flags & ~unsigned(cudaStreamNonBlocking))) return fail(cudaErrorInvalidValue);
  *stream = new CUstream_st{t_device, flags};
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return valid_stream(stream) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return valid_stream(stream) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int /*flags*/) {
  if (!valid_stream(stream) || !event) return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;  // the event's work has already run
}

// ---- events ----

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!event || (flags & ~known)) return fail(cudaErrorInvalidValue);
  *event = new CUevent_st{t_device, flags, false, {}};
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event || !valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (stream_device(stream) != event->device) return fail(cudaErrorInvalidResourceHandle);
  event->recorded = true;
  event->when = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) { return event ? cudaSuccess : fail(cudaErrorInvalidResourceHandle); }
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return fail(cudaErrorInvalidValue);
  if (!start || !end || (start->flags & cudaEventDisableTiming) || (end->flags & cudaEventDisableTiming))
    return fail(cudaErrorInvalidResourceHandle);
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

}  // extern "C"
