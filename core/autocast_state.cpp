// core/autocast_state.cpp — thread-local storage for the autocast settings.
#include "core/autocast_state.h"

namespace mixtape {

namespace {
thread_local AutocastState tls_state;
}

bool AutocastState::any_enabled() const {
  for (const auto& d : device)
    if (d.enabled) return true;
  return false;
}

const AutocastState& autocast_state() { return tls_state; }
void set_autocast_state(const AutocastState& s) { tls_state = s; }

AutocastStateGuard::AutocastStateGuard(const AutocastState& s) : prev_(tls_state) { tls_state = s; }
AutocastStateGuard::~AutocastStateGuard() { tls_state = prev_; }

}  // namespace mixtape
