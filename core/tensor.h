// core/tensor.h — Tensor: a cheap, shared handle to (storage, sizes, strides, offset, dtype)
// plus its autograd metadata. Copies of a Tensor are the same tensor (like torch::Tensor);
// views share storage. Invariant: sizes.size() == strides.size(), and every element addressed
// by (offset, sizes, strides) lies inside the storage.
//
// Methods that run ops (x.sum(), x + y, x.backward()) are declared here for a PyTorch-like
// feel and defined by the layer that owns them (ops/, autograd/); core itself never calls them.
#pragma once
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/scalar.h"
#include "core/shape.h"
#include "core/storage.h"

namespace mixtape {

namespace autograd {
class Node;
}
class Tensor;
class TensorImpl;
using TensorList = std::vector<Tensor>;
// A tensor hook sees the gradient flowing into a tensor; returning a defined tensor replaces it.
using TensorHook = std::function<Tensor(const Tensor&)>;
// A post-accumulate-grad hook sees a leaf after backward has written its .grad (PyTorch's
// register_post_accumulate_grad_hook): data-parallel training starts a bucket's all-reduce there.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

struct TensorOptions {
  DType dtype = DType::Float32;
  Device device = Device::CPU();
  bool requires_grad = false;

  TensorOptions() = default;
  TensorOptions(DType t) : dtype(t) {}     // NOLINT: zeros({2}, DType::Float16)
  TensorOptions(Device d) : device(d) {}   // NOLINT: zeros({2}, Device::CUDA())
  TensorOptions with_dtype(DType t) const { auto o = *this; o.dtype = t; return o; }
  TensorOptions with_device(Device d) const { auto o = *this; o.device = d; return o; }
  TensorOptions with_requires_grad(bool r = true) const { auto o = *this; o.requires_grad = r; return o; }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- construction (core) ----
  // A fresh, uninitialised, contiguous tensor.
  static Tensor empty(const IntList& sizes, TensorOptions opts = {});
  // A tensor over existing storage (views, external buffers).
  static Tensor make(Storage storage, const IntList& sizes, const IntList& strides, int64_t offset, DType dtype);
  // A new tensor sharing this one's storage with other geometry; no autograd history.
  Tensor as_strided_alias(const IntList& sizes, const IntList& strides, int64_t offset) const;

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  int64_t dim() const;
  const IntList& sizes() const;
  const IntList& strides() const;
  IntList shape() const { return sizes(); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const;
  int64_t storage_offset() const;
  DType dtype() const;
  Device device() const;
  size_t element_size() const { return mixtape::element_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  bool is_wrapped_number() const;
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  TensorOptions options() const;
  const Storage& storage() const;
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  std::string describe() const;  // "f16[2, 3]", used in traces and errors

  // ---- raw data ----
  void* data_ptr() const;  // address of element 0 (after the offset)
  template <typename T>
  T* data_ptr() const {
    MT_CHECK(dtype_v<T> == dtype(), "data_ptr: expected dtype ", dtype_name(dtype_v<T>), ", tensor is ",
             dtype_name(dtype()));
    return static_cast<T*>(data_ptr());
  }
  // The single value of a one-element CPU tensor, converted to T.
  template <typename T>
  T item() const;
  // All values, converted to T, in row-major order (CPU tensors; copies to CPU otherwise).
  template <typename T>
  std::vector<T> to_vector() const;

  // ---- autograd state (core stores it; autograd/ gives it meaning) ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool r = true);
  Tensor grad() const;               // undefined if no gradient yet
  void set_grad(const Tensor& g) const;  // replaces .grad (undefined clears it)
  // The dtype backward accumulates this leaf's gradient in (PyTorch's Tensor.grad_dtype, >= 2.10):
  // the engine casts each incoming gradient to it before adding it into .grad. Defaults to the
  // tensor's own dtype (backward's gradients already have it). Optimizers set Float32 on the
  // 16-bit parameters they keep FP32 masters for, unless it was set explicitly before
  // (optim/optimizer.h), so gradient accumulation over micro-batches adds in FP32.
  // Leaves only; floating dtypes only. Unlike PyTorch, set_grad also accepts a gradient of the
  // tensor's own dtype when grad_dtype differs (a 16-bit .grad on a 16-bit parameter stays legal;
  // adding an FP32 gradient into it promotes the sum to FP32).
  DType grad_dtype() const;
  bool has_explicit_grad_dtype() const;  // set_grad_dtype was called (and not reset)
  void set_grad_dtype(std::optional<DType> dtype) const;  // nullopt: back to the tensor's dtype
  bool is_leaf() const;
  // Made by as_strided_alias (a view of another tensor's storage). Autocast never caches casts
  // of views (their base may change under them).
  bool is_view() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  uint32_t output_nr() const;
  void set_history(std::shared_ptr<autograd::Node> fn, uint32_t output_nr);
  uint32_t version() const;
  void bump_version() const;
  Tensor detach() const;             // same storage, no history
  Tensor& set_name(std::string name);  // label shown by print_tape
  const std::string& name() const;

  // ---- autograd (defined in autograd/) ----
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false, bool create_graph = false) const;
  void register_hook(TensorHook hook) const;
  // Leaves only: `hook(leaf)` runs each time backward has accumulated into leaf.grad. Returns
  // an id for remove_post_accumulate_grad_hook.
  int register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const;
  void remove_post_accumulate_grad_hook(int id) const;
  void retain_grad() const;
  bool retains_grad() const;

  // ---- ops (defined in ops/) ----
  Tensor to(DType t) const;
  Tensor to(Device d) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor view(const IntList& sizes) const;
  Tensor reshape(const IntList& sizes) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor permute(const IntList& dims) const;
  Tensor expand(const IntList& sizes) const;
  Tensor squeeze(int64_t d) const;
  Tensor unsqueeze(int64_t d) const;
  Tensor narrow(int64_t d, int64_t start, int64_t length) const;
  Tensor slice(int64_t d, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t d, int64_t index) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor sum() const;
  Tensor sum(const IntList& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const IntList& dims, bool keepdim = false) const;
  Tensor amax(int64_t dim, bool keepdim = false) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor neg() const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor pow(double exponent) const;
  Tensor matmul(const Tensor& other) const;
  // In-place (bump the version counter; never autocast; refused on tensors autograd needs).
  Tensor& zero_();
  Tensor& fill_(const Scalar& v);
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(const Scalar& other);

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Autograd bookkeeping; only tensors that take part in autograd allocate one.
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;       // null for leaves
  uint32_t output_nr = 0;
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: the node that writes .grad
  std::vector<TensorHook> hooks;                    // leaves: run before accumulation
  std::vector<std::pair<int, PostAccumulateGradHook>> post_accumulate_hooks;  // leaves: after it
  int next_hook_id = 0;
  std::optional<DType> grad_dtype;                  // leaves: see Tensor::grad_dtype
  bool retains_grad = false;
  std::string name;
};

class TensorImpl {
 public:
  TensorImpl(Storage storage, IntList sizes, IntList strides, int64_t offset, DType dtype)
      : storage(std::move(storage)), sizes(std::move(sizes)), strides(std::move(strides)), offset(offset), dtype(dtype) {}

  Storage storage;
  IntList sizes;    // (d0, d1, ...)
  IntList strides;  // in elements
  int64_t offset;   // in elements
  DType dtype;
  bool wrapped_number = false;
  bool is_view = false;
  std::unique_ptr<AutogradMeta> autograd;

  AutogradMeta& autograd_meta() {
    if (!autograd) autograd = std::make_unique<AutogradMeta>();
    return *autograd;
  }
};

// ---- inline accessors ----
inline bool Tensor::is_view() const { return impl_->is_view; }
inline int64_t Tensor::dim() const { return static_cast<int64_t>(impl_->sizes.size()); }
inline const IntList& Tensor::sizes() const { return impl_->sizes; }
inline const IntList& Tensor::strides() const { return impl_->strides; }
inline int64_t Tensor::numel() const { return numel_of(impl_->sizes); }
inline int64_t Tensor::storage_offset() const { return impl_->offset; }
inline DType Tensor::dtype() const { return impl_->dtype; }
inline Device Tensor::device() const { return impl_->storage->device(); }
inline bool Tensor::is_wrapped_number() const { return impl_->wrapped_number; }
inline const Storage& Tensor::storage() const { return impl_->storage; }
inline void* Tensor::data_ptr() const {
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * static_cast<int64_t>(element_size());
}

// Wraps a number as a 0-d CPU tensor that promotes weakly.
Tensor wrapped_scalar(const Scalar& s);
// A contiguous CPU tensor holding `values` (converted to opts.dtype) with the given shape.
template <typename T>
Tensor tensor_from(const std::vector<T>& values, const IntList& sizes, TensorOptions opts);
Tensor from_blob(void* data, const IntList& sizes, DType dtype, std::function<void(void*)> deleter = {},
                 Device device = Device::CPU());
// PyTorch-style constructor: tensor({1.f, 2.f}) and tensor({{1.f, 2.f}, {3.f, 4.f}}).
Tensor tensor(std::initializer_list<double> values, TensorOptions opts = {});
Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, TensorOptions opts = {});
Tensor tensor(const std::vector<double>& values, const IntList& sizes, TensorOptions opts = {});
Tensor scalar_tensor(const Scalar& s, TensorOptions opts = {});

// Read / write element i (row-major logical index) of a CPU tensor as double; slow, for
// printing, tests and gradcheck only.
double get_element(const Tensor& t, int64_t linear_index);
void set_element(const Tensor& t, int64_t linear_index, double value);

// The type two operands compute in, following PyTorch (dimensioned tensors beat 0-d tensors,
// which beat wrapped numbers, unless the lower class has a higher category: int < float).
DType result_type(const Tensor& a, const Tensor& b);

}  // namespace mixtape
