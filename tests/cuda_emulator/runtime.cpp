// tests/cuda_emulator/runtime.cpp — the CUDA runtime API on the host, for MIXTAPE_CUDA=EMULATOR
// builds: devices, guarded device memory, copies, memset, streams, events, stream capture and
// graphs, and the last-error state, defined as the extern "C" functions <cuda_runtime_api.h>
// declares (the compiler checks each definition against the toolkit's declaration).
//
// Semantics follow the runtime API reference where mixtape relies on them: cudaMalloc(0) gives
// nullptr; an explicit copy kind must match where the pointers live (cudaErrorInvalidValue
// otherwise, which is stricter than a UVA GPU and catches a swapped direction); a failed call
// sets the calling thread's last error, read and cleared by cudaGetLastError; events must be
// recorded (and created with timing) before cudaEventElapsedTime; cudaDeviceGetAttribute answers
// the compute capability only (8.0), and faults for any other attribute. Every device has
// MIXTAPE_CUDA_EMULATOR_MEMORY_MB of memory (default 4096), so out-of-memory paths can be driven.
//
// Host memory is pageable (any host pointer) or pinned (cudaHostAlloc/cudaMallocHost, freed by
// cudaFreeHost, which synchronises the device as cudaFree does here, but faults when a copy
// enqueued with the block has not run: the runtime does not promise to wait for it). An async copy between the
// device and pageable memory stages the bytes at the call (host to device) or waits (device to
// host), as the runtime documents for pageable memory; with a pinned end it is a DMA in stream
// order: the host memory is read or written when the stream runs the copy, not at the call, and
// the host does not wait. So a pinned staging buffer rewritten before its copy has run is read
// with the new bytes here, as a GPU's DMA might.
//
// Stream capture (cudaStreamBeginCapture .. cudaStreamEndCapture): work enqueued on a capturing
// stream is appended, in issue order, to the capture's node list instead of the stream's queue;
// cudaGraphInstantiate copies the list and cudaGraphLaunch enqueues it as one item on the launch
// stream, which runs the nodes in order (so every replay runs the same closures on the same
// addresses, as a GPU replays the same kernels). The capture rules a GPU enforces, with its error
// codes: only a created stream captures; a "potentially unsafe" call (cudaMalloc, cudaFree, a
// synchronisation, a stream or event query) is refused with cudaErrorStreamCaptureUnsupported and
// invalidates the capture when the calling thread is prohibited from it by the capture modes
// (cudaThreadExchangeStreamCaptureMode, documented under that function); a copy between pageable
// host memory and a capturing stream and a synchronisation of a capturing stream are refused in
// every mode (a copy with pinned memory is captured); a capturing stream waiting for an event recorded outside its
// capture gives cudaErrorStreamCaptureIsolation; an event recorded in a capture answers queries
// with cudaErrorCapturedEvent while the capture lasts; an invalidated capture ends with
// cudaErrorStreamCaptureInvalidated and no graph. Not emulated (fault(), "not supported by the
// emulator"): joining another stream to a capture through an event (cross-stream capture), and
// capture on the legacy stream's implicit dependencies (cudaErrorStreamCaptureImplicit). A graph
// holding a collective (enqueue_collective) runs at each launch, not when its stream is next run.
//
// Launch-only mode (emulator.h) and the per-site counts live here: every submission of device
// work passes through admit(), which counts it and, in that mode, drops it.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tests/cuda_emulator/emulator.h"

// One capture sequence (cudaStreamBeginCapture on `origin`): the work captured so far, in order.
struct EmuCapture {
  struct CUstream_st* origin;
  cudaStreamCaptureMode mode;
  std::thread::id thread;
  unsigned long long id;
  bool invalidated = false;
  bool ended = false;
  bool collectives = false;  // holds a collective (enqueue_collective): its launches run at once
  std::vector<std::function<void()>> nodes;
};

// A stream's queue: `enqueued` items have been handed to it, `executed` have run. An event
// records a position (stream, ticket) in one; an event wait runs the stream up to it. While
// `capture` is set, work goes to the capture instead.
struct CUstream_st {
  int device;
  unsigned flags;
  bool destroyed = false;
  std::deque<std::function<void()>> pending;
  uint64_t enqueued = 0, executed = 0;
  uint64_t copies = 0;  // cudaMemcpy(Async) calls enqueued here (copies_enqueued())
  std::shared_ptr<EmuCapture> capture;
};
// A captured graph, and its instantiation: the nodes in order (shared with launches in flight).
struct CUgraph_st {
  int device;
  std::shared_ptr<const std::vector<std::function<void()>>> nodes;
  bool collectives = false;  // see EmuCapture
};
struct CUgraphExec_st {
  int device;
  std::shared_ptr<const std::vector<std::function<void()>>> nodes;
  bool collectives = false;
};
struct EventTime {  // shared with the marker in the stream, which may outlive the event
  std::chrono::steady_clock::time_point when;
};
struct CUevent_st {
  int device;
  unsigned flags;
  CUstream_st* stream = nullptr;  // where it was last recorded; nullptr: never recorded
  uint64_t ticket = 0;
  std::shared_ptr<EmuCapture> capture;  // set when last recorded in a capture
  std::shared_ptr<EventTime> time = std::make_shared<EventTime>();
};

namespace mixtape::cuda_emulator {
namespace {

struct Block {
  size_t size;      // what was asked for
  size_t mapped;    // the mapping, rounded up to pages, plus one guard page that is never opened
  int device;
};

struct Pinned {  // a cudaHostAlloc block
  size_t size;
  unsigned flags;
  int device;
  std::shared_ptr<int> queued = std::make_shared<int>(0);  // copies with it enqueued, not run yet
};

struct State {
  std::recursive_mutex mu;  // serialises every emulated call that touches device memory
  std::map<uintptr_t, Block> blocks;
  std::map<uintptr_t, Pinned> pinned;  // page-locked host memory
  std::vector<size_t> used;  // bytes in use per device
  int access_depth = 0;
  std::vector<CUstream_st*> streams;  // every stream created (destroyed ones stay, marked)
  std::vector<CUstream_st> default_streams;  // per device: the legacy default stream
  std::vector<std::shared_ptr<EmuCapture>> captures;  // the capture sequences under way
  unsigned long long next_capture_id = 1;
};
State& state() {
  static State* s = new State;  // leaked: device memory may be freed during static destruction
  return *s;
}

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;  // the thread's interaction mode

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

// The pinned block holding [p, p + bytes), or end(). The caller holds the lock.
std::map<uintptr_t, Pinned>::iterator find_pinned(const void* p, size_t bytes) {
  auto& pinned = state().pinned;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = pinned.upper_bound(a);
  if (it == pinned.begin()) return pinned.end();
  --it;
  if (a < it->first || a - it->first + bytes > it->second.size) return pinned.end();
  return it;
}

cudaError_t fail(cudaError_t e) {
  t_last_error = e;
  return e;
}

bool valid_device(int d) { return d >= 0 && d < device_count(); }

// The three spellings of the current device's legacy default stream.
bool names_default(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread; }

bool deferred() {
  static const bool d = [] {
    const char* v = std::getenv("MIXTAPE_CUDA_EMULATOR_STREAMS");
    const std::string mode = v && *v ? v : "deferred";
    if (mode != "deferred" && mode != "immediate")
      fault("MIXTAPE_CUDA_EMULATOR_STREAMS=%s: expected deferred or immediate", mode.c_str());
    return mode == "deferred";
  }();
  return d;
}

// The stream a handle names; the three spellings of the default stream give the current
// device's legacy stream. The caller holds the lock.
CUstream_st* resolve(cudaStream_t s) {
  State& st = state();
  if (st.default_streams.empty()) {
    st.default_streams.resize(device_count());
    for (int d = 0; d < device_count(); ++d) st.default_streams[d].device = d;
  }
  if (names_default(s)) return &st.default_streams[t_device];
  if (s->destroyed) fault("use of a destroyed stream %p", static_cast<void*>(s));
  return s;
}
bool is_default(const CUstream_st* s) {
  const State& st = state();
  return !st.default_streams.empty() && s >= &st.default_streams.front() && s <= &st.default_streams.back();
}

uint64_t g_items_run = 0, g_host_waits = 0;  // under the lock

bool launch_only_mode() {
  static const bool on = [] {
    const char* v = std::getenv("MIXTAPE_CUDA_EMULATOR_LAUNCH_ONLY");
    const std::string mode = v ? v : "";
    if (mode != "" && mode != "0" && mode != "1")
      fault("MIXTAPE_CUDA_EMULATOR_LAUNCH_ONLY=%s: expected 0 or 1", mode.c_str());
    return mode == "1";
  }();
  return on;
}

// Submissions per site, keyed by the site string's address (every site is a string literal or a
// __PRETTY_FUNCTION__, so one address per site and no string hashing per launch); under the lock.
struct SiteTally {
  bool kernel = false;
  uint64_t count = 0;
};
std::unordered_map<const char*, SiteTally>& site_tallies() {
  static auto* m = new std::unordered_map<const char*, SiteTally>;  // leaked, as state()
  return *m;
}
constexpr const char* kUnnamedLibraryCall = "cuBLAS or NCCL call";

// "kernel(<parameter types>)" from launch_kernel's __PRETTY_FUNCTION__ (GCC and Clang spell the
// kernel's parameter pack "P = {...}"); other sites as they are.
std::string site_label(const char* site, bool kernel) {
  const std::string s = site;
  if (!kernel) return s;
  const size_t from = s.find("P = {");
  if (from == std::string::npos) return s;
  int depth = 0;
  for (size_t i = from + 4; i < s.size(); ++i) {
    depth += s[i] == '{' ? 1 : s[i] == '}' ? -1 : 0;
    if (depth == 0) return "kernel(" + s.substr(from + 5, i - from - 5) + ")";
  }
  return s;
}

// A host-blocking call: counts as a wait when it had to run queued work.
class HostWait {
 public:
  HostWait() : before_(g_items_run) {}
  ~HostWait() {
    if (g_items_run != before_) ++g_host_waits;
  }

 private:
  uint64_t before_;
};

void run_one(CUstream_st* s) {
  ++g_items_run;
  std::function<void()> work = std::move(s->pending.front());
  s->pending.pop_front();
  work();
  ++s->executed;
}
// Runs s's queue up to and including item `ticket`.
void run_until(CUstream_st* s, uint64_t ticket) {
  while (s->executed < ticket && !s->pending.empty()) run_one(s);
}
void flush(CUstream_st* s) { run_until(s, s->enqueued); }
// The legacy default stream's implicit synchronisation: it waits for the device's blocking
// streams (those created without cudaStreamNonBlocking).
void flush_blocking(int device) {
  for (CUstream_st* s : state().streams)
    if (s->device == device && !(s->flags & cudaStreamNonBlocking)) flush(s);  // destroyed ones' leftovers too
}
void flush_device(int device) {
  for (CUstream_st* s : state().streams)
    if (s->device == device) flush(s);
}
void flush_everything() {
  for (CUstream_st* s : state().streams)
    flush(s);
}

// Ordering before work that the host waits for on stream s (a synchronize, a D2H copy).
void drain(CUstream_st* s) {
  if (is_default(s))
    flush_blocking(s->device);
  else
    flush(s);
}

void push(CUstream_st* s, std::function<void()> work) {
  if (s->capture) {  // captured, not run: an invalidated capture drops it, as a GPU's graph is lost
    if (!s->capture->invalidated) s->capture->nodes.push_back(std::move(work));
    return;
  }
  ++s->enqueued;
  if (!deferred() || is_default(s)) {
    if (is_default(s)) flush_blocking(s->device);
    work();
    ++s->executed;
    return;
  }
  s->pending.push_back(std::move(work));
}

// Whether the calling thread is prohibited from "potentially unsafe" calls by a capture under
// way (cudaThreadExchangeStreamCaptureMode's rules); if so, those captures are invalidated.
// The caller holds the lock.
bool prohibited_by_capture() {
  if (t_capture_mode == cudaStreamCaptureModeRelaxed) return false;
  bool prohibited = false;
  for (auto& c : state().captures) {
    const bool mine = c->thread == std::this_thread::get_id();
    if (c->mode == cudaStreamCaptureModeRelaxed) continue;
    if (mine || (t_capture_mode == cudaStreamCaptureModeGlobal && c->mode == cudaStreamCaptureModeGlobal)) {
      c->invalidated = true;
      prohibited = true;
    }
  }
  return prohibited;
}
// A call that conflicts with capturing stream s in every mode: invalidates its capture.
cudaError_t refuse_on_capture(CUstream_st* s) {
  s->capture->invalidated = true;
  return fail(cudaErrorStreamCaptureUnsupported);
}

}  // namespace

bool streams_deferred() { return deferred(); }

bool stream_has_queued_work(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  if (!names_default(s) && s->destroyed) return !s->pending.empty();
  return !resolve(s)->pending.empty();
}

uint64_t copies_enqueued(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  return resolve(s)->copies;
}

uint64_t host_waits() {
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  return g_host_waits;
}

bool launch_only() { return launch_only_mode(); }

namespace {
// Runs fn with [p, p + bytes) (inside one live block) readable and writable: a DeviceAccess scope,
// except in launch-only mode, where only that block is opened — a scope opens and closes every
// block, two mprotect calls each, which would put the emulator's cost into the host time that
// mode measures. The caller holds the lock.
template <class F>
void with_access(const void* p, size_t bytes, F&& fn) {
  if (!launch_only_mode()) {
    DeviceAccess access;
    fn();
    return;
  }
  State& st = state();
  auto it = find_block(p, bytes);
  if (it == st.blocks.end()) fault("%p (+%zu bytes) is not inside one live device allocation", p, bytes);
  const bool open = st.access_depth == 0;
  if (open) protect(it->second, it->first, true);
  fn();
  if (open) protect(it->second, it->first, false);
}
}  // namespace

// Counts one submission of device work at `site`; false in launch-only mode, where it is not run.
// The caller holds the lock.
static bool admit(const char* site, bool kernel) {
  SiteTally& t = site_tallies()[site ? site : kUnnamedLibraryCall];
  t.kernel = kernel;
  ++t.count;
  return !launch_only_mode();
}

// The kernel engine's door (kernel_engine.cpp): a launch, counted under its kernel's site.
void submit_kernel(cudaStream_t s, const char* site, std::function<void()> work) {
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  CUstream_st* st = resolve(s);
  if (admit(site, true)) push(st, std::move(work));
}

void enqueue(cudaStream_t s, std::function<void()> work, const char* site) {
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  CUstream_st* st = resolve(s);
  if (admit(site, false)) push(st, std::move(work));
}

void enqueue_collective(cudaStream_t s, std::function<void()> work, const char* site) {
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  CUstream_st* st = resolve(s);
  if (!admit(site, false)) return;
  if (st->capture) {
    if (!st->capture->invalidated) st->capture->collectives = true;
    push(st, std::move(work));
    return;
  }
  push(st, std::move(work));
  flush(st);
}

std::vector<LaunchSite> launch_sites() {
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  std::map<std::pair<std::string, bool>, uint64_t> merged;  // two instantiations may print alike
  for (const auto& [site, t] : site_tallies()) merged[{site_label(site, t.kernel), t.kernel}] += t.count;
  std::vector<LaunchSite> out;
  for (const auto& [key, count] : merged) out.push_back({key.first, key.second, count});
  std::stable_sort(out.begin(), out.end(), [](const LaunchSite& a, const LaunchSite& b) { return a.count > b.count; });
  return out;
}
void reset_launch_sites() {
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  site_tallies().clear();
}

int device_count() {
  static const int n = static_cast<int>(env_size("MIXTAPE_CUDA_EMULATOR_DEVICES", 2));
  return n;
}
int current_device() { return t_device; }
int stream_device(cudaStream_t s) { return names_default(s) ? t_device : s->device; }

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
// Compute capability 8.0 (an A100's), the architecture generation mixtape asks about; any other
// attribute is not emulated and faults, so a new use is noticed.
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return fail(cudaErrorInvalidValue);
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = 8; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    default: fault("cudaDeviceGetAttribute: attribute %d is not supported by the emulator", static_cast<int>(attr));
  }
}

cudaError_t cudaDeviceSynchronize(void) {
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  if (prohibited_by_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  HostWait wait;
  flush_device(t_device);
  return cudaSuccess;
}

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
    MT_EMU_NAME(cudaErrorStreamCaptureUnsupported)
    MT_EMU_NAME(cudaErrorStreamCaptureInvalidated)
    MT_EMU_NAME(cudaErrorStreamCaptureUnmatched)
    MT_EMU_NAME(cudaErrorStreamCaptureIsolation)
    MT_EMU_NAME(cudaErrorCapturedEvent)
    MT_EMU_NAME(cudaErrorStreamCaptureWrongThread)
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
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
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
  if (prohibited_by_capture()) return fail(cudaErrorStreamCaptureUnsupported);
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
  if (prohibited_by_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  auto it = st.blocks.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == st.blocks.end()) return fail(cudaErrorInvalidValue);
  HostWait wait;
  flush_everything();  // cudaFree synchronises: queued work may still use the block
  st.used[it->second.device] -= it->second.size;
  munmap(ptr, it->second.mapped);
  st.blocks.erase(it);
  return cudaSuccess;
}

// Page-locked host memory: ordinary host memory here, remembered so that copies with it are
// deferred DMAs. Allocating is a potentially unsafe call under capture, like cudaMalloc.
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  const unsigned known = cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
  if (!ptr || (flags & ~known)) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  State& st = state();
  std::lock_guard<std::recursive_mutex> lock(st.mu);
  if (prohibited_by_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  void* p = std::malloc(size);
  if (!p) return fail(cudaErrorMemoryAllocation);
  st.pinned.emplace(reinterpret_cast<uintptr_t>(p), Pinned{size, flags, t_device});
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); }

// A block that an enqueued copy still uses faults; otherwise it synchronises, as cudaFree does here.
cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  State& st = state();
  std::lock_guard<std::recursive_mutex> lock(st.mu);
  if (prohibited_by_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  auto it = st.pinned.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == st.pinned.end()) return fail(cudaErrorInvalidValue);
  // The runtime does not promise to wait for the copies that still use the block (the programming
  // guide's implicit synchronisations list allocation, not freeing): freeing it under them is
  // undefined behaviour, a fault here. The caller must synchronise them first.
  if (*it->second.queued > 0)
    fault("cudaFreeHost: pinned block %p is freed while %d enqueued copies that read or write it have not run "
          "(synchronise their stream or event first)",
          ptr, *it->second.queued);
  HostWait wait;
  flush_everything();
  st.pinned.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaHostGetFlags(unsigned int* flags, void* host) {
  if (!flags) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  auto it = find_pinned(host, 1);
  if (it == state().pinned.end()) return fail(cudaErrorInvalidValue);
  *flags = it->second.flags;
  return cudaSuccess;
}

// Device memory, pinned host memory, or (as CUDA 11 and later answer, with cudaSuccess)
// unregistered host memory.
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (!attributes) return fail(cudaErrorInvalidValue);
  *attributes = cudaPointerAttributes{};
  int device = -1;
  if (ptr && is_device_range(ptr, 1, &device)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = device;
    attributes->devicePointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  auto it = ptr ? find_pinned(ptr, 1) : state().pinned.end();
  if (it == state().pinned.end()) {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    return cudaSuccess;
  }
  attributes->type = cudaMemoryTypeHost;
  attributes->device = it->second.device;
  attributes->hostPointer = const_cast<void*>(ptr);
  attributes->devicePointer = const_cast<void*>(ptr);  // unified addressing: the same address
  return cudaSuccess;
}

namespace {
// Checks where a copy's ends live (d_dev, s_dev: device memory) against its kind;
// cudaMemcpyDefault infers the direction.
cudaError_t check_copy(bool d_dev, bool s_dev, cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return (!d_dev && !s_dev) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyHostToDevice: return (d_dev && !s_dev) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost: return (!d_dev && s_dev) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice: return (d_dev && s_dev) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDefault: return cudaSuccess;
    default: return cudaErrorInvalidMemcpyDirection;
  }
}
bool valid_stream(cudaStream_t s) { return names_default(s) || !s->destroyed; }
}  // namespace

// Host -> device from pageable memory: the source is staged at the call (the caller may reuse it
// at once), the device write happens in stream order. Device -> pageable host: returns once the
// copy is done, after the stream's earlier work. Device -> device, and either way between the
// device and pinned memory: stream order, the host memory touched when the copy runs.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (count == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  const bool d_dev = is_device_range(dst, count), s_dev = is_device_range(src, count);
  if (cudaError_t e = check_copy(d_dev, s_dev, kind); e != cudaSuccess) return fail(e);
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  CUstream_st* s = resolve(stream);
  ++s->copies;
  const bool s_pin = !s_dev && find_pinned(src, count) != state().pinned.end();
  const bool d_pin = !d_dev && find_pinned(dst, count) != state().pinned.end();
  if ((s_dev && d_pin) || (s_pin && d_dev)) {
    // Between the device and pinned memory: a DMA in stream order, captured like a kernel; the
    // host bytes are read (or written) when the stream runs it.
    std::shared_ptr<int> queued;  // a captured copy runs at replays: not counted
    if (!s->capture) {
      queued = find_pinned(d_pin ? dst : src, count)->second.queued;
      ++*queued;
    }
    push(s, [dst, src, count, queued] {
      DeviceAccess access;
      std::memcpy(dst, src, count);
      if (queued) --*queued;
    });
    return cudaSuccess;
  }
  // Pageable host memory: a copy from or to it cannot be captured; a device-to-host copy makes
  // the host wait, which a capturing thread may not.
  if ((!s_dev || !d_dev) && s->capture) return refuse_on_capture(s);
  if (!d_dev && prohibited_by_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  if (!s_dev && d_dev && !admit("cudaMemcpyAsync host to device", false)) return cudaSuccess;
  if (s_dev && d_dev && !admit("cudaMemcpyAsync device to device", false)) return cudaSuccess;
  if (!s_dev) {  // from the host (H2H included): take the bytes now
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + count);
    if (!d_dev) {
      HostWait wait;
      drain(s);
      std::memcpy(dst, staged->data(), count);
      return cudaSuccess;
    }
    push(s, [dst, staged] {
      DeviceAccess access;
      std::memcpy(dst, staged->data(), staged->size());
    });
    return cudaSuccess;
  }
  if (!d_dev) {  // to the host: the host reads it next
    HostWait wait;
    drain(s);
    with_access(src, count, [&] { std::memcpy(dst, src, count); });
    return cudaSuccess;
  }
  push(s, [dst, src, count] {
    DeviceAccess access;
    std::memmove(dst, src, count);
  });
  return cudaSuccess;
}
// On the legacy default stream: it runs after the device's blocking streams, and returns when done.
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
  enqueue(
      stream,
      [dst, src, count] {
        DeviceAccess access;
        std::memmove(dst, src, count);
      },
      "cudaMemcpyPeerAsync");
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (count == 0) return cudaSuccess;
  if (!is_device_range(ptr, count)) return fail(cudaErrorInvalidValue);
  // Counted, and run in launch-only mode too: a memset is how the host gives device memory a known
  // value that it reads back later (the deferred checks' no-failure slots, core/cuda/deferred_check.h).
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  CUstream_st* s = resolve(stream);
  admit("cudaMemsetAsync", false);
  push(s, [ptr, value, count] { with_access(ptr, count, [&] { std::memset(ptr, value, count); }); });
  return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t count) { return cudaMemsetAsync(ptr, value, count, nullptr); }

// ---- streams ----

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (!stream || (flags & ~unsigned(cudaStreamNonBlocking))) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  auto* created = new CUstream_st;
  created->device = t_device;
  created->flags = flags;
  state().streams.push_back(created);
  *stream = created;
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
// Returns at once; queued work still completes later, as the runtime documents ("the function
// will return immediately"), when something orders it (an event wait, a device-wide
// synchronisation). The stream object is kept (marked) so later use is caught and event waits
// that point into it stay valid.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (names_default(stream) || stream->destroyed)
    return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  if (stream->capture) return refuse_on_capture(stream);
  stream->destroyed = true;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  CUstream_st* s = resolve(stream);
  if (s->capture) return refuse_on_capture(s);
  if (prohibited_by_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  HostWait wait;
  drain(s);
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  CUstream_st* s = resolve(stream);
  if (s->capture) return refuse_on_capture(s);
  if (prohibited_by_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  return s->pending.empty() ? cudaSuccess : cudaErrorNotReady;
}
// Work enqueued on `stream` after this call starts once the event's recorded work has run.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int /*flags*/) {
  if (!valid_stream(stream) || !event) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  CUstream_st* s = resolve(stream);
  if (event->capture && !event->capture->ended) {
    // Recorded in a capture: a stream of the same capture is already ordered after it (one node
    // list); another stream would join the capture, which the emulator does not model.
    if (s->capture == event->capture) return cudaSuccess;
    fault("cudaStreamWaitEvent: joining stream %p to the capture of stream %p through an event (cross-stream "
          "capture) is not supported by the emulator",
          static_cast<void*>(s), static_cast<void*>(event->capture->origin));
  }
  CUstream_st* source = event->capture ? nullptr : event->stream;
  if (s->capture) {
    // A dependency on work outside the capture sequence (a GPU refuses it the same way).
    if (!source) return cudaSuccess;
    s->capture->invalidated = true;
    return fail(cudaErrorStreamCaptureIsolation);
  }
  if (!source) return cudaSuccess;  // never recorded (or recorded in a finished capture): nothing to wait for
  const uint64_t ticket = event->ticket;
  if (s == source) return cudaSuccess;
  push(s, [source, ticket] { run_until(source, ticket); });
  return cudaSuccess;
}

// ---- events ----

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!event || (flags & ~known)) return fail(cudaErrorInvalidValue);
  auto* created = new CUevent_st;
  created->device = t_device;
  created->flags = flags;
  *event = created;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  delete event;  // a marker still queued holds its own reference to the timestamp
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event || !valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (stream_device(stream) != event->device) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  CUstream_st* s = resolve(stream);
  event->stream = s;
  event->capture = s->capture;  // in a capture: a node of the graph, not a position in the queue
  if (s->capture) return cudaSuccess;
  event->ticket = s->enqueued + 1;
  event->time = std::make_shared<EventTime>();
  push(s, [time = event->time] { time->when = std::chrono::steady_clock::now(); });
  return cudaSuccess;
}
static bool completed(cudaEvent_t e) { return !e->stream || e->capture || e->stream->executed >= e->ticket; }
// An event recorded in a capture still under way cannot be asked about; after the capture it
// stands for nothing (a graph's replays do not record it).
static cudaError_t check_not_captured(cudaEvent_t e) {
  if (e->capture && !e->capture->ended) return fail(cudaErrorCapturedEvent);
  return prohibited_by_capture() ? fail(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  if (cudaError_t e = check_not_captured(event); e != cudaSuccess) return e;
  return completed(event) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  if (cudaError_t e = check_not_captured(event); e != cudaSuccess) return e;
  HostWait wait;
  if (event->stream && !event->capture) run_until(event->stream, event->ticket);
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return fail(cudaErrorInvalidValue);
  if (!start || !end || (start->flags & cudaEventDisableTiming) || (end->flags & cudaEventDisableTiming))
    return fail(cudaErrorInvalidResourceHandle);
  if (!start->stream || !end->stream) return fail(cudaErrorInvalidResourceHandle);  // never recorded
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  if (start->capture || end->capture) return fail(cudaErrorCapturedEvent);
  if (!completed(start) || !completed(end)) return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->time->when - start->time->when).count();
  return cudaSuccess;
}

// ---- stream capture and graphs ----

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (!mode || (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
                *mode != cudaStreamCaptureModeRelaxed))
    return fail(cudaErrorInvalidValue);
  std::swap(*mode, t_capture_mode);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return fail(cudaErrorInvalidValue);
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  CUstream_st* s = resolve(stream);
  if (is_default(s)) return fail(cudaErrorStreamCaptureUnsupported);  // the legacy stream never captures
  if (s->capture) return fail(cudaErrorIllegalState);
  auto c = std::make_shared<EmuCapture>();
  c->origin = s;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->id = state().next_capture_id++;
  s->capture = c;
  state().captures.push_back(c);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (!graph) return fail(cudaErrorInvalidValue);
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  CUstream_st* s = resolve(stream);
  if (!s->capture || s->capture->origin != s) return fail(cudaErrorStreamCaptureUnmatched);
  std::shared_ptr<EmuCapture> c = s->capture;
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return fail(cudaErrorStreamCaptureWrongThread);
  s->capture.reset();
  c->ended = true;
  auto& all = state().captures;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i] == c) {
      all.erase(all.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  *graph = nullptr;
  if (c->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  *graph = new CUgraph_st{s->device, std::make_shared<const std::vector<std::function<void()>>>(std::move(c->nodes)),
                          c->collectives};
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (!status) return fail(cudaErrorInvalidValue);
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  CUstream_st* s = resolve(stream);
  *status = !s->capture                ? cudaStreamCaptureStatusNone
            : s->capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                      : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

// The capture status and sequence id; the graph and dependency outputs are not emulated (nullptr, 0).
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status, unsigned long long* id,
                                     cudaGraph_t* graph, const cudaGraphNode_t** dependencies,
                                     const cudaGraphEdgeData** edge_data, size_t* num_dependencies) {
  if (cudaError_t e = cudaStreamIsCapturing(stream, status); e != cudaSuccess) return e;
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  CUstream_st* s = resolve(stream);
  if (id && s->capture) *id = s->capture->id;
  if (graph) *graph = nullptr;
  if (dependencies) *dependencies = nullptr;
  if (edge_data) *edge_data = nullptr;
  if (num_dependencies) *num_dependencies = 0;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (!exec || !graph || flags != 0) return fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->device, graph->nodes, graph->collectives};
  return cudaSuccess;
}

// The whole graph is one item of the launch stream: it runs after the stream's earlier work and
// before its later work, its nodes in capture order.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return fail(cudaErrorInvalidValue);
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (stream_device(stream) != exec->device) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  if (!admit("cudaGraphLaunch", false)) return cudaSuccess;
  CUstream_st* s = resolve(stream);
  push(s, [nodes = exec->nodes] {
    for (const auto& node : *nodes) node();
  });
  if (exec->collectives) flush(s);  // its collectives meet the peers' now (enqueue_collective)
  return cudaSuccess;
}

// A launch already enqueued keeps its own reference to the nodes.
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  if (!exec) return fail(cudaErrorInvalidValue);
  delete exec;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (!graph) return fail(cudaErrorInvalidValue);
  delete graph;
  return cudaSuccess;
}

}  // extern "C"
