// core/numerics_check.h — the NaN locator: names the first op, forward or backward, whose kernel
// turned finite inputs into an inf or a NaN.
// Switched on by MIXTAPE_CHECK_NUMERICS=1 in the environment (MIXTAPE_CHECK_NUMERICS=report:
// print and go on instead of throwing) or by a numerics::CheckNumerics guard in code.
// Invariant: switched off it costs one relaxed atomic load per kernel (and a thread-local pointer
// set per autocast decision and per backward node, for the context). Switched on, every kernel
// run_kernel() runs has its floating outputs scanned once (one read pass); inputs are scanned
// only when an output is not finite. What counts as "first", and how the GradScaler's intended
// overflows are told apart: docs/inspector.md, "The NaN locator".
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace mixtape {
struct OpSchema;
struct OpCall;
}  // namespace mixtape

namespace mixtape::numerics {

// What a finding does: throw NumericsError (the default), or print it on stderr and go on.
enum class OnFinding : uint8_t { Throw, Report };

// Thrown in Throw mode; what() is the report (op, tape entry, dtypes, shapes, autocast, amaxes).
class NumericsError : public Error {
 public:
  NumericsError(std::string op, bool backward, const std::string& msg)
      : Error(msg), op_(std::move(op)), backward_(backward) {}
  const std::string& op() const { return op_; }
  bool backward() const { return backward_; }

 private:
  std::string op_;
  bool backward_;
};

struct Finding {
  std::string op;         // the op whose kernel produced the non-finite value
  bool backward = false;  // it ran inside a backward pass
  std::string message;    // the full report
};

namespace detail {
extern std::atomic<bool> enabled_flag;
}
inline bool enabled() { return detail::enabled_flag.load(std::memory_order_relaxed); }
// Process-wide; set_enabled(true) also forgets the earlier findings (a new search for a first).
void set_enabled(bool on, OnFinding mode = OnFinding::Throw);
OnFinding mode();

// Report mode keeps the first finding (later ones are consequences or further faults; reset()
// looks again; it also forgets a scaled loss in flight, and the counts). Throw mode records the
// finding too, before throwing.
std::vector<Finding> findings();
void reset();
// Backward overflows left to the GradScaler (an inf from finite inputs while a scaled loss is in
// flight) since the last reset(): counted, not reported.
int64_t overflows_left_to_scaler();

// RAII: checking on in `mode` for a scope (findings forgotten at entry); restores the switch.
class CheckNumerics {
 public:
  explicit CheckNumerics(OnFinding mode = OnFinding::Throw);
  ~CheckNumerics();
  CheckNumerics(const CheckNumerics&) = delete;
  CheckNumerics& operator=(const CheckNumerics&) = delete;

 private:
  bool was_enabled_;
  OnFinding was_mode_;
};

// ---- context, set by the layers above the kernels (cheap: a thread-local pointer each) ----

// The autograd engine, around a backward pass (node == null) and around each node it applies:
// a finding inside names the node through `describe` (called only when reporting).
class BackwardScope {
 public:
  BackwardScope(const void* node, std::string (*describe)(const void* node));
  ~BackwardScope();
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;

  const void* node;
  std::string (*describe)(const void*);
  BackwardScope* parent;
};

// The Autocast layer, around the call it makes below itself for an op with a casting policy:
// what it decided (policy, and the dtype it cast the floating inputs to; has_target false: none).
class AutocastScope {
 public:
  AutocastScope(const OpSchema* op, DType region, bool has_target, DType target);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

  const OpSchema* op;
  DType region, target;
  bool has_target;
  AutocastScope* parent;
};

// GradScaler: a scaled loss is in flight (scale() was called; update() ends it). Backward
// overflows (inf, never NaN) from finite inputs are then expected and left to the scaler.
void set_scaled_loss_in_flight(bool on);

// ---- used by the dispatcher (run_kernel) ----

// Before the kernel: whether input 0 of an in-place op was finite (an in-place kernel overwrites
// it, so it cannot be read afterwards). Only called while enabled().
struct PreKernel {
  bool active = false;
  bool inplace_input_finite = true;
};
PreKernel before_kernel(const OpSchema& op, const OpCall& call);
// After it: scans the outputs; reports the op if one is not finite and every input was.
void after_kernel(const OpSchema& op, const OpCall& call, const TensorList& outputs, const PreKernel& pre);

// Whether every element is finite (false for any inf or NaN); integer and bool tensors: true.
bool all_finite(const Tensor& t);

}  // namespace mixtape::numerics
