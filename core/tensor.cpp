// core/tensor.cpp — Tensor construction, metadata and element access (no ops here).
#include "core/tensor.h"

#include "core/dispatcher.h"

#include <cstring>
#include <sstream>

namespace mixtape {

Tensor Tensor::empty(const IntList& sizes, TensorOptions opts) {
  int64_t n = numel_of(sizes);
  auto storage = std::make_shared<StorageImpl>(static_cast<size_t>(n) * mixtape::element_size(opts.dtype), opts.device);
  Tensor t = make(std::move(storage), sizes, contiguous_strides(sizes), 0, opts.dtype);
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor Tensor::make(Storage storage, const IntList& sizes, const IntList& strides, int64_t offset, DType dtype) {
  MT_CHECK(sizes.size() == strides.size(), "Tensor::make: ", sizes.size(), " sizes but ", strides.size(), " strides");
  // Every addressed element must lie inside the storage (the view invariant).
  int64_t lo = offset, hi = offset;
  bool empty = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    MT_CHECK(sizes[i] >= 0, "Tensor::make: negative size in ", shape_str(sizes));
    if (sizes[i] == 0) empty = true;
    int64_t span = (sizes[i] - 1) * strides[i];
    (span < 0 ? lo : hi) += span;
  }
  int64_t capacity = static_cast<int64_t>(storage->nbytes() / mixtape::element_size(dtype));
  MT_CHECK(empty || (lo >= 0 && hi < capacity), "Tensor::make: view sizes ", shape_str(sizes), " strides ",
           shape_str(strides), " offset ", offset, " reaches outside a storage of ", capacity, " elements");
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), sizes, strides, offset, dtype));
}

Tensor Tensor::as_strided_alias(const IntList& sizes, const IntList& strides, int64_t offset) const {
  Tensor v = make(impl_->storage, sizes, strides, offset, impl_->dtype);
  v.impl_->is_view = true;
  return v;
}

int64_t Tensor::size(int64_t d) const { return impl_->sizes[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return impl_->strides[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  // No elements: nothing is laid out, so any strides are contiguous (c10's rule; a reshape of
  // f32[3, 0], strides [1, 1], then views instead of refusing).
  // One pass over the dims (this runs on every op's hot path): a size 0 anywhere wins over a
  // stride mismatch found before it.
  int64_t expected = 1;
  bool laid_out = true;
  for (size_t i = impl_->sizes.size(); i-- > 0;) {
    const int64_t n = impl_->sizes[i];
    if (n == 0) return true;
    if (n == 1) continue;
    if (impl_->strides[i] != expected) laid_out = false;
    expected *= n;
  }
  return laid_out;
}

TensorOptions Tensor::options() const {
  TensorOptions o;
  o.dtype = dtype();
  o.device = device();
  return o;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined";
  std::ostringstream os;
  os << dtype_short(dtype()) << shape_str(sizes());
  if (!device().is_cpu()) os << '@' << device();
  return os.str();
}

// ---- autograd state ----
bool Tensor::requires_grad() const { return impl_->autograd && impl_->autograd->requires_grad; }

Tensor& Tensor::requires_grad_(bool r) {
  MT_CHECK(!r || is_floating(dtype()), "requires_grad_: only floating-point tensors can require gradients, got ",
           dtype_name(dtype()));
  MT_CHECK(r || is_leaf(), "requires_grad_: you can only change requires_grad of leaf tensors; detach() a "
           "non-leaf to get a tensor that does not require grad");
  impl_->autograd_meta().requires_grad = r;
  return *this;
}

Tensor Tensor::grad() const { return impl_->autograd ? impl_->autograd->grad : Tensor(); }

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined()) {
    MT_CHECK(g.sizes() == sizes(), "set_grad: gradient shape ", shape_str(g.sizes()), " does not match tensor shape ",
             shape_str(sizes()));
    MT_CHECK(g.device() == device(), "set_grad: gradient on ", g.device(), ", tensor on ", device());
    if (impl_->autograd && impl_->autograd->grad_dtype)
      MT_CHECK(g.dtype() == *impl_->autograd->grad_dtype || g.dtype() == dtype(), "set_grad: gradient is ",
               dtype_name(g.dtype()), "; this ", describe(), " tensor takes a ", dtype_name(dtype()), " or ",
               dtype_name(*impl_->autograd->grad_dtype), " (its grad_dtype) gradient");
  }
  impl_->autograd_meta().grad = g;
}

DType Tensor::grad_dtype() const {
  return impl_->autograd && impl_->autograd->grad_dtype ? *impl_->autograd->grad_dtype : dtype();
}

bool Tensor::has_explicit_grad_dtype() const { return impl_->autograd && impl_->autograd->grad_dtype.has_value(); }

void Tensor::set_grad_dtype(std::optional<DType> d) const {
  MT_CHECK(is_leaf(), "set_grad_dtype: only leaf tensors have a grad_dtype (", describe(), " was computed by an op)");
  if (d) {
    MT_CHECK(is_floating(*d), "set_grad_dtype: the gradient dtype must be floating point, got ", dtype_name(*d));
    const Tensor g = grad();
    MT_CHECK(!g.defined() || g.dtype() == *d || g.dtype() == dtype(), "set_grad_dtype: this tensor already has a ",
             dtype_name(g.dtype()), " .grad; clear it (set_grad(Tensor()) or zero_grad()) before changing grad_dtype "
             "to ", dtype_name(*d));
  }
  impl_->autograd_meta().grad_dtype = d;
}

bool Tensor::is_leaf() const { return !impl_->autograd || !impl_->autograd->grad_fn; }

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  return impl_->autograd ? impl_->autograd->grad_fn : none;
}

uint32_t Tensor::output_nr() const { return impl_->autograd ? impl_->autograd->output_nr : 0; }

void Tensor::set_history(std::shared_ptr<autograd::Node> fn, uint32_t output_nr) {
  auto& m = impl_->autograd_meta();
  m.requires_grad = fn != nullptr;
  m.grad_fn = std::move(fn);
  m.output_nr = output_nr;
}

uint32_t Tensor::version() const { return impl_->storage->version(); }
void Tensor::bump_version() const { impl_->storage->bump_version(); }

Tensor Tensor::detach() const {
  Tensor t = make(impl_->storage, impl_->sizes, impl_->strides, impl_->offset, impl_->dtype);
  t.impl_->wrapped_number = impl_->wrapped_number;
  return t;
}

Tensor& Tensor::set_name(std::string name) {
  impl_->autograd_meta().name = std::move(name);
  return *this;
}
const std::string& Tensor::name() const {
  static const std::string none;
  return impl_->autograd ? impl_->autograd->name : none;
}

// ---- element access ----
namespace {
// Storage offset (in elements) of the linear_index-th element in row-major order.
int64_t element_offset(const Tensor& t, int64_t linear_index) {
  int64_t off = t.storage_offset();
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    int64_t s = t.sizes()[d];
    off += (linear_index % s) * t.strides()[d];
    linear_index /= s;
  }
  return off;
}
void check_cpu_index(const Tensor& t, int64_t i, const char* op) {
  MT_CHECK(t.defined(), op, ": tensor is undefined");
  MT_CHECK(t.device().is_cpu(), op, ": needs a CPU tensor, got one on ", t.device(), " (copy it with .to(Device::CPU()))");
  MT_CHECK(i >= 0 && i < t.numel(), op, ": index ", i, " out of range for ", t.numel(), " elements");
}
}  // namespace

double get_element(const Tensor& t, int64_t i) {
  check_cpu_index(t, i, "get_element");
  const char* base = static_cast<const char*>(t.storage()->data());
  int64_t off = element_offset(t, i);
  return visit_dtype_with_float8(t.dtype(), "get_element", [&]<typename T>() {
    T v;
    std::memcpy(&v, base + off * static_cast<int64_t>(sizeof(T)), sizeof(T));
    if constexpr (is_narrow_float_v<T>)
      return static_cast<double>(static_cast<float>(v));
    else
      return static_cast<double>(v);
  });
}

void set_element(const Tensor& t, int64_t i, double value) {
  check_cpu_index(t, i, "set_element");
  char* base = static_cast<char*>(t.storage()->data());
  int64_t off = element_offset(t, i);
  visit_dtype_with_float8(t.dtype(), "set_element", [&]<typename T>() {
    T v;
    if constexpr (is_narrow_float_v<T>)
      v = T(static_cast<float>(value));
    else
      v = static_cast<T>(value);
    std::memcpy(base + off * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
  });
}

namespace {
// item() and to_vector() of a device tensor read a CPU copy, as PyTorch's do (a synchronising
// copy). core/ cannot call ops/ directly, so the copy goes through the registered to_device op.
Tensor host_copy(const Tensor& t) {
  const OpSchema* op = find_op("to_device");
  MT_CHECK(op != nullptr, "item/to_vector: the to_device op is not registered (link mixtape::ops)");
  return dispatch1(*op, {t.detach()}, {{"device", int64_t(-1)}});
}
}  // namespace

template <typename T>
T Tensor::item() const {
  MT_CHECK(defined(), "item: tensor is undefined");
  if (!device().is_cpu()) return host_copy(*this).item<T>();
  MT_CHECK(numel() == 1, "item: only one-element tensors can be converted to a scalar, got shape ",
           shape_str(sizes()), " with ", numel(), " elements");
  double v = get_element(*this, 0);
  if constexpr (is_narrow_float_v<T>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  MT_CHECK(defined(), "to_vector: tensor is undefined");
  if (!device().is_cpu()) return host_copy(*this).to_vector<T>();
  std::vector<T> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) {
    double v = get_element(*this, i);
    if constexpr (is_narrow_float_v<T>)
      out[static_cast<size_t>(i)] = T(static_cast<float>(v));
    else
      out[static_cast<size_t>(i)] = static_cast<T>(v);
  }
  return out;
}

#define MIXTAPE_INSTANTIATE_ACCESS(name, T, short_name, size) \
  template T Tensor::item<T>() const;                         \
  template std::vector<T> Tensor::to_vector<T>() const;
MIXTAPE_FORALL_DTYPES(MIXTAPE_INSTANTIATE_ACCESS)
#undef MIXTAPE_INSTANTIATE_ACCESS

// ---- factories that need no kernels ----
Tensor wrapped_scalar(const Scalar& s) {
  Tensor t = Tensor::empty({}, TensorOptions(s.dtype()));
  if (s.is_floating())
    *t.data_ptr<double>() = s.to_double();
  else if (s.is_bool())
    *t.data_ptr<bool>() = s.to_int() != 0;
  else
    *t.data_ptr<int64_t>() = s.to_int();
  t.impl()->wrapped_number = true;
  return t;
}

template <typename T>
Tensor tensor_from(const std::vector<T>& values, const IntList& sizes, TensorOptions opts) {
  MT_CHECK(static_cast<int64_t>(values.size()) == numel_of(sizes), "tensor: ", values.size(),
           " values do not fill shape ", shape_str(sizes), " (", numel_of(sizes), " elements)");
  MT_CHECK(opts.device.is_cpu(), "tensor: values are built on the CPU; call .to(", opts.device, ") afterwards");
  Tensor t = Tensor::empty(sizes, opts.with_requires_grad(false));
  for (size_t i = 0; i < values.size(); ++i) {
    double v;
    if constexpr (is_narrow_float_v<T>)
      v = static_cast<float>(values[i]);
    else
      v = static_cast<double>(values[i]);
    set_element(t, static_cast<int64_t>(i), v);
  }
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}
#define MIXTAPE_INSTANTIATE_FROM(name, T, short_name, size) \
  template Tensor tensor_from<T>(const std::vector<T>&, const IntList&, TensorOptions);
MIXTAPE_FORALL_DTYPES(MIXTAPE_INSTANTIATE_FROM)
#undef MIXTAPE_INSTANTIATE_FROM

Tensor from_blob(void* data, const IntList& sizes, DType dtype, std::function<void(void*)> deleter, Device device) {
  MT_CHECK(data != nullptr || numel_of(sizes) == 0, "from_blob: data pointer is null for shape ", shape_str(sizes));
  size_t nbytes = static_cast<size_t>(numel_of(sizes)) * element_size(dtype);
  auto storage = std::make_shared<StorageImpl>(data, nbytes, device, std::move(deleter));
  return Tensor::make(std::move(storage), sizes, contiguous_strides(sizes), 0, dtype);
}

Tensor tensor(std::initializer_list<double> values, TensorOptions opts) {
  return tensor_from(std::vector<double>(values), {static_cast<int64_t>(values.size())}, opts);
}

Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, TensorOptions opts) {
  std::vector<double> flat;
  size_t cols = rows.size() ? rows.begin()->size() : 0;
  for (auto& r : rows) {
    MT_CHECK(r.size() == cols, "tensor: ragged nested list: expected rows of ", cols, " values, got one of ", r.size());
    flat.insert(flat.end(), r.begin(), r.end());
  }
  return tensor_from(flat, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(cols)}, opts);
}

Tensor tensor(const std::vector<double>& values, const IntList& sizes, TensorOptions opts) {
  return tensor_from(values, sizes, opts);
}

Tensor scalar_tensor(const Scalar& s, TensorOptions opts) {
  Tensor t = Tensor::empty({}, opts.with_requires_grad(false));
  set_element(t, 0, s.to_double());
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

DType result_type(const Tensor& a, const Tensor& b) {
  // Three priority classes, as in PyTorch: dimensioned tensors, 0-d tensors, wrapped numbers.
  auto cls = [](const Tensor& t) { return t.is_wrapped_number() ? 0 : t.dim() == 0 ? 1 : 2; };
  auto category = [](DType t) { return t == DType::Bool ? 0 : is_integral(t) ? 1 : 2; };
  int ca = cls(a), cb = cls(b);
  if (ca == cb) {
    if (ca == 0) {  // two numbers: float wins, integers are Int64
      return promote_types(a.dtype(), b.dtype()) == DType::Float64 ? kDefaultFloat : promote_types(a.dtype(), b.dtype());
    }
    return promote_types(a.dtype(), b.dtype());
  }
  const Tensor& hi = ca > cb ? a : b;
  const Tensor& lo = ca > cb ? b : a;
  if (category(lo.dtype()) <= category(hi.dtype())) return hi.dtype();
  // The weaker operand has a higher category (int tensor * 2.5): it decides the category only,
  // taking the default type of that category rather than its own width.
  if (lo.is_wrapped_number()) return is_floating(lo.dtype()) ? kDefaultFloat : DType::Int64;
  return lo.dtype();
}

}  // namespace mixtape
