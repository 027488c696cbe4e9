// core/profiler.cpp — the per-op profiler's state, the kernel scope and the table (core/profiler.h).
// Invariant: rows are keyed by (op, device type, first input's dtype, noted CPU kernel); a CPU
// kernel's time is added when it ends, a device kernel's when its events are resolved (step(),
// report()); a nested kernel timed the same way as its parent is subtracted from the parent's
// self time, so the
// rows' sum is the time inside top-level kernels, counted once.
#include "core/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <tuple>

#include "core/dispatcher.h"
#include "core/tensor.h"

namespace mixtape::profiler {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool env_enabled() {
  const char* env = std::getenv("MIXTAPE_PROFILE");
  return env && *env && std::strcmp(env, "0") != 0;
}

// A device kernel whose events are not read yet.
struct Pending {
  int entry;
  int parent_entry;  // -1: none timed the same way
  DeviceType device;
  void* token;
};

struct State {
  std::mutex mu;
  std::vector<OpRecord> records;
  std::map<std::tuple<const OpSchema*, int, int, std::string>, int> index;  // (op, device, dtype or -1, kernel) -> row
  std::deque<Pending> pending;
  int64_t steps = 0;
  int64_t start_ns = now_ns();
  uint64_t generation = 0;  // bumped by reset(): a kernel begun before it records nothing
  DeviceTimer timers[kNumDeviceTypes];
};
// Never destroyed: kernels on other threads and the at-exit printer may outlive static destructors.
State& state() {
  static State* s = new State;
  return *s;
}

void print_at_exit();

}  // namespace

std::atomic<bool> detail::enabled_flag{[] {
  const bool on = env_enabled();
  if (on) {
    (void)state();  // the wall clock starts now, at start-up
    std::atexit(print_at_exit);
  }
  return on;
}()};

namespace {
std::atomic<int64_t> g_launches_outside{0};
std::atomic<int64_t> g_library_calls_outside{0};
std::atomic<bool> g_printed{false};
thread_local KernelScope* tls_current = nullptr;

void print_at_exit() {
  if (!env_enabled() || g_printed.exchange(true)) return;
  try {
    std::cerr << report().table();
  } catch (const std::exception& e) {
    std::cerr << "mixtape profile: no table (" << e.what() << ")\n";
  }
}

// Reads the device times that are known (all of them with `wait`), oldest first. Caller holds mu.
// A pair whose events cannot be read (a device error) is dropped before the error goes on, so it
// is reported once, not by every later step() and report().
void resolve_locked(State& s, bool wait) {
  while (!s.pending.empty()) {
    const Pending p = s.pending.front();
    const DeviceTimer& t = s.timers[static_cast<int>(p.device)];
    double ms = 0;
    try {
      ms = t.elapsed_ms(p.token, wait);
    } catch (...) {
      s.pending.pop_front();
      t.release(p.token);
      throw;
    }
    if (ms < 0) return;  // not done yet; later ones are not read before it
    s.records[p.entry].self_ms += ms;
    if (p.parent_entry >= 0) s.records[p.parent_entry].self_ms -= ms;
    s.pending.pop_front();
    t.release(p.token);
  }
}

void drop_pending_locked(State& s) {
  for (const Pending& p : s.pending) s.timers[static_cast<int>(p.device)].release(p.token);
  s.pending.clear();
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}
std::string pad(const std::string& s, size_t width, bool right) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

}  // namespace

void set_enabled(bool on) { detail::enabled_flag.store(on, std::memory_order_relaxed); }

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  drop_pending_locked(s);
  s.records.clear();
  s.index.clear();
  s.steps = 0;
  s.start_ns = now_ns();
  ++s.generation;
  g_launches_outside = 0;
  g_library_calls_outside = 0;
}

void step() {
  if (!enabled()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.steps;
  resolve_locked(s, /*wait=*/false);
}

Report report() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  resolve_locked(s, /*wait=*/true);
  Report r;
  // A row a kernel began in but none finished in (a noted kernel moved the call to its own row).
  for (const OpRecord& rec : s.records)
    if (rec.calls > 0 || rec.self_ms != 0) r.ops.push_back(rec);
  std::stable_sort(r.ops.begin(), r.ops.end(),
                   [](const OpRecord& a, const OpRecord& b) { return a.self_ms > b.self_ms; });
  r.steps = s.steps;
  r.wall_ms = double(now_ns() - s.start_ns) / 1e6;
  r.launches_outside_ops = g_launches_outside.load();
  r.library_calls_outside_ops = g_library_calls_outside.load();
  return r;
}

void count_launch() {
  if (!enabled()) return;
  if (tls_current) {
    ++tls_current->launches_;
  } else {
    g_launches_outside.fetch_add(1, std::memory_order_relaxed);
  }
}
void count_library_call() {
  if (!enabled()) return;
  if (tls_current) {
    ++tls_current->library_calls_;
  } else {
    g_library_calls_outside.fetch_add(1, std::memory_order_relaxed);
  }
}

void set_device_timer(DeviceType device, DeviceTimer timer) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.timers[static_cast<int>(device)] = timer;
}

Profile::Profile() : was_enabled_(enabled()) {
  reset();
  set_enabled(true);
}
Profile::~Profile() { set_enabled(was_enabled_); }

void KernelScope::finish() {
  try {
    end();
  } catch (const std::exception& e) {  // a failing event call must not end the program here
    std::cerr << "mixtape profile: " << e.what() << '\n';
  }
}

namespace {
// The device of a CUDA kernel's tensors: events go on that device's stream, whatever the thread's
// current device is (a kernel sets it itself, inside). -1: none (the current device).
int device_index_of(const OpCall& call) {
  for (const Tensor& t : call.inputs)
    if (t.defined() && t.device().type() != DeviceType::CPU) return t.device().index();
  return -1;
}
}  // namespace

namespace {
// The row of (op, device, dtype or -1, kernel), made on first use.
int row_locked(State& s, const OpSchema& op, int device, int dtype, const std::string& kernel) {
  const auto key = std::make_tuple(&op, device, dtype, kernel);
  auto it = s.index.find(key);
  if (it == s.index.end()) {
    OpRecord r;
    r.op = op.name;
    r.device = static_cast<DeviceType>(device);
    r.dtype = dtype >= 0 ? std::string(dtype_short(static_cast<DType>(dtype))) : "-";
    r.kernel = kernel;
    s.records.push_back(std::move(r));
    it = s.index.emplace(key, int(s.records.size()) - 1).first;
  }
  return it->second;
}
}  // namespace

void KernelScope::begin(const OpSchema& op, const OpCall& call, DeviceType device) {
  State& s = state();
  const bool has_input = !call.inputs.empty() && call.inputs[0].defined();
  const int dtype = has_input ? static_cast<int>(call.inputs[0].dtype()) : -1;
  op_ = &op;
  dtype_ = dtype;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    entry_ = row_locked(s, op, static_cast<int>(device), dtype, "");
    generation_ = s.generation;
    timer_ = s.timers[static_cast<int>(device)];
  }
  device_ = device;
  if (device != DeviceType::CPU && timer_.start) {
    try {
      device_token_ = timer_.start(device_index_of(call));
    } catch (const std::exception&) {
      // No usable device: the kernel itself reports why; it is timed by the host clock.
      device_token_ = nullptr;
    }
  }
  if (device_token_) {
    // The device runtime was initialised before this point, so an exit handler registered now
    // runs before the runtime's own teardown: the pending events can still be read there.
    static const bool registered = env_enabled() && std::atexit(print_at_exit) == 0;
    (void)registered;
  } else {
    start_ns_ = now_ns();
  }
  parent_ = tls_current;
  tls_current = this;  // last: nothing above may leave it pointing at a scope that never began
  active_ = true;
}

void KernelScope::end() {
  tls_current = parent_;
  State& s = state();
  if (device_token_) {
    try {
      timer_.stop(device_token_);
    } catch (...) {
      timer_.release(device_token_);
      throw;
    }
    std::lock_guard<std::mutex> lock(s.mu);
    if (generation_ != s.generation) {
      timer_.release(device_token_);
      return;
    }
    OpRecord& r = s.records[entry_];
    ++r.calls;
    r.launches += launches_;
    r.library_calls += library_calls_;
    const int parent_entry = parent_ && parent_->device_token_ && parent_->generation_ == generation_ ? parent_->entry_ : -1;
    s.pending.push_back({entry_, parent_entry, device_, device_token_});
    // Bounded without step(): read what has completed every 4096 pairs; wait past 65536.
    if (s.pending.size() % 4096 == 0) resolve_locked(s, /*wait=*/s.pending.size() >= 65536);
    return;
  }
  const double ms = double(now_ns() - start_ns_) / 1e6;
  std::lock_guard<std::mutex> lock(s.mu);
  if (generation_ != s.generation) return;
  if (!kernel_.empty()) entry_ = row_locked(s, *op_, static_cast<int>(device_), dtype_, kernel_);
  OpRecord& r = s.records[entry_];
  ++r.calls;
  r.self_ms += ms - children_ms_;
  r.launches += launches_;
  r.library_calls += library_calls_;
  if (parent_ && !parent_->device_token_ && parent_->generation_ == generation_) parent_->children_ms_ += ms;
}

void note_kernel(const std::string& name) {
  if (enabled() && tls_current) tls_current->kernel_ = name;
}

double Report::total_self_ms() const {
  double t = 0;
  for (const OpRecord& r : ops) t += r.self_ms;
  return t;
}
int64_t Report::total_launches() const {
  int64_t n = launches_outside_ops;
  for (const OpRecord& r : ops) n += r.launches;
  return n;
}
int64_t Report::total_library_calls() const {
  int64_t n = library_calls_outside_ops;
  for (const OpRecord& r : ops) n += r.library_calls;
  return n;
}

std::string Report::table() const {
  const double in_ops = total_self_ms();
  const bool any_device_work = total_launches() + total_library_calls() > 0;
  std::string out = "mixtape profile: " + std::to_string(steps) + " step(s), " + fixed(wall_ms, 1) + " ms wall, " +
                    fixed(in_ops, 1) + " ms self time in " + std::to_string(ops.size()) + " op row(s)\n";
  size_t name_width = 24, kernel_width = 0;
  for (const OpRecord& r : ops) name_width = std::max(name_width, r.op.size() + 2);
  // The kernel column only where some op ran a CPU kernel list's entry.
  for (const OpRecord& r : ops)
    if (!r.kernel.empty()) kernel_width = std::max<size_t>({kernel_width, 8, r.kernel.size() + 2});
  auto kernel_cell = [&](const std::string& k) { return kernel_width ? pad(k.empty() ? "-" : k, kernel_width, false) : ""; };
  out += pad("op", name_width, false) + pad("device", 7, false) + pad("dtype", 6, false) + kernel_cell("kernel") +
         pad("calls", 9, true) +
         pad("self ms", 11, true) + pad("share", 8, true) + pad("us/call", 10, true);
  if (any_device_work) out += pad("launches", 10, true) + pad("lib calls", 11, true);
  out += '\n';
  for (const OpRecord& r : ops) {
    out += pad(r.op, name_width, false) + pad(device_type_name(r.device), 7, false) + pad(r.dtype, 6, false) +
           kernel_cell(r.kernel) + pad(std::to_string(r.calls), 9, true) + pad(fixed(r.self_ms, 2), 11, true) +
           pad(fixed(in_ops > 0 ? 100.0 * r.self_ms / in_ops : 0.0, 1) + "%", 8, true) +
           pad(fixed(r.calls ? 1000.0 * r.self_ms / double(r.calls) : 0.0, 1), 10, true);
    if (any_device_work) out += pad(std::to_string(r.launches), 10, true) + pad(std::to_string(r.library_calls), 11, true);
    out += '\n';
  }
  if (any_device_work) {
    out += "kernel launches outside ops: " + std::to_string(launches_outside_ops) +
           "; cuBLAS/cuDNN calls outside ops: " + std::to_string(library_calls_outside_ops) + '\n';
  }
  if (steps > 0) {
    const double n = double(steps);
    out += "per step: " + fixed(wall_ms / n, 2) + " ms wall, " + fixed(in_ops / n, 2) + " ms in ops (" +
           fixed(wall_ms > 0 ? 100.0 * in_ops / wall_ms : 0.0, 1) + "%)";
    if (any_device_work) {
      out += ", " + fixed(double(total_launches()) / n, 1) + " kernel launches, " +
             fixed(double(total_library_calls()) / n, 1) + " cuBLAS/cuDNN calls";
    }
    out += '\n';
  }
  return out;
}

}  // namespace mixtape::profiler
