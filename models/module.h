// models/module.h — nn::Module: the base of every layer and model (torch::nn::Module's API).
//
// A module owns, in registration order: parameters (leaf tensors the optimizer updates),
// buffers (state saved with the model but not trained: BatchNorm's running statistics), and
// child modules. Everything else — state_dict names ("layer1.0.conv1.weight"), train/eval,
// dtype/device conversion, saving — walks that tree.
//
// Invariants:
//  * A registered parameter stays the same Tensor handle for the module's life. to(dtype) and
//    to(device) swap the handle's *contents* (PyTorch's `param.data = ...`), so a layer's
//    `weight` member, the registry and any handle the user holds all see the new values, and
//    parameters remain leaves with requires_grad. Create optimizers AFTER to(): like PyTorch,
//    an optimizer built earlier holds state (momenta, FP32 masters) made for the old dtype.
//  * Names are unique among one module's parameters, buffers and children, and contain no '.'.
//  * Iteration order is registration order (never hash order), so printing, state_dict files
//    and the parameter list an optimizer sees are deterministic.
//
// Calling convention: `model->forward(x)` or `(*model)(x)` (`model(x)` for a module held by
// value). operator() runs forward and then the forward hooks (summary() uses them), so a
// model calls its children through operator(), as Python's `self.conv1(x)` does.
//
// Errors name the layer by its path: a layer rejects an input it cannot take with
// ModuleInputError ("Conv2d (in_channels=1, ...): expected input [N, 1, H, W], got [8, 3, 28, 28]"),
// and when it runs inside a model, the outermost operator() on the stack puts the layer's
// qualified name in ("Conv2d 'features.0' (in_channels=1, ...): ..."). Any other error thrown
// by a descendant's forward gets " (in Linear 'fc1' of SmallCNN)" appended.
#pragma once
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/state_dict.h"
#include "core/tensor.h"

namespace mixtape::nn {

class Module;
// Called after forward with the module, its input and its output.
using ForwardHook = std::function<void(Module& module, const Tensor& input, const Tensor& output)>;

// A module's input check failed. `signature` is how the layer shows itself in errors
// ("in_channels=1, out_channels=32, kernel_size=(3, 3)"); `path` is its qualified name in the
// model that called it (empty when it was called on its own or is the model itself).
class ModuleInputError : public Error {
 public:
  ModuleInputError(std::string type, std::string path, std::string signature, std::string detail);
  const std::string& type() const { return type_; }
  const std::string& path() const { return path_; }
  const std::string& signature() const { return signature_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string type_, path_, signature_, detail_;
};

// What load_state_dict(strict = false) skipped (strict loading throws instead).
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // in the module, not in the state dict
  std::vector<std::string> unexpected_keys;  // in the state dict, not in the module
};

class Module {
 public:
  // `type_name` is what printing shows ("Conv2d"); empty means the C++ class name without
  // its namespaces, found at run time.
  explicit Module(std::string type_name = "");
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- calling ----
  // The computation of a single-input module. The base throws: override it.
  virtual Tensor forward(const Tensor& x);
  // forward(x), then every forward hook.
  Tensor operator()(const Tensor& x);

  // ---- registration (call from the constructor, like torch::nn::Module) ----
  // Registers `t` (detached if it has history) as a leaf parameter; returns the same handle.
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  // Registers a buffer: state_dict and to() see it, the optimizer does not.
  Tensor register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: M must derive from nn::Module");
    add_child(name, module);
    return module;
  }

  // ---- the tree ----
  // Parameters of this module (and, with recurse, its descendants), each tensor once.
  TensorList parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  TensorList buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // This module ("") and every descendant ("layer1.0.conv1"), each module once, pre-order.
  // The pointers are owned by the tree and live as long as this module.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<std::pair<std::string, const Module*>> named_modules() const;

  // ---- mode ----
  // Sets training mode on this module and all descendants (BatchNorm, Dropout read it).
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // ---- conversion (in place; returns *this) ----
  // Converts floating parameters, buffers and gradients to `dtype`. With keep_batchnorm_fp32
  // (default, as Apex O2 / mixtape's AMP decisions), a precision-sensitive module (BatchNorm)
  // gets Float32 instead when `dtype` is Float16 or BFloat16. Integer buffers are untouched.
  Module& to(DType dtype, bool keep_batchnorm_fp32 = true);
  // Moves parameters, buffers and gradients to `device`.
  Module& to(Device device);
  // Clears every parameter's .grad (set_to_none) or zeroes it in place.
  void zero_grad(bool set_to_none = true);

  // ---- state ----
  // Parameters and buffers by dotted name. The tensors share storage with the module.
  StateDict state_dict() const;
  // Copies `state` into the parameters and buffers, in place, converting dtype and device.
  // Everything is checked before anything is written: a shape mismatch, an undefined tensor or a
  // floating/integer mismatch always throws, and strict loading also throws on missing or
  // unexpected keys; the error lists every problem.
  LoadStateDictResult load_state_dict(const StateDict& state, bool strict = true);
  // state_dict() to / from a .safetensors file (metadata {"format": "pt"}: PyTorch's
  // safetensors.torch.load_file reads it, and load() reads files it wrote).
  void save(const std::string& path) const;
  LoadStateDictResult load(const std::string& path, bool strict = true);

  // ---- inspection ----
  // A torchinfo-style table: runs forward on zeros of `input_shape` (in the dtype and on the
  // device of the first floating parameter) under NoGradGuard in eval mode (each module's mode
  // is restored afterwards, so BatchNorm's running statistics are not touched), and lists every
  // leaf module call with its output shape and parameter count, then the totals.
  std::string summary(const IntList& input_shape);
  // The printed name of this module's class ("Conv2d").
  std::string type_name() const;
  // The part of the one-line description inside the parentheses: "1, 32, kernel_size=(3, 3)".
  virtual std::string extra_repr() const { return {}; }
  // A module whose parameters must stay FP32 under to(Float16) when keep_batchnorm_fp32 is set.
  virtual bool is_precision_sensitive() const { return false; }

  // Throws ModuleInputError for this module: "<Type> (<signature>): <detail>".
  [[noreturn]] void input_error(const std::string& signature, const std::string& detail) const;

  // ---- hooks ----
  // Returns an id for remove_forward_hook.
  int register_forward_hook(ForwardHook hook);
  void remove_forward_hook(int id);

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> child);
  void check_new_name(const std::string& name, const char* what) const;
  void collect_named_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out,
                             std::vector<const Module*>& seen);
  void collect_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const;
  void print(std::ostream& os, int indent) const;
  friend std::ostream& operator<<(std::ostream& os, const Module& m);

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<std::pair<int, ForwardHook>> hooks_;
  int next_hook_id_ = 0;
};

// Prints the module tree like PyTorch:
//   SmallCNN(
//     (conv1): Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
//     ...
//   )
std::ostream& operator<<(std::ostream& os, const Module& m);

// Total elements of the module's parameters (each tensor once); trainable_only counts those
// with requires_grad.
int64_t num_parameters(const Module& m, bool trainable_only = false);

}  // namespace mixtape::nn
