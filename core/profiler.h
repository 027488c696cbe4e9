// core/profiler.h — where a step's time goes, per op: self time, calls, kernel launches.
// Switched on by MIXTAPE_PROFILE=1 in the environment (the table is printed on stderr at exit)
// or by a profiler::Profile guard in code (the caller asks for the report).
// Invariant: switched off it costs one relaxed atomic load per kernel and per launch. Switched
// on, every kernel run_kernel() runs is timed once: a CPU kernel by the wall clock around it, a
// CUDA kernel by two CUDA events on its device's current stream (stream time between them); an
// op's time is its self time — a kernel that dispatches other ops timed the same way does not
// count their time twice.
// docs/profiling.md says how to read the table.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"

namespace mixtape {
struct OpSchema;
struct OpCall;
}  // namespace mixtape

namespace mixtape::profiler {

// One row: an op on one device type with the dtype of its first input and, for ops that choose
// from a CPU kernel list (conv2d's passes, matmul, linear: ops/cpu/kernel_table.h), the entry that
// ran: conv2d f32 on direct_avx512 and on im2col_gemm are two rows.
struct OpRecord {
  std::string op;
  DeviceType device = DeviceType::CPU;
  std::string dtype;  // of the first input ("f32"), "-" for an op without inputs
  std::string kernel;  // the CPU kernel list's entry it ran (note_kernel), "" for an op without lists
  int64_t calls = 0;
  double self_ms = 0;         // CPU: wall time; CUDA: device time between the op's events
  int64_t launches = 0;       // mixtape's own kernel launches (cuda::launch_kernel)
  int64_t library_calls = 0;  // cuBLAS / cuDNN calls (each launches one or more kernels)
};

struct Report {
  std::vector<OpRecord> ops;  // by self time, largest first
  int64_t steps = 0;          // profiler::step() calls
  double wall_ms = 0;         // from start-up (or the last reset) to the report
  int64_t launches_outside_ops = 0;
  int64_t library_calls_outside_ops = 0;
  double total_self_ms() const;
  int64_t total_launches() const;       // inside and outside ops
  int64_t total_library_calls() const;  // inside and outside ops
  // The table MIXTAPE_PROFILE prints: one line per row, then totals and per-step figures.
  std::string table() const;
};

namespace detail {
extern std::atomic<bool> enabled_flag;
}
inline bool enabled() { return detail::enabled_flag.load(std::memory_order_relaxed); }
// Process-wide. The wall clock runs from start-up or the last reset().
void set_enabled(bool on);
// Forgets everything recorded (pending CUDA events included) and restarts the wall clock.
void reset();
// Everything recorded so far; waits for the CUDA events still pending (synchronises).
Report report();
// Marks the end of a training step (like torch.profiler's step()): the table's per-step column
// divides by the number of marks. Also reads the CUDA events already completed (the kernels
// themselves do so every 4096 pending pairs, so a run that never marks a step stays bounded too).
void step();

// Called by a CPU kernel (on its own thread) with the kernel list entry it runs: its call is
// counted in the row of that kernel. Nothing when profiling is off or outside a kernel.
void note_kernel(const std::string& name);

// Called by cuda::launch_kernel and by the cuBLAS / cuDNN call sites.
void count_launch();
void count_library_call();

// RAII: profiling on (recording from zero: under MIXTAPE_PROFILE the table printed at exit then
// covers only what came after the last guard began) for a scope; restores the switch on exit.
class Profile {
 public:
  Profile();
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

 private:
  bool was_enabled_;
};

// ---- used by the dispatcher and the CUDA backend ----

// How a device backend times a kernel on the device: start(device) before it (returns a token),
// stop(token) after it; elapsed_ms(token, wait) gives its device time once known (wait: block
// until it is; else -1 while it is not), release(token) recycles it. Registered by the CUDA
// backend at start-up (core/cuda/profiler_events.cpp); without one, device kernels are timed by
// the host clock.
struct DeviceTimer {
  void* (*start)(int device) = nullptr;
  void (*stop)(void* token) = nullptr;
  double (*elapsed_ms)(void* token, bool wait) = nullptr;
  void (*release)(void* token) = nullptr;
};
void set_device_timer(DeviceType device, DeviceTimer timer);

// RAII around one kernel (run_kernel): times it when profiling is on; nothing otherwise.
class KernelScope {
 public:
  KernelScope(const OpSchema& op, const OpCall& call, DeviceType device) {
    if (enabled()) begin(op, call, device);
  }
  ~KernelScope() {
    if (active_) finish();
  }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  void begin(const OpSchema& op, const OpCall& call, DeviceType device);
  void finish();  // end(), reporting (not throwing) what fails
  void end();
  bool active_ = false;
  int entry_ = -1;  // the row: (op, device, dtype), moved at the end to the noted kernel's
  const OpSchema* op_ = nullptr;
  int dtype_ = -1;
  std::string kernel_;    // note_kernel's
  double children_ms_ = 0;  // host time of the timed kernels nested in this one
  DeviceType device_ = DeviceType::CPU;
  int64_t start_ns_ = 0;
  int64_t launches_ = 0;
  int64_t library_calls_ = 0;
  DeviceTimer timer_;  // the device's, copied at begin (used when device_token_ is set)
  void* device_token_ = nullptr;
  uint64_t generation_ = 0;  // reset() count at begin: a kernel straddling a reset records nothing
  KernelScope* parent_ = nullptr;
  friend void count_launch();
  friend void count_library_call();
  friend void note_kernel(const std::string& name);
};

}  // namespace mixtape::profiler
