// ops/relu_mask.cpp — the CPU side of relu's bit mask (format and invariant: ops/relu_mask.h).
#include "ops/relu_mask.h"

#include <algorithm>
#include <cstring>

#include "ops/activation_functors.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/isa.h"
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

namespace {

// Lane masks of a mask byte: kLanes<U>[b][k] is all ones where bit k of b is set (U = uint16_t for
// BF16, uint32_t for f32), so applying a byte is 8 ANDs the compiler vectorises.
template <typename U>
struct LaneMasks {
  U m[256][8];
  constexpr LaneMasks() : m{} {
    for (int b = 0; b < 256; ++b)
      for (int k = 0; k < 8; ++k) m[b][k] = (b >> k) & 1 ? U(~U(0)) : U(0);
  }
};
template <typename U>
inline constexpr LaneMasks<U> kLanes{};

// out > 0 on the storage bits, as fn::ReluGrad decides it after widening: sign clear, not zero,
// not NaN, i.e. 1 <= bits <= +inf's bits (an unsigned bits - 1 below +inf's bits).
inline bool positive_bits(uint16_t b) { return uint16_t(b - 1u) < 0x7F80u; }
inline bool positive_bits(uint32_t b) { return b - 1u < 0x7F800000u; }

#if MIXTAPE_X86_KERNELS
MT_KERNELS_BEGIN
// 32 BF16 (16 f32) bits per compare: the mask register is the mask bytes, in element order.
MT_TARGET_AVX512 void pack_bits_avx512(const uint16_t* p, int64_t blocks, uint8_t* m) {
  const __m512i one = _mm512_set1_epi16(1), inf = _mm512_set1_epi16(0x7F80);
  for (int64_t b = 0; b < blocks; ++b) {
    const __mmask32 k = _mm512_cmplt_epu16_mask(_mm512_sub_epi16(_mm512_loadu_si512(p + 32 * b), one), inf);
    std::memcpy(m + 4 * b, &k, 4);
  }
}
MT_TARGET_AVX512 void pack_bits_avx512(const uint32_t* p, int64_t blocks, uint8_t* m) {
  const __m512i one = _mm512_set1_epi32(1), inf = _mm512_set1_epi32(0x7F800000);
  for (int64_t b = 0; b < blocks; ++b) {
    const __mmask16 k = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(_mm512_loadu_si512(p + 16 * b), one), inf);
    std::memcpy(m + 2 * b, &k, 2);
  }
}
// g kept where the bit is set (BF16 NaNs made quiet, as fn::ReluGrad stores them), +0 elsewhere:
// 32 BF16 or 16 f32 values per mask word.
MT_TARGET_AVX512 void apply_bits_avx512(const uint16_t* g, const uint8_t* m, int64_t blocks, uint16_t* out) {
  const __m512i mag = _mm512_set1_epi16(0x7FFF), inf = _mm512_set1_epi16(0x7F80), quiet = _mm512_set1_epi16(0x0040);
  for (int64_t b = 0; b < blocks; ++b) {
    __mmask32 k;
    std::memcpy(&k, m + 4 * b, 4);
    __m512i v = _mm512_loadu_si512(g + 32 * b);
    const __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, mag), inf);
    v = _mm512_or_si512(v, _mm512_maskz_mov_epi16(nan, quiet));
    _mm512_storeu_si512(out + 32 * b, _mm512_maskz_mov_epi16(k, v));
  }
}
MT_TARGET_AVX512 void apply_bits_avx512(const uint32_t* g, const uint8_t* m, int64_t blocks, uint32_t* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    __mmask16 k;
    std::memcpy(&k, m + 2 * b, 2);
    _mm512_storeu_si512(out + 16 * b, _mm512_maskz_loadu_epi32(k, g + 16 * b));
  }
}
// relu's output and mask from x in one pass, 32 BF16 or 16 f32 values per compare: the output
// bits of fn::Relu (BF16: Relu::bf16_bits; f32: x < 0 ? +0 : x) and the mask of that output.
MT_TARGET_AVX512 void relu_bits_avx512(const uint16_t* x, int64_t blocks, uint16_t* out, uint8_t* m) {
  const __m512i one = _mm512_set1_epi16(1), neg1 = _mm512_set1_epi16(static_cast<short>(0x8001)),
                inf = _mm512_set1_epi16(0x7F80), mag = _mm512_set1_epi16(0x7FFF), quiet = _mm512_set1_epi16(0x0040);
  for (int64_t b = 0; b < blocks; ++b) {
    const __m512i v = _mm512_loadu_si512(x + 32 * b);
    const __mmask32 pos = _mm512_cmplt_epu16_mask(_mm512_sub_epi16(v, one), inf);    // +0 < v <= +inf
    const __mmask32 neg = _mm512_cmplt_epu16_mask(_mm512_sub_epi16(v, neg1), inf);   // -inf <= v < -0
    const __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, mag), inf);
    _mm512_storeu_si512(out + 32 * b, _mm512_maskz_mov_epi16(~neg, _mm512_or_si512(v, _mm512_maskz_mov_epi16(nan, quiet))));
    std::memcpy(m + 4 * b, &pos, 4);
  }
}
MT_TARGET_AVX512 void relu_bits_avx512(const uint32_t* x, int64_t blocks, uint32_t* out, uint8_t* m) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const __m512 v = _mm512_castsi512_ps(_mm512_loadu_si512(x + 16 * b));
    const __mmask16 lt = _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ);
    const __mmask16 pos = _mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ);
    _mm512_storeu_ps(reinterpret_cast<float*>(out) + 16 * b, _mm512_maskz_mov_ps(static_cast<__mmask16>(~lt), v));
    std::memcpy(m + 2 * b, &pos, 2);
  }
}
MT_KERNELS_END
#endif

template <typename T, typename U>
void pack_bits(const T* p, int64_t n, uint8_t* m) {
  const int64_t nb = relu_mask_bytes(n);
  int64_t done = 0;  // whole bytes the AVX-512 loop wrote
#if MIXTAPE_X86_KERNELS
  if (cpu::isa_avx512()) {
    constexpr int64_t kBlock = 512 / (8 * sizeof(U));  // elements per compare
    const int64_t blocks = n / kBlock, chunk = 256;    // blocks per task
    const U* u = reinterpret_cast<const U*>(p);
#pragma omp parallel for if (n >= cpu::kParallelGrain) schedule(static)
    for (int64_t c = 0; c < (blocks + chunk - 1) / chunk; ++c)
      pack_bits_avx512(u + c * chunk * kBlock, std::min(chunk, blocks - c * chunk), m + c * chunk * kBlock / 8);
    done = blocks * kBlock / 8;
  }
#endif
#pragma omp parallel for if (n - 8 * done >= cpu::kParallelGrain) schedule(static)
  for (int64_t j = done; j < nb; ++j) {
    U v[8] = {};
    std::memcpy(v, p + 8 * j, static_cast<size_t>(std::min<int64_t>(8, n - 8 * j)) * sizeof(U));
    unsigned b = 0;
    for (int k = 0; k < 8; ++k) b |= unsigned(positive_bits(v[k])) << k;
    m[j] = static_cast<uint8_t>(b);
  }
}

}  // namespace

TensorList relu_and_mask_cpu(const Tensor& x) {
#if MIXTAPE_X86_KERNELS
  const bool bf16 = x.dtype() == DType::BFloat16;
  if (!cpu::isa_avx512() || !x.is_contiguous() || (!bf16 && x.dtype() != DType::Float32)) return {};
  if (bf16) {  // BF16 relu has a kernel list: run this pass only where it picks bits_avx512
    const int64_t strides[2] = {2, 2};
    // Asked quietly first: where the list declines, relu's own path makes (and traces) the choice.
    if (cpu::choose_bf16_rows("relu", false, strides, 2, false, false) != cpu::Bf16RowKernel::BitsAvx512) return {};
    (void)cpu::choose_bf16_rows("relu", false, strides, 2, false);  // the call's one trace line
  }
  const int64_t n = x.numel(), nb = relu_mask_bytes(n);
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(x.dtype()));
  Tensor mask = Tensor::empty({nb}, TensorOptions(DType::UInt8));
  uint8_t* m = mask.data_ptr<uint8_t>();
  const int64_t per = bf16 ? 32 : 16, blocks = n / per, chunk = 256;  // values per compare; blocks per task
  const char* xp = static_cast<const char*>(x.data_ptr());
  char* op = static_cast<char*>(out.data_ptr());
  const int64_t esz = bf16 ? 2 : 4;
#pragma omp parallel for if (n >= cpu::kParallelGrain) schedule(static)
  for (int64_t c = 0; c < (blocks + chunk - 1) / chunk; ++c) {
    const int64_t b0 = c * chunk, nbl = std::min(chunk, blocks - b0);
    if (bf16)
      relu_bits_avx512(reinterpret_cast<const uint16_t*>(xp) + b0 * per, nbl, reinterpret_cast<uint16_t*>(op) + b0 * per,
                       m + b0 * per / 8);
    else
      relu_bits_avx512(reinterpret_cast<const uint32_t*>(xp) + b0 * per, nbl, reinterpret_cast<uint32_t*>(op) + b0 * per,
                       m + b0 * per / 8);
  }
  // The tail (fewer than one compare's values; it starts on a mask byte): the scalar rule.
  for (int64_t j = blocks * per / 8; j < nb; ++j) {
    unsigned byte = 0;
    for (int64_t i = 8 * j, e = std::min(n, 8 * j + 8); i < e; ++i) {
      bool pos;
      if (bf16) {
        uint16_t v;
        std::memcpy(&v, xp + esz * i, 2);
        v = fn::Relu::bf16_bits(v);
        pos = positive_bits(v);
        std::memcpy(op + esz * i, &v, 2);
      } else {
        float v;
        std::memcpy(&v, xp + esz * i, 4);
        v = fn::Relu{}(v);
        pos = v > 0.0f;
        std::memcpy(op + esz * i, &v, 4);
      }
      byte |= unsigned(pos) << (i - 8 * j);
    }
    m[j] = static_cast<uint8_t>(byte);
  }
  return {out, mask};
#else
  (void)x;
  return {};
#endif
}

Tensor relu_mask_cpu(const Tensor& out) {
  const Tensor oc = pool_impl::dense(out);
  const int64_t n = oc.numel(), nb = relu_mask_bytes(n);
  Tensor mask = Tensor::empty({nb}, TensorOptions(DType::UInt8));
  uint8_t* m = mask.data_ptr<uint8_t>();
  if (oc.dtype() == DType::BFloat16) {  // the bits decide it: no widening
    pack_bits<BFloat16, uint16_t>(static_cast<const BFloat16*>(oc.data_ptr()), n, m);
    return mask;
  }
  if (oc.dtype() == DType::Float32) {
    pack_bits<float, uint32_t>(static_cast<const float*>(oc.data_ptr()), n, m);
    return mask;
  }
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
  const char* gp = static_cast<const char*>(gc.data_ptr());
  char* op = static_cast<char*>(out.data_ptr());
  if (g.dtype() == DType::BFloat16 || g.dtype() == DType::Float32) {
    // g AND the byte's lane masks; BF16 NaNs made quiet first (fn::ReluGrad stores a BF16 NaN
    // quiet: the widening and rounding do); an f32 g passes as it is.
    const bool bf16 = g.dtype() == DType::BFloat16;
    const int64_t full = n / 8;
    int64_t done = 0;  // mask bytes the AVX-512 loop applied
#if MIXTAPE_X86_KERNELS
    if (cpu::isa_avx512()) {
      const int64_t per = bf16 ? 32 : 16, blocks = n / per, chunk = 256;  // values per mask word
#pragma omp parallel for if (n >= cpu::kParallelGrain) schedule(static)
      for (int64_t c = 0; c < (blocks + chunk - 1) / chunk; ++c) {
        const int64_t b0 = c * chunk, nbl = std::min(chunk, blocks - b0);
        if (bf16)
          apply_bits_avx512(reinterpret_cast<const uint16_t*>(gp) + b0 * per, m + b0 * per / 8, nbl,
                            reinterpret_cast<uint16_t*>(op) + b0 * per);
        else
          apply_bits_avx512(reinterpret_cast<const uint32_t*>(gp) + b0 * per, m + b0 * per / 8, nbl,
                            reinterpret_cast<uint32_t*>(op) + b0 * per);
      }
      done = blocks * per / 8;
    }
#endif
#pragma omp parallel for if (n - 8 * done >= cpu::kParallelGrain) schedule(static)
    for (int64_t j = done; j < full; ++j) {
      if (bf16) {
        uint16_t v[8];
        std::memcpy(v, gp + 16 * j, 16);
        const uint16_t* lane = kLanes<uint16_t>.m[m[j]];
        for (int k = 0; k < 8; ++k) {
          const uint16_t quiet = uint16_t(((v[k] & 0x7FFFu) + 0x007Fu) & 0x8000u) >> 9;  // 0x40 for a NaN
          v[k] = uint16_t((v[k] | quiet) & lane[k]);
        }
        std::memcpy(op + 16 * j, v, 16);
      } else {
        uint32_t v[8];
        std::memcpy(v, gp + 32 * j, 32);
        const uint32_t* lane = kLanes<uint32_t>.m[m[j]];
        for (int k = 0; k < 8; ++k) v[k] &= lane[k];
        std::memcpy(op + 32 * j, v, 32);
      }
    }
    for (int64_t i = 8 * full; i < n; ++i) {  // the last, partial byte
      const bool keep = (m[full] >> (i - 8 * full)) & 1u;
      if (bf16) {
        uint16_t v;
        std::memcpy(&v, gp + 2 * i, 2);
        v = keep ? fn::ReluGrad::bf16_bits(v, 0x3F80u) : uint16_t(0);  // out = 1: kept
        std::memcpy(op + 2 * i, &v, 2);
      } else {
        uint32_t v;
        std::memcpy(&v, gp + 4 * i, 4);
        v = keep ? v : 0u;
        std::memcpy(op + 4 * i, &v, 4);
      }
    }
    return {out};
  }
  visit_floating(g.dtype(), call.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* gt = reinterpret_cast<const T*>(gp);
    T* o = reinterpret_cast<T*>(op);
#pragma omp parallel for if (n >= cpu::kParallelGrain) schedule(static)
    for (int64_t j = 0; j < nb; ++j) {
      const unsigned b = m[j];
      for (int64_t i = 8 * j, e = std::min(n, 8 * j + 8); i < e; ++i)
        o[i] = (b >> (i - 8 * j)) & 1u ? static_cast<T>(static_cast<A>(gt[i])) : static_cast<T>(A(0));
    }
  });
  return {out};
}

}  // namespace mixtape
