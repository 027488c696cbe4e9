// core/autocast_state.h — the thread-local autocast settings, per device type.
//
// amp/'s AutocastGuard writes them; the dispatcher reads `enabled` to decide whether a call
// enters the Autocast layer; autograd snapshots them, so that backward can run with autocast
// off (the dtypes forward chose are kept, as torch.amp documents) and a checkpointed segment can
// be recomputed under the settings its forward saw. They live in core so that autograd can do
// this without depending on amp/.
#pragma once
#include "core/device.h"
#include "core/dtype.h"

namespace mixtape {

struct AutocastDeviceState {
  bool enabled = false;
  DType dtype = DType::Float16;  // the lower-precision dtype for this device type
  bool cache_enabled = true;     // whether the weight-cast cache may be used
};

struct AutocastState {
  // PyTorch's defaults: CPU autocasts to bf16, CUDA to fp16.
  AutocastDeviceState device[kNumDeviceTypes] = {{false, DType::BFloat16, true}, {false, DType::Float16, true}};
  AutocastDeviceState& operator[](DeviceType t) { return device[static_cast<int>(t)]; }
  const AutocastDeviceState& operator[](DeviceType t) const { return device[static_cast<int>(t)]; }
  bool any_enabled() const;
};

// This thread's settings (a new thread starts with the defaults: all disabled).
const AutocastState& autocast_state();
void set_autocast_state(const AutocastState& s);

// RAII: installs `s` on this thread and restores the previous settings on exit (also on
// exceptions). Used by the autograd engine (autocast off during backward) and by checkpoint.
class AutocastStateGuard {
 public:
  explicit AutocastStateGuard(const AutocastState& s);
  ~AutocastStateGuard();
  AutocastStateGuard(const AutocastStateGuard&) = delete;
  AutocastStateGuard& operator=(const AutocastStateGuard&) = delete;

 private:
  AutocastState prev_;
};

}  // namespace mixtape
