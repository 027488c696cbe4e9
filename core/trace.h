// core/trace.h — opt-in teaching traces. MIXTAPE_TRACE=dispatch,amp,kernel (environment, read
// once; "all" is every category) or a ScopedTrace in code turns categories on; lines go to stderr
// or to a capture string. kernel: one line per CPU op call naming the kernel that ran and why the
// ones before it in its list declined (ops/cpu/kernel_table.h).
#pragma once
#include <cstdint>
#include <sstream>
#include <string>

namespace mixtape {

enum class TraceKind : uint32_t { Dispatch = 1, Amp = 2, Kernel = 4 };

bool trace_enabled(TraceKind kind);
void trace_line(TraceKind kind, const std::string& line);

// RAII: enables `kinds` (a bitmask of TraceKind) on this thread and, if `capture` is given,
// collects the lines there instead of printing them. Restores the previous state on exit.
class ScopedTrace {
 public:
  explicit ScopedTrace(uint32_t kinds, std::string* capture = nullptr);
  ~ScopedTrace();
  ScopedTrace(const ScopedTrace&) = delete;
  ScopedTrace& operator=(const ScopedTrace&) = delete;

 private:
  uint32_t prev_kinds_;
  std::string* prev_capture_;
};

}  // namespace mixtape
