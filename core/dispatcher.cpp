// core/dispatcher.cpp — registry, layer selection, checks common to every op, tracing.
#include "core/dispatcher.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "core/numerics_check.h"
#include "core/profiler.h"
#include "core/trace.h"

namespace mixtape {

const char* amp_policy_name(AmpPolicy p) {
  switch (p) {
    case AmpPolicy::None: return "none";
    case AmpPolicy::LowerPrecision: return "lower_precision";
    case AmpPolicy::FP32: return "fp32";
    case AmpPolicy::FP32UnlessDtype: return "fp32_unless_dtype";
    case AmpPolicy::Promote: return "promote";
  }
  return "?";
}

const char* layer_name(DispatchLayer l) {
  switch (l) {
    case DispatchLayer::Autocast: return "Autocast";
    case DispatchLayer::Autograd: return "Autograd";
    case DispatchLayer::Backend: return "Backend";
  }
  return "?";
}

OpSchema& OpSchema::save(std::initializer_list<int> inputs, std::initializer_list<int> outputs) {
  saved_inputs = 0;
  saved_outputs = 0;
  for (int i : inputs) {
    MT_CHECK(i >= 0 && i < 64, name, ": save() takes input indices in [0, 64), got ", i);
    saved_inputs |= 1ull << i;
  }
  for (int i : outputs) {
    MT_CHECK(i >= 0 && i < 64, name, ": save() takes output indices in [0, 64), got ", i);
    saved_outputs |= 1ull << i;
  }
  return *this;
}

OpSchema& OpSchema::backward_ignores_output_grads(std::initializer_list<int> outputs) {
  for (int i : outputs) {
    MT_CHECK(i >= 0 && i < 64, name, ": backward_ignores_output_grads() takes output indices in [0, 64), got ", i);
    unread_output_grads |= 1ull << i;
  }
  return *this;
}

namespace {
struct Registry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<OpSchema>, std::less<>> ops;  // ordered: deterministic listing
};
Registry& registry() {
  static Registry r;
  return r;
}

LayerFn g_handlers[3] = {nullptr, nullptr, nullptr};
std::atomic<KernelObserver> g_kernel_observer{nullptr};
// Bumped whenever an entry is created, gains a kernel or is declared CPU-only; dispatch() checks
// the registry again while the generation it last found complete is older.
std::atomic<uint64_t> g_registry_generation{1};
std::atomic<uint64_t> g_checked_generation{0};

struct LayerTLS {
  uint32_t excluded = 0;
};
thread_local LayerTLS tls;

void trace_call(const OpSchema& op, DispatchLayer layer, const OpCall& call, DeviceType dev) {
  std::ostringstream os;
  os << "[dispatch] " << op.name << "  " << layer_name(layer);
  if (layer == DispatchLayer::Backend) os << '(' << device_type_name(dev) << ')';
  os << "  ";
  for (size_t i = 0; i < call.inputs.size(); ++i) os << (i ? ", " : "") << call.inputs[i].describe();
  if (!call.attrs.items().empty()) os << "  {" << call.attrs << '}';
  trace_line(TraceKind::Dispatch, os.str());
}

void check_devices(const OpSchema& op, const OpCall& call) {
  if (op.mixed_devices) return;
  const Tensor* first = nullptr;
  size_t first_i = 0;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const Tensor& t = call.inputs[i];
    if (!t.defined() || t.is_wrapped_number()) continue;
    if (!first) {
      first = &t;
      first_i = i;
      continue;
    }
    MT_CHECK(t.device() == first->device(), op.name, ": expected all tensors on the same device, got ",
             first->device(), " (input ", first_i, ") and ", t.device(), " (input ", i, ")");
  }
}
}  // namespace

OpSchema& define_op(const char* name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ops.find(name);
  if (it == r.ops.end()) {
    auto s = std::make_unique<OpSchema>();
    s->name = name;
    it = r.ops.emplace(name, std::move(s)).first;
  }
  mark_registry_changed();  // and each builder call that follows
  return *it->second;
}

const OpSchema* find_op(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ops.find(name);
  return it == r.ops.end() ? nullptr : it->second.get();
}

std::vector<const OpSchema*> all_ops() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<const OpSchema*> out;
  for (auto& [n, s] : r.ops) out.push_back(s.get());
  return out;
}

bool register_kernel(const char* op, DeviceType device, KernelFn fn) {
  define_op(op).kernel(device, fn);
  return true;
}

std::vector<std::string> kernel_registry_problems() {
  std::vector<std::string> problems;
#if MIXTAPE_WITH_CUDA
  for (const OpSchema* op : all_ops()) {
    if (op->composite || op->any_device) continue;  // no kernel of their own on any device
    const bool cpu = op->kernels[static_cast<int>(DeviceType::CPU)] != nullptr;
    const bool gpu = op->kernels[static_cast<int>(DeviceType::CUDA)] != nullptr;
    const bool cpu_only = !op->cpu_only_reason.empty();
    if (cpu && !gpu && !cpu_only)
      problems.push_back(op->name + ": a CPU kernel and no CUDA kernel (write one, see docs/adding-an-op.md, "
                                    "or declare the op .cpu_only(\"why\"))");
    if (gpu && !cpu) problems.push_back(op->name + ": a CUDA kernel and no CPU kernel (a misspelt register_kernel name?)");
    if (gpu && cpu_only)
      problems.push_back(op->name + ": declared cpu_only(\"" + op->cpu_only_reason + "\") but has a CUDA kernel");
  }
#endif
  return problems;
}

namespace {
// Throws while the registry has problems; checks again only after it changed.
void check_registry() {
  if (g_checked_generation.load(std::memory_order_acquire) == g_registry_generation.load(std::memory_order_acquire))
    return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  // Read before the scan: a change during the scan bumps the generation, so it is checked next time.
  const uint64_t generation = g_registry_generation.load(std::memory_order_acquire);
  if (g_checked_generation.load(std::memory_order_acquire) == generation) return;
  const std::vector<std::string> problems = kernel_registry_problems();
  if (problems.empty()) {
    g_checked_generation.store(generation, std::memory_order_release);
    return;
  }
  std::string all;
  for (const std::string& p : problems) all += "\n  " + p;
  MT_ERROR("the op registry is incomplete for the devices mixtape was built for (", problems.size(),
           " problem", problems.size() == 1 ? "" : "s", "):", all);
}
}  // namespace

void mark_registry_changed() { g_registry_generation.fetch_add(1, std::memory_order_acq_rel); }

void set_kernel_observer(KernelObserver fn) { g_kernel_observer.store(fn, std::memory_order_release); }

void set_layer_handler(DispatchLayer layer, LayerFn fn) { g_handlers[static_cast<int>(layer)] = fn; }

ExcludeLayerGuard::ExcludeLayerGuard(DispatchLayer layer) : prev_(tls.excluded) {
  tls.excluded |= 1u << static_cast<int>(layer);
}
ExcludeLayerGuard::~ExcludeLayerGuard() { tls.excluded = prev_; }
bool layer_excluded(DispatchLayer layer) { return (tls.excluded >> static_cast<int>(layer)) & 1u; }

bool autocast_included(DeviceType type) { return autocast_state()[type].enabled; }
void set_autocast_included(DeviceType type, bool on) {
  AutocastState s = autocast_state();
  s[type].enabled = on;
  set_autocast_state(s);
}

DeviceType device_type_of(const TensorList& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined() && !t.is_wrapped_number()) return t.device().type();
  return DeviceType::CPU;
}

TensorList dispatch(const OpSchema& op, TensorList inputs, Attrs attrs) {
  check_registry();
  OpCall call{std::move(inputs), std::move(attrs), &op};
  // Input 0 is never optional (optional ones, like a bias, come later); fail here, not in a kernel.
  MT_CHECK(call.inputs.empty() || call.inputs[0].defined(), op.name, ": input 0 is an undefined tensor");
  check_devices(op, call);
  DeviceType dev = call_device_type(call);
  bool trace = trace_enabled(TraceKind::Dispatch);

  if (!op.inplace && g_handlers[0] && autocast_included(dev) && !layer_excluded(DispatchLayer::Autocast)) {
    if (trace) trace_call(op, DispatchLayer::Autocast, call, dev);
    return g_handlers[0](op, call);  // excludes itself, casts, calls dispatch again
  }
  if (op.composite) {
    // A composite is decomposed here, above autograd: its inner ops are recorded one by one.
    return op.composite(call);
  }
  if (g_handlers[1] && !layer_excluded(DispatchLayer::Autograd)) {
    if (trace) trace_call(op, DispatchLayer::Autograd, call, dev);
    return g_handlers[1](op, call);  // excludes itself, calls dispatch again, records the node
  }
  if (trace) trace_call(op, DispatchLayer::Backend, call, dev);
  return run_kernel(op, call);
}

TensorList dispatch_backend(const OpSchema& op, OpCall& call) {
  if (trace_enabled(TraceKind::Dispatch)) trace_call(op, DispatchLayer::Backend, call, call_device_type(call));
  return run_kernel(op, call);
}

TensorList run_kernel(const OpSchema& op, OpCall& call) {
  DeviceType dev = call_device_type(call);
  KernelFn fn = op.any_device ? op.any_device : op.kernels[static_cast<int>(dev)];
  if (!fn) {
    MT_CHECK(!(dev == DeviceType::CUDA && op.kernels[0]), op.name,
             ": no CUDA kernel (mixtape was built without CUDA, or this op has no CUDA kernel yet)");
    MT_ERROR(op.name, ": no kernel registered for device type ", device_type_name(dev));
  }
  if (KernelObserver obs = g_kernel_observer.load(std::memory_order_acquire)) obs(op, dev);
  profiler::KernelScope profiled(op, call, dev);
  const numerics::PreKernel pre = numerics::enabled() ? numerics::before_kernel(op, call) : numerics::PreKernel{};
  TensorList out = fn(call);
  if (op.inplace) call.inputs[0].bump_version();  // every alias now sees a newer version
  if (pre.active) numerics::after_kernel(op, call, out, pre);
  return out;
}

Tensor dispatch1(const OpSchema& op, TensorList inputs, Attrs attrs) {
  return dispatch(op, std::move(inputs), std::move(attrs))[0];
}

}  // namespace mixtape
