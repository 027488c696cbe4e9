// ops/cpu/kernel_table.cpp — the kernel trace (see kernel_table.h).
#include "ops/cpu/kernel_table.h"

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/trace.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/steering.h"

namespace mixtape::cpu {

std::string kernel_choice_line(const char* op_pass, const std::string& problem, const char* kernel,
                               const std::string& skipped) {
  std::string s = std::string(op_pass) + " " + problem + " -> " + kernel;
  if (!skipped.empty()) s += " (skipped: " + skipped + ")";
  return s;
}

bool kernel_trace_on() { return trace_enabled(TraceKind::Kernel); }

std::string steering_tags(bool bf16, bool conv) {
  std::string t;
  auto add = [&](const char* s) { t += (t.empty() ? "" : ", ") + std::string(s); };
  if (bf16) {
    switch (bf16_gemm_kernel()) {
      case Bf16Kernel::Amx: add("bf16 amx"); break;
      case Bf16Kernel::Avx512Bf16: add("bf16 avx512bf16"); break;
      case Bf16Kernel::Emulated: add("bf16 emulated"); break;
    }
  }
  if (conv && !conv_kernels_enabled()) add("conv im2col");
  if (!own_kernels_enabled()) add("gemm blas");
  return t.empty() ? t : " [" + t + "]";
}

const char* isa_tag() { return isa_avx512() ? "" : " [no avx512]"; }

void emit_kernel_choice(const std::string& line) { trace_line(TraceKind::Kernel, "[kernel] " + line); }

namespace {

// op.pass -> the names of its lists' entries, filled during static initialisation.
std::map<std::string, std::vector<std::string>>& registry() {
  static std::map<std::string, std::vector<std::string>> r;
  return r;
}
std::mutex& registry_mu() {
  static std::mutex mu;
  return mu;
}

using Forced = std::vector<std::pair<std::string, std::string>>;  // (op.pass, name)

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

Forced parse_forced(const std::string& spec) {
  Forced out;
  std::lock_guard<std::mutex> lock(registry_mu());
  const auto& reg = registry();
  size_t pos = 0;
  while (pos < spec.size()) {
    const size_t end = std::min(spec.find(',', pos), spec.size());
    const std::string item = spec.substr(pos, end - pos);
    pos = end + 1;
    const size_t colon = item.find(':');
    MT_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < item.size(),
             "MIXTAPE_CPU_KERNEL: expected <op.pass>:<name>[,...], e.g. conv2d.fwd:im2col_gemm, got '", item, "' in '",
             spec, "'");
    const std::string op = item.substr(0, colon), name = item.substr(colon + 1);
    const auto it = reg.find(op);
    if (it == reg.end()) {
      std::vector<std::string> ops;
      for (const auto& [k, v] : reg) ops.push_back(k);
      MT_ERROR("MIXTAPE_CPU_KERNEL: unknown op.pass '", op, "' in '", spec, "'; expected one of ", join(ops));
    }
    bool known = false;
    for (const std::string& n : it->second) known = known || n == name;
    MT_CHECK(known, "MIXTAPE_CPU_KERNEL: ", op, " has no kernel '", name, "' (in '", spec, "'); its kernels: ",
             join(it->second));
    for (const auto& [o, n] : out)
      MT_CHECK(o != op || n == name, "MIXTAPE_CPU_KERNEL: ", op, " forced twice, to ", n, " and ", name);
    out.emplace_back(op, name);
  }
  return out;
}

const Forced& forced_from_env() {
  // A throwing initialiser leaves it uninitialised, so a bad value throws at every choice.
  static const Forced f = [] {
    const char* e = std::getenv("MIXTAPE_CPU_KERNEL");
    return parse_forced(e ? e : "");
  }();
  return f;
}

}  // namespace

bool register_kernel_names(const char* op_pass, const std::vector<const char*>& names) {
  std::lock_guard<std::mutex> lock(registry_mu());
  std::vector<std::string>& v = registry()[op_pass];
  for (const char* n : names) {
    bool have = false;
    for (const std::string& x : v) have = have || x == n;
    if (!have) v.emplace_back(n);
  }
  return true;
}

std::vector<std::string> kernel_op_passes() {
  std::lock_guard<std::mutex> lock(registry_mu());
  std::vector<std::string> ops;
  for (const auto& [op, names] : registry()) ops.push_back(op);
  return ops;
}
std::vector<std::string> kernel_names(const std::string& op_pass) {
  std::lock_guard<std::mutex> lock(registry_mu());
  const auto it = registry().find(op_pass);
  return it == registry().end() ? std::vector<std::string>() : it->second;
}

const char* forced_kernel(const char* op_pass) {
  const Forced* f = reinterpret_cast<const Forced*>(override_slot(Switch::Kernels).load(std::memory_order_acquire));
  if (!f) f = &forced_from_env();
  for (const auto& [op, name] : *f)
    if (op == op_pass) return name.c_str();
  return nullptr;
}

void refuse_forced_kernel(const char* op_pass, const char* name, const std::string& why) {
  MT_ERROR(op_pass, ": the forced kernel ", name, " (MIXTAPE_CPU_KERNEL=", op_pass, ":", name,
           ") does not apply to this problem: ", why);
}

Override::Override(const KernelSpec& kernels) : which_(Switch::Kernels) {
  mine_ = reinterpret_cast<intptr_t>(new Forced(parse_forced(kernels.spec)));  // throws before the slot changes
  release_ = [](intptr_t p) { delete reinterpret_cast<const Forced*>(p); };
  previous_ = override_slot(which_).exchange(mine_);
}

}  // namespace mixtape::cpu
