// tests/cuda_emulator/emulator.h — the CUDA emulator's internal interface, shared by its parts:
// the runtime (runtime.cpp: cudaMalloc, copies, streams, events, devices), the kernel engine
// (kernel_engine.cpp: grids of blocks of threads, __syncthreads), and the library fakes
// (cublas.cpp, cudnn.cpp), each written from NVIDIA's documented semantics, not from how mixtape
// calls them, so a wrong call in mixtape's glue shows up as a wrong result or a fault here.
//
// Why an emulator: the development and CI machines compile CUDA but have no GPU. The build
// MIXTAPE_CUDA=EMULATOR compiles every .cu file as host C++ and links this library in place of
// cudart, cuBLAS and cuDNN, so the whole GPU test suite runs — kernels, launch geometry, glue,
// allocator, copies — on the CPU. It proves the logic, not the speed, the memory model or the
// device's own arithmetic (device transcendentals are the host's here).
//
// Invariants:
//   - Stream order is kept, nothing more (MIXTAPE_CUDA_EMULATOR_STREAMS=deferred, the default):
//     work enqueued on a stream created by cudaStreamCreate* waits in that stream's queue until
//     something the runtime API documents as ordering it runs it — cudaStreamSynchronize, an
//     event wait or synchronize, a device-to-host copy on that stream, cudaDeviceSynchronize,
//     cudaFree (cudaStreamDestroy returns at once and leaves it queued, as on a GPU). The legacy
//     default stream (nullptr) runs its work at once, after the device's
//     blocking streams, as its implicit synchronisation says; non-blocking streams are left
//     alone. So a missing event wait between two streams, or a host read before a sync, reads
//     stale data here as it may on a GPU — when the producer is a created stream (legacy-stream
//     work has always run). `immediate` runs all work at enqueue time instead.
//     All work runs on the host thread that triggers it; nothing ever runs concurrently.
//   - Stream capture records, it never runs: work enqueued on a capturing stream becomes a node
//     of the capture, and each cudaGraphLaunch of its instantiation runs the same nodes, in
//     capture order, as one item of the launch stream. Calls a GPU refuses during capture are
//     refused here with the same error codes, invalidating the capture (runtime.cpp lists them);
//     what a GPU allows but the emulator does not model (cross-stream capture) is a fault().
//   - Device memory (every cudaMalloc block) is mapped PROT_NONE except inside a DeviceAccess
//     scope, so host code that dereferences a device pointer faults here as it would crash on a
//     GPU. Kernels, copies and the library fakes open a scope; nothing else may.
//   - Launch-only mode (MIXTAPE_CUDA_EMULATOR_LAUNCH_ONLY=1; 0 or unset: off; read once): device
//     work is counted (launch_sites()), not executed: kernel launches, cuBLAS/cuDNN/NCCL calls,
//     host-to-device, device-to-device and peer copies, graph launches. Memsets are counted and
//     still run: they are how the host gives device memory a value it reads back (the deferred
//     checks' no-failure slots). So a program's host time is mixtape's own per-op work
//     (dispatch, autograd, shape checks, descriptor set-up, launch glue) plus the emulator's small
//     bookkeeping per launch, with no emulated kernel time in it (bench/host_step.cpp reports it
//     per launch site). Everything else runs as usual: argument and descriptor checks,
//     allocation, streams, events, capture (a captured graph replays nothing). Device memory
//     holds unspecified bytes: a host read (a device-to-host copy) returns whatever is there. A
//     sync-free AMP step (GradScaler sync_free, a capturable optimizer) reads nothing on the host
//     and runs unchanged; a program that decides on what it reads (a default GradScaler's skip
//     decision, loss.item()) follows an arbitrary branch. Host reads and memsets open only the
//     block they touch (a DeviceAccess scope opens every block: its mprotect calls would be timed).
//   - A misuse a GPU would answer with a fault or undefined behaviour (a host pointer given to a
//     cuBLAS/cuDNN call, a divergent __syncthreads, a destroyed stream given to a launch) aborts
//     with fault(), naming the call: a test then fails loudly, never silently passes. (Kernel
//     arguments are not inspected: a kernel handed host memory runs on it here.)
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mixtape::cuda_emulator {

// How many devices the emulator reports: MIXTAPE_CUDA_EMULATOR_DEVICES (default 2, so the
// multi-device paths are exercised too), read once.
int device_count();
// The calling host thread's current device (cudaSetDevice), 0 at first.
int current_device();
// The device a stream belongs to; the legacy default stream (nullptr) is the current device's.
int stream_device(cudaStream_t s);

// Puts `work` on stream `s` (nullptr, cudaStreamLegacy and cudaStreamPerThread are the current
// device's default stream) under the ordering rules above; on a capturing stream, into its
// capture. `work` must own everything it reads from the host: it may run after the call that
// enqueued it has returned, and, captured, once per graph launch. `site` names the work for
// launch_sites() (a string that lives as long as the process; nullptr: an unnamed library call);
// in launch-only mode the work is counted there and dropped.
void enqueue(cudaStream_t s, std::function<void()> work, const char* site = nullptr);
// A collective's work (nccl.cpp): as enqueue(), but it runs as soon as the work queued before it
// on `s` has run, as the emulator's eager collectives do (a rank must not leave its half of a
// collective queued while it blocks elsewhere, say in MPI, on its peer: the peer would wait in the
// collective forever). On a capturing stream it becomes a node of the capture, and every
// cudaGraphLaunch of that graph then runs the launch stream through the launch at once, so a
// replayed collective meets the peer's replayed one the same way.
void enqueue_collective(cudaStream_t s, std::function<void()> work, const char* site);

// Whether launch-only mode is on (MIXTAPE_CUDA_EMULATOR_LAUNCH_ONLY, read once).
bool launch_only();
// Device work submitted since the process started (or the last reset_launch_sites()), in both
// modes, counted per site: a kernel by its launch_kernel instantiation ("kernel(<parameter
// types>)"), a library or runtime call by its name ("cudnnConvolutionForward", "cudaMemsetAsync",
// "cudaMemcpyAsync device to device"). Largest count first. A kernel site counts launches, not
// whether they ran (a launch refused for its geometry is not counted).
struct LaunchSite {
  std::string site;
  bool kernel = false;  // a mixtape kernel (cuda::launch_kernel), else a library or runtime call
  uint64_t count = 0;
};
std::vector<LaunchSite> launch_sites();
void reset_launch_sites();

// How many times the host has waited for queued device work so far: each runtime call that
// blocks the host (a synchronize, a device-to-host copy, cudaFree) and had to run queued work to
// return counts once. Tests use it to prove that a code path never stops the host.
uint64_t host_waits();
// Whether stream `s` holds work that has not run yet (deferred streams; never the legacy stream).
bool stream_has_queued_work(cudaStream_t s);
// How many cudaMemcpyAsync/cudaMemcpy calls have been enqueued on stream `s` (nullptr: the current
// device's legacy stream) so far, captured ones included: tests use it to prove which stream a
// copy went on.
uint64_t copies_enqueued(cudaStream_t s);
// Whether streams keep stream order only (MIXTAPE_CUDA_EMULATOR_STREAMS=deferred, the default);
// tests that observe stream order skip under `immediate`.
bool streams_deferred();

// cuDNN (cudnn.cpp): what the last convolution of a direction (0 forward, 1 backward data, 2
// backward filter) ran with: its algorithm and the descriptor's math type (-1 before any). And two
// knobs for tests of how mixtape chooses among the heuristics' suggestions, process-wide: rank the
// non-deterministic algorithm first (as cuDNN may), and report `math` as every suggestion's math
// type (-1: the descriptor's, the default).
struct CudnnRun {
  int algo = -1;
  int math = -1;
};
CudnnRun cudnn_last_run(int direction);
void cudnn_rank_nondeterministic_first(bool on);
void cudnn_report_math(int math);
// Counters: cudnnFind*AlgorithmEx calls (benchmark mode), and tensor/filter/convolution
// descriptors created, since the process started.
uint64_t cudnn_find_calls();
// cuBLAS (cublas.cpp): the workspace the last GEMM was issued with (nullptr: cuBLAS's default
// workspace pool, before any GEMM too).
const void* cublas_last_workspace();
uint64_t cudnn_descriptors_created();

// Device memory is readable and writable while at least one DeviceAccess object lives on any
// thread (a process-wide count; the emulator is serialised by one lock, taken by each scope).
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

// Whether [p, p + bytes) lies inside one live cudaMalloc block; *device (if given) gets its device.
bool is_device_range(const void* p, size_t bytes, int* device = nullptr);
// fault() unless [p, p + bytes) is device memory: `what` names the call and the operand, e.g.
// "cublasGemmEx: A". bytes == 0 passes for any pointer (an empty operand is never read).
void require_device_range(const void* p, size_t bytes, const char* what);

// Prints "mixtape CUDA emulator: <message>" to stderr and aborts: the emulator's answer to what a
// GPU would turn into an illegal-address error, a hang or undefined behaviour.
[[noreturn]] void fault(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace mixtape::cuda_emulator
