// core/trace.cpp — trace state: process-wide from the environment, overridable per thread.
#include "core/trace.h"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>

namespace mixtape {
namespace {
uint32_t env_kinds() {
  static const uint32_t kinds = [] {
    const char* env = std::getenv("MIXTAPE_TRACE");
    if (!env) return 0u;
    uint32_t k = 0;
    if (std::strstr(env, "dispatch") || std::strstr(env, "all")) k |= uint32_t(TraceKind::Dispatch);
    if (std::strstr(env, "amp") || std::strstr(env, "all")) k |= uint32_t(TraceKind::Amp);
    if (std::strstr(env, "kernel") || std::strstr(env, "all")) k |= uint32_t(TraceKind::Kernel);
    return k;
  }();
  return kinds;
}
thread_local uint32_t tls_kinds = 0;
thread_local std::string* tls_capture = nullptr;
}  // namespace

bool trace_enabled(TraceKind kind) {
  uint32_t k = uint32_t(kind);
  return ((tls_kinds | env_kinds()) & k) != 0;
}

void trace_line(TraceKind kind, const std::string& line) {
  if (tls_capture) {
    *tls_capture += line;
    *tls_capture += '\n';
    return;
  }
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::cerr << line << '\n';
}

ScopedTrace::ScopedTrace(uint32_t kinds, std::string* capture) : prev_kinds_(tls_kinds), prev_capture_(tls_capture) {
  tls_kinds |= kinds;
  if (capture) tls_capture = capture;
}
ScopedTrace::~ScopedTrace() {
  tls_kinds = prev_kinds_;
  tls_capture = prev_capture_;
}

}  // namespace mixtape
