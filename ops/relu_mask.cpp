// ops/relu_mask.cpp — the CPU side of relu's bit mask (format and invariant: ops/relu_mask.h).
#include "ops/relu_mask.h"

#include <algorithm>
#include <cstring>

#include "ops/activation_functors.h"
#include "ops/cpu/elementwise.h"
#include "ops/pool_planes.h"

namespace mixtape {

void check_relu_mask_grad(const char* op, const Tensor& g, const Tensor& mask) {
  MT_CHECK(is_floating(g.dtype()), op, ": expected a floating grad (f16, bf16, f32, f64), got ", g.describe());
  MT_CHECK(mask.dtype() == DType::UInt8 && mask.dim() == 1 && mask.numel() == relu_mask_bytes(g.numel()), op,
           ": expected a UInt8 mask of ", relu_mask_bytes(g.numel()), " bytes (one bit per element of grad ",
           g.describe(), "), got ", mask.describe());
  MT_CHECK(mask.device() == g.device(), op, ": grad and mask must be on one device, got ", g.describe(), " and ",
           mask.describe());
}

Tensor relu_mask_cpu(const Tensor& out) {
  const Tensor oc = pool_impl::dense(out);
  const int64_t n = oc.numel(), nb = relu_mask_bytes(n);
  Tensor mask = Tensor::empty({nb}, TensorOptions(DType::UInt8));
  uint8_t* m = mask.data_ptr<uint8_t>();
  visit_floating(oc.dtype(), "relu", [&]<typename T>() {
    using A = acc_t<T>;
    const T* p = static_cast<const T*>(oc.data_ptr());
#pragma omp parallel for if (n >= cpu::kParallelGrain) schedule(static)
    for (int64_t j = 0; j < nb; ++j) {
      const T* v = p + 8 * j;
      unsigned b = 0;
      if (8 * j + 8 <= n) {
        for (int k = 0; k < 8; ++k) b |= unsigned(static_cast<A>(v[k]) > A(0)) << k;
      } else {
        for (int64_t k = 0; k < n - 8 * j; ++k) b |= unsigned(static_cast<A>(v[k]) > A(0)) << k;
      }
      m[j] = static_cast<uint8_t>(b);
    }
  });
  return mask;
}

TensorList relu_mask_grad_cpu(const OpCall& call) {
  const Tensor& g = call.inputs[0];
  const Tensor& mask = call.inputs[1];
  check_relu_mask_grad(call.name(), g, mask);
  const Tensor gc = pool_impl::dense(g), mc = pool_impl::dense(mask);
  Tensor out = Tensor::empty(g.sizes(), TensorOptions(g.dtype()));
  const int64_t n = g.numel(), nb = relu_mask_bytes(n);
  const uint8_t* m = mc.data_ptr<uint8_t>();
  visit_floating(g.dtype(), call.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* gp = static_cast<const T*>(gc.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
#pragma omp parallel for if (n >= cpu::kParallelGrain) schedule(static)
    for (int64_t j = 0; j < nb; ++j) {
      const unsigned b = m[j];
      for (int64_t i = 8 * j, e = std::min(n, 8 * j + 8); i < e; ++i) {
        const bool keep = (b >> (i - 8 * j)) & 1u;
        if constexpr (std::is_same_v<T, BFloat16>) {  // fn::ReluGrad's bits (out = 1: kept), no widening
          uint16_t gb;
          std::memcpy(&gb, gp + i, 2);
          const uint16_t ob = keep ? fn::ReluGrad::bf16_bits(gb, 0x3F80u) : uint16_t(0);
          std::memcpy(o + i, &ob, 2);
        } else {
          o[i] = keep ? static_cast<T>(static_cast<A>(gp[i])) : static_cast<T>(A(0));
        }
      }
    }
  });
  return {out};
}

}  // namespace mixtape
