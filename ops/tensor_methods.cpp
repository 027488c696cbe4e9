// ops/tensor_methods.cpp — Tensor's op methods (x.sum(), x.to(f16)), each forwarding to the
// free function of the same name, so `x.exp()` and `exp(x)` are one code path.
#include "ops/matmul.h"
#include "ops/op_def.h"

namespace mixtape {

Tensor Tensor::to(DType t) const { return to_dtype(*this, t); }
Tensor Tensor::to(Device d) const { return to_device(*this, d); }
Tensor Tensor::contiguous() const { return mixtape::contiguous(*this); }
Tensor Tensor::clone() const { return mixtape::clone(*this); }
Tensor Tensor::view(const IntList& sizes) const { return mixtape::view(*this, sizes); }
Tensor Tensor::reshape(const IntList& sizes) const { return mixtape::reshape(*this, sizes); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return mixtape::transpose(*this, d0, d1); }
Tensor Tensor::permute(const IntList& dims) const { return mixtape::permute(*this, dims); }
Tensor Tensor::expand(const IntList& sizes) const { return mixtape::expand(*this, sizes); }
Tensor Tensor::squeeze(int64_t d) const { return mixtape::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return mixtape::unsqueeze(*this, d); }
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const { return mixtape::narrow(*this, d, start, length); }
Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  return mixtape::slice(*this, d, start, end, step);
}
Tensor Tensor::select(int64_t d, int64_t index) const { return mixtape::select(*this, d, index); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return mixtape::flatten(*this, s, e); }
Tensor Tensor::sum() const { return mixtape::sum(*this); }
Tensor Tensor::sum(const IntList& dims, bool keepdim) const { return mixtape::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return mixtape::mean(*this); }
Tensor Tensor::mean(const IntList& dims, bool keepdim) const { return mixtape::mean(*this, dims, keepdim); }
Tensor Tensor::amax(int64_t dim, bool keepdim) const { return mixtape::amax(*this, dim, keepdim); }
Tensor Tensor::exp() const { return mixtape::exp(*this); }
Tensor Tensor::log() const { return mixtape::log(*this); }
Tensor Tensor::sqrt() const { return mixtape::sqrt(*this); }
Tensor Tensor::abs() const { return mixtape::abs(*this); }
Tensor Tensor::neg() const { return mixtape::neg(*this); }
Tensor Tensor::relu() const { return mixtape::relu(*this); }
Tensor Tensor::sigmoid() const { return mixtape::sigmoid(*this); }
Tensor Tensor::tanh() const { return mixtape::tanh(*this); }
Tensor Tensor::pow(double e) const { return mixtape::pow(*this, e); }
Tensor Tensor::matmul(const Tensor& other) const { return mixtape::matmul(*this, other); }
Tensor& Tensor::zero_() { return mixtape::zero_(*this); }
Tensor& Tensor::fill_(const Scalar& v) { return mixtape::fill_(*this, v); }
Tensor& Tensor::copy_(const Tensor& src) { return mixtape::copy_(*this, src); }
Tensor& Tensor::add_(const Tensor& other, const Scalar& alpha) { return mixtape::add_(*this, other, alpha); }
Tensor& Tensor::mul_(const Tensor& other) { return mixtape::mul_(*this, other); }
Tensor& Tensor::mul_(const Scalar& other) { return mixtape::mul_(*this, other); }

}  // namespace mixtape
