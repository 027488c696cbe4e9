// models/module.cpp — the module tree: registration, traversal, conversion, state and printing.
#include "models/module.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <iomanip>
#include <set>
#include <sstream>
#include <typeinfo>

#include "autograd/grad_mode.h"
#include "core/safetensors.h"
#include "ops/cast.h"
#include "ops/creation.h"

namespace mixtape::nn {

namespace {

// Gives `dst` the storage, geometry and dtype of `src` while keeping dst's identity (its
// TensorImpl, hence its autograd metadata: requires_grad, leaf-ness, hooks). PyTorch's set_data.
void set_data(const Tensor& dst, const Tensor& src) {
  TensorImpl* d = dst.impl();
  d->storage = src.storage();
  d->sizes = src.sizes();
  d->strides = src.strides();
  d->offset = src.storage_offset();
  d->dtype = src.dtype();
}

// Converts a parameter or buffer (and its .grad) in place with `fn`.
template <typename F>
void convert_in_place(const Tensor& t, F&& fn) {
  NoGradGuard no_grad;
  Tensor converted = fn(t.detach());
  if (!converted.is_same(t)) set_data(t, converted);
  Tensor g = t.grad();
  if (g.defined()) {
    Tensor cg = fn(g.detach());
    if (!cg.is_same(g)) t.set_grad(cg);
  }
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", \"" : "\"") + names[i] + "\"";
  return s;
}

std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

}  // namespace

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

std::string Module::type_name() const {
  if (!type_name_.empty()) return type_name_;
  const char* mangled = typeid(*this).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string full = (status == 0 && demangled) ? demangled : mangled;
  std::free(demangled);
  // Strip the namespaces of the class itself, not of template arguments.
  size_t end = full.find('<');
  size_t cut = full.rfind("::", end == std::string::npos ? std::string::npos : end);
  return cut == std::string::npos ? full : full.substr(cut + 2);
}

// ------------------------------------------------------------------------------ calling

Tensor Module::forward(const Tensor&) {
  MT_ERROR(type_name(), ": forward(const Tensor&) is not implemented; override it in the module class");
}

namespace {

// The module calls in progress on this thread, so the outermost call can name the layer that
// failed by its path in the model (a layer does not know its own name; its parents do).
struct CallStack {
  int depth = 0;
  const Module* failed = nullptr;  // the innermost module whose forward threw
  int failed_depth = 0;            // its depth (a deeper or equal throw is a new error)
};
thread_local CallStack t_calls;

struct CallFrame {
  CallFrame() { ++t_calls.depth; }
  ~CallFrame() {
    if (--t_calls.depth == 0) t_calls.failed = nullptr;
  }
};

std::string input_error_message(const std::string& type, const std::string& path, const std::string& signature,
                                 const std::string& detail) {
  std::string s = type;
  if (!path.empty()) s += " '" + path + "'";
  if (!signature.empty()) s += " (" + signature + ")";
  return s + ": " + detail;
}

std::string path_of(Module& root, const Module* m) {
  for (auto& [name, candidate] : root.named_modules())
    if (candidate == m) return name;
  return {};
}

}  // namespace

ModuleInputError::ModuleInputError(std::string type, std::string path, std::string signature, std::string detail)
    : Error(input_error_message(type, path, signature, detail)),
      type_(std::move(type)),
      path_(std::move(path)),
      signature_(std::move(signature)),
      detail_(std::move(detail)) {}

void Module::input_error(const std::string& signature, const std::string& detail) const {
  throw ModuleInputError(type_name(), "", signature, detail);
}

Tensor Module::operator()(const Tensor& x) {
  CallFrame frame;
  Tensor out;
  try {
    out = forward(x);
    t_calls.failed = nullptr;  // an error a forward caught and handled is not this call's
  } catch (const Error& e) {
    if (!t_calls.failed || t_calls.depth >= t_calls.failed_depth) {
      t_calls.failed = this;
      t_calls.failed_depth = t_calls.depth;
    }
    if (t_calls.depth > 1 || t_calls.failed == this) throw;
    // The outermost call, and a descendant failed: name it by its path in this model.
    const Module* culprit = t_calls.failed;
    std::string path = path_of(*this, culprit);
    if (path.empty()) throw;  // not one of ours (called through some other route)
    if (auto* input = dynamic_cast<const ModuleInputError*>(&e))
      throw ModuleInputError(input->type(), path, input->signature(), input->detail());
    throw Error(detail::str_cat(e.what(), " (in ", culprit->type_name(), " '", path, "' of ", type_name(), ")"));
  }
  // Copy: a hook may remove itself (summary's cleanup) while we iterate.
  auto hooks = hooks_;
  for (auto& [id, hook] : hooks) hook(*this, x, out);
  return out;
}

int Module::register_forward_hook(ForwardHook hook) {
  MT_CHECK(hook, type_name(), ": register_forward_hook: the hook is empty");
  hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

void Module::remove_forward_hook(int id) {
  std::erase_if(hooks_, [id](const auto& h) { return h.first == id; });
}

// ------------------------------------------------------------------------- registration

void Module::check_new_name(const std::string& name, const char* what) const {
  MT_CHECK(!name.empty(), type_name(), ": ", what, " name must not be empty");
  MT_CHECK(name.find('.') == std::string::npos, type_name(), ": ", what, " name '", name,
           "' must not contain '.' (dots separate nested modules in state_dict names)");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
  };
  MT_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), type_name(), ": cannot register ", what,
           " '", name, "': the name is already taken by a parameter, buffer or submodule");
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name(name, "parameter");
  MT_CHECK(t.defined(), type_name(), ": parameter '", name, "' is an undefined tensor");
  MT_CHECK(!requires_grad || t.is_floating_point(), type_name(), ": parameter '", name,
           "' has dtype ", dtype_name(t.dtype()), "; only floating tensors can require gradients");
  if (!t.is_leaf()) t = t.detach();
  t.requires_grad_(requires_grad);
  parameters_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name, "buffer");
  MT_CHECK(t.defined(), type_name(), ": buffer '", name, "' is an undefined tensor");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
  check_new_name(name, "submodule");
  MT_CHECK(child != nullptr, type_name(), ": submodule '", name, "' is null");
  MT_CHECK(child.get() != this, type_name(), ": a module cannot be its own submodule");
  children_.emplace_back(name, std::move(child));
}

// ----------------------------------------------------------------------------- the tree

void Module::collect_named_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out,
                                   std::vector<const Module*>& seen) {
  if (std::find(seen.begin(), seen.end(), this) != seen.end()) return;
  seen.push_back(this);
  out.emplace_back(prefix, this);
  for (auto& [name, child] : children_) child->collect_named_modules(prefix.empty() ? name : prefix + "." + name, out, seen);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  std::vector<const Module*> seen;
  collect_named_modules("", out, seen);
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out;
  for (auto& [n, m] : const_cast<Module*>(this)->named_modules()) out.emplace_back(n, m);
  return out;
}

namespace {
template <typename Get>
std::vector<std::pair<std::string, Tensor>> named_tensors(const Module& self, bool recurse, Get get) {
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<const TensorImpl*> seen;  // membership only; order comes from the traversal
  auto add_from = [&](const std::string& prefix, const Module& m) {
    for (const auto& [name, t] : get(m)) {
      if (!seen.insert(t.impl()).second) continue;
      out.emplace_back(prefix.empty() ? name : prefix + "." + name, t);
    }
  };
  if (!recurse) {
    add_from("", self);
    return out;
  }
  for (const auto& [prefix, m] : self.named_modules()) add_from(prefix, *m);
  return out;
}
}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  return named_tensors(*this, recurse, [](const Module& m) -> const auto& { return m.parameters_; });
}
std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  return named_tensors(*this, recurse, [](const Module& m) -> const auto& { return m.buffers_; });
}
TensorList Module::parameters(bool recurse) const {
  TensorList out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}
TensorList Module::buffers(bool recurse) const {
  TensorList out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}
std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, c] : children_) out.push_back(c);
  return out;
}
std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }

int64_t num_parameters(const Module& m, bool trainable_only) {
  int64_t n = 0;
  for (const auto& p : m.parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

// ------------------------------------------------------------------ mode and conversion

void Module::train(bool on) {
  for (auto& [name, m] : named_modules()) m->training_ = on;
}

Module& Module::to(DType dtype, bool keep_batchnorm_fp32) {
  MT_CHECK(is_floating(dtype), type_name(), ".to: expected a floating dtype, got ", dtype_name(dtype),
           " (integer buffers keep their dtype)");
  for (auto& [name, m] : named_modules()) {
    DType target = (keep_batchnorm_fp32 && m->is_precision_sensitive() && is_reduced_float(dtype)) ? DType::Float32 : dtype;
    auto convert = [target](const Tensor& t) { return to_dtype(t, target); };
    for (auto& [n, p] : m->parameters_)
      if (p.is_floating_point()) convert_in_place(p, convert);
    for (auto& [n, b] : m->buffers_)
      if (b.is_floating_point()) convert_in_place(b, convert);
  }
  return *this;
}

Module& Module::to(Device device) {
  auto convert = [device](const Tensor& t) { return to_device(t, device); };
  for (auto& [name, m] : named_modules()) {
    for (auto& [n, p] : m->parameters_) convert_in_place(p, convert);
    for (auto& [n, b] : m->buffers_) convert_in_place(b, convert);
  }
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (auto& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none)
      p.set_grad(Tensor());
    else
      zero_(g);
  }
}

// -------------------------------------------------------------------------------- state

void Module::collect_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [n, t] : parameters_) out.emplace_back(prefix + n, t);
  for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  for (const auto& [n, c] : children_) c->collect_state(prefix + n + ".", out);
}

StateDict Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> all;
  collect_state("", all);
  StateDict out;
  for (auto& [n, t] : all) out.emplace(n, t.detach());
  return out;
}

LoadStateDictResult Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::pair<std::string, Tensor>> own;
  collect_state("", own);
  LoadStateDictResult result;
  std::vector<std::string> problems;
  std::set<std::string> own_names;
  for (const auto& [name, dst] : own) {
    own_names.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      result.missing_keys.push_back(name);
      continue;
    }
    const Tensor& src = it->second;
    if (!src.defined()) {
      problems.push_back("undefined tensor for " + name);
      continue;
    }
    if (src.sizes() != dst.sizes())
      problems.push_back(detail::str_cat("size mismatch for ", name, ": copying a param with shape ",
                                         shape_str(src.sizes()), " from checkpoint, the shape in current model is ",
                                         shape_str(dst.sizes())));
    else if (src.is_floating_point() != dst.is_floating_point())
      problems.push_back(detail::str_cat("dtype mismatch for ", name, ": the checkpoint holds ", dtype_name(src.dtype()),
                                         ", the model ", dtype_name(dst.dtype()),
                                         " (floating and integer values do not convert)"));
  }
  for (const auto& [name, t] : state)
    if (!own_names.count(name)) result.unexpected_keys.push_back(name);

  std::ostringstream msg;
  if (strict && !result.missing_keys.empty()) msg << "\n  Missing key(s): " << quoted_list(result.missing_keys) << '.';
  if (strict && !result.unexpected_keys.empty())
    msg << "\n  Unexpected key(s): " << quoted_list(result.unexpected_keys) << '.';
  for (const auto& p : problems) msg << "\n  " << p << '.';
  if (!msg.str().empty()) MT_ERROR("load_state_dict: error(s) in loading state_dict for ", type_name(), ":", msg.str());

  NoGradGuard no_grad;
  for (auto& [name, dst] : own) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    copy_(dst, to_device(it->second, dst.device()));
  }
  return result;
}

void Module::save(const std::string& path) const {
  StateDict cpu;
  for (const auto& [name, t] : state_dict()) cpu.emplace(name, to_device(t, Device::CPU()));
  save_safetensors(cpu, path, {{"format", "pt"}});
}

LoadStateDictResult Module::load(const std::string& path, bool strict) {
  return load_state_dict(load_safetensors(path), strict);
}

// --------------------------------------------------------------------------- inspection

std::string Module::summary(const IntList& input_shape) {
  struct Row {
    std::string layer, shape;
    int64_t params;
  };
  std::vector<Row> rows;
  auto modules = named_modules();

  // Restores every module's mode and removes the hooks, even if forward throws.
  struct Restore {
    std::vector<std::pair<Module*, bool>> modes;
    std::vector<std::pair<Module*, int>> hooks;
    ~Restore() {
      for (auto& [m, id] : hooks) m->remove_forward_hook(id);
      for (auto& [m, mode] : modes) m->training_ = mode;
    }
  } restore;
  for (auto& [name, m] : modules) {
    restore.modes.emplace_back(m, m->training_);
    if (!m->children_.empty()) continue;  // leaves only
    std::string label = (name.empty() ? std::string("(self)") : name) + " (" + m->type_name() + ")";
    int id = m->register_forward_hook([&rows, label](Module& mod, const Tensor&, const Tensor& out) {
      rows.push_back({label, shape_str(out.sizes()), num_parameters(mod)});
    });
    restore.hooks.emplace_back(m, id);
  }
  TensorOptions opts;
  for (const auto& p : parameters())
    if (p.is_floating_point()) {
      opts = TensorOptions(p.dtype()).with_device(p.device());
      break;
    }
  Tensor out;
  {
    NoGradGuard no_grad;
    eval();
    out = (*this)(zeros(input_shape, opts));
  }

  size_t w_layer = 12, w_shape = 12, w_params = 7;
  for (const auto& r : rows) {
    w_layer = std::max(w_layer, r.layer.size());
    w_shape = std::max(w_shape, r.shape.size());
    w_params = std::max(w_params, with_commas(r.params).size());
  }
  const size_t width = w_layer + 2 + w_shape + 2 + w_params;
  std::ostringstream os;
  const std::string rule(width, '='), thin(width, '-');
  os << type_name() << " summary, input " << shape_str(input_shape) << " (" << dtype_short(opts.dtype) << ", "
     << opts.device << ")\n"
     << rule << '\n'
     << std::left << std::setw(int(w_layer)) << "Layer (type)" << "  " << std::setw(int(w_shape)) << "Output Shape"
     << "  " << std::right << std::setw(int(w_params)) << "Param #" << '\n'
     << rule << '\n';
  for (const auto& r : rows)
    os << std::left << std::setw(int(w_layer)) << r.layer << "  " << std::setw(int(w_shape)) << r.shape << "  "
       << std::right << std::setw(int(w_params)) << with_commas(r.params) << '\n';
  int64_t total = num_parameters(*this), trainable = num_parameters(*this, true);
  int64_t param_bytes = 0, buffer_bytes = 0;
  for (const auto& p : parameters()) param_bytes += static_cast<int64_t>(p.nbytes());
  for (const auto& b : buffers()) buffer_bytes += static_cast<int64_t>(b.nbytes());
  os << rule << '\n'
     << "Total params: " << with_commas(total) << '\n'
     << "Trainable params: " << with_commas(trainable) << '\n'
     << "Non-trainable params: " << with_commas(total - trainable) << '\n'
     << thin << '\n'
     << "Output shape: " << shape_str(out.sizes()) << '\n'
     << std::fixed << std::setprecision(2) << "Params size (MB): " << param_bytes / 1e6 << '\n'
     << "Buffers size (MB): " << buffer_bytes / 1e6 << '\n'
     << rule << '\n';
  return os.str();
}

void Module::print(std::ostream& os, int indent) const {
  os << type_name() << '(';
  std::string extra = extra_repr();
  if (children_.empty()) {
    os << extra << ')';
    return;
  }
  const std::string pad(static_cast<size_t>(indent) + 2, ' ');
  os << '\n';
  if (!extra.empty()) os << pad << extra << '\n';
  for (const auto& [name, child] : children_) {
    os << pad << '(' << name << "): ";
    child->print(os, indent + 2);
    os << '\n';
  }
  os << std::string(static_cast<size_t>(indent), ' ') << ')';
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  m.print(os, 0);
  return os;
}

}  // namespace mixtape::nn
