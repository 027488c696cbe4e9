// amp/fp8_scaling.cpp — see amp/fp8_scaling.h.
#include "amp/fp8_scaling.h"

#include "amp/amax_kernels.h"
#include "amp/fp8_cast_table.h"
#include "amp/fp8_scale_rule.h"
#include "amp/mx_block.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/convert.h"
#include "core/error.h"
#include "ops/cast.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/loops.h"

namespace mixtape::amp {

float amax_of(const Tensor& x) {
  MT_CHECK(x.device().is_cpu(), "amax_of: runs on the CPU for now, got ", x.describe(), " on ", x.device());
  const bool bf16 = x.dtype() == DType::BFloat16;
  // BF16 on its own bits (no f32 copy); other dtypes through f32.
  const Tensor c = bf16 ? contiguous(x.detach()) : contiguous(cpu::cast_to(x.detach(), DType::Float32));
  const int64_t n = c.numel();
  // Chunks over the threads, each a vector max; max is exact and order-free: the same answer at
  // every thread count.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  float m = 0.0f;
#pragma omp parallel for if (n >= cpu::kParallelGrain && chunks > 1) schedule(static) reduction(max : m)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t i = ch * kChunk, len = std::min(kChunk, n - i);
    const float a = bf16 ? amax_bf16(c.data_ptr<BFloat16>() + i, len) : amax_f32(c.data_ptr<float>() + i, len);
    m = a > m ? a : m;
  }
  return m;
}

// The rule itself is amp/fp8_scale_rule.h's, shared with the device-side update (CUDA).
float scale_from_amax(float amax, float fp8_max, float margin, bool power_of_2, float fallback) {
  return fp8_scale_from_scaled_max(amax, fp8_max * std::exp2(-margin), power_of_2, fallback);
}

Fp8Operand quantize_per_tensor(const Tensor& x32, DType fp8, float scale, float* amax) {
  // to_float8's checks and bits (fp8_saturating(f32(x * scale))), on all threads: each element
  // is converted on its own, so the bits do not depend on the thread count.
  MT_CHECK(is_float8(fp8), "quantize_per_tensor: the target must be an FP8 dtype, got ", dtype_name(fp8));
  MT_CHECK(std::isfinite(scale) && scale > 0.0f, "quantize_per_tensor: scale must be finite and > 0, got ", scale);
  const Tensor c = contiguous(cpu::cast_to(x32.detach(), DType::Float32));
  Fp8Operand op;
  op.data = Tensor::empty(c.sizes(), TensorOptions(fp8));
  const float* src = c.data_ptr<float>();
  uint8_t* dst = static_cast<uint8_t*>(op.data.data_ptr());
  const int64_t n = c.numel();
  const Fp8CastTable& cast = Fp8CastTable::of(fp8);
  // Chunks of the same bulk cast (16 a vector); the amax it reads on the way is max-reduced,
  // exact and order-free.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  float m = 0.0f;
#pragma omp parallel for if (n >= cpu::kParallelGrain && chunks > 1) schedule(static) reduction(max : m)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t i = ch * kChunk;
    const float a = cast.cast_scaled(src + i, scale, dst + i, std::min(kChunk, n - i));
    m = a > m ? a : m;
  }
  op.scale = scale;
  op.scale_inv = 1.0f / scale;
  if (amax != nullptr) *amax = m;
  return op;
}

namespace {

// The widened casts' arguments: an FP8 target, a finite positive scale, a CPU source of a dtype
// they read (f16 where `f16` allows it).
void check_widened_cast(const char* who, const Tensor& x, DType fp8, float scale, bool f16) {
  MT_CHECK(is_float8(fp8), who, ": the target must be an FP8 dtype, got ", dtype_name(fp8));
  MT_CHECK(std::isfinite(scale) && scale > 0.0f, who, ": scale must be finite and > 0, got ", scale);
  const DType dt = x.dtype();
  MT_CHECK(x.device().is_cpu() && (dt == DType::Float32 || dt == DType::BFloat16 || (f16 && dt == DType::Float16)),
           who, ": expected a CPU f32, bf16", f16 ? " or f16" : "", " tensor, got ", x.describe());
}

}  // namespace

Fp8Operand quantize_per_tensor_widened(const Tensor& x, DType fp8, float scale, float* amax, bool keep_data) {
  check_widened_cast("quantize_per_tensor_widened", x, fp8, scale, true);
  const DType dt = x.dtype();
  const Tensor c = contiguous(x.detach());
  Fp8Operand op;
  if (keep_data) op.data = Tensor::empty(c.sizes(), TensorOptions(fp8));
  op.widened = Tensor::empty(c.sizes(), TensorOptions(DType::BFloat16));
  uint8_t* dst = keep_data ? static_cast<uint8_t*>(op.data.data_ptr()) : nullptr;
  BFloat16* wide = op.widened.data_ptr<BFloat16>();
  const int64_t n = c.numel();
  const Fp8CastTable& cast = Fp8CastTable::of(fp8);
  // Chunks small enough that the f32 staging of an f16 input stays in L1 (BF16 is read as it is).
  constexpr int64_t kChunk = 2048;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  float m = 0.0f;
#pragma omp parallel if (n >= cpu::kParallelGrain && chunks > 1)
  {
    alignas(64) float buf[kChunk];
#pragma omp for schedule(static) reduction(max : m)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t i = ch * kChunk, len = std::min(kChunk, n - i);
      uint8_t* d = dst != nullptr ? dst + i : nullptr;
      float a;
      if (dt == DType::BFloat16) {  // read as it is
        a = cast.cast_scaled_widened(c.data_ptr<BFloat16>() + i, scale, d, wide + i, len);
      } else {
        const float* src = buf;
        if (dt == DType::Float32)
          src = c.data_ptr<float>() + i;
        else
          convert_half_to_float(c.data_ptr<Half>() + i, buf, static_cast<size_t>(len));
        a = cast.cast_scaled_widened(src, scale, d, wide + i, len);
      }
      m = a > m ? a : m;
    }
  }
  op.scale = scale;
  op.scale_inv = 1.0f / scale;
  if (amax != nullptr) *amax = m;
  return op;
}

Fp8Operand quantize_per_tensor_widened_channel_sums(const Tensor& x, DType fp8, float scale, float* amax,
                                                    Tensor* sums) {
  check_widened_cast("quantize_per_tensor_widened_channel_sums", x, fp8, scale, false);
  MT_CHECK(x.dim() >= 2, "quantize_per_tensor_widened_channel_sums: expected a tensor (N, C, ...), got ",
           x.describe());
  const DType dt = x.dtype();
  const Tensor c = contiguous(x.detach());
  const int64_t N = c.size(0), C = c.size(1), L = C == 0 || N == 0 ? 0 : c.numel() / (N * C);
  Fp8Operand op;
  op.widened = Tensor::empty(c.sizes(), TensorOptions(DType::BFloat16));
  *sums = Tensor::empty({C}, TensorOptions(DType::Float32));
  float* o = sums->data_ptr<float>();
  BFloat16* wide = op.widened.data_ptr<BFloat16>();
  const Fp8CastTable& cast = Fp8CastTable::of(fp8);
  float m = 0.0f;
  // A channel per thread, its rows n by n: each lane's adds in one order at every thread count.
#pragma omp parallel for if (c.numel() >= cpu::kParallelGrain && C > 1) schedule(static) reduction(max : m)
  for (int64_t ch = 0; ch < C; ++ch) {
    float lanes[16] = {};
    for (int64_t n = 0; n < N; ++n) {
      const int64_t base = (n * C + ch) * L;
      const float a = dt == DType::BFloat16
                          ? cast.cast_scaled_widened(c.data_ptr<BFloat16>() + base, scale, nullptr, wide + base, L, lanes)
                          : cast.cast_scaled_widened(c.data_ptr<float>() + base, scale, nullptr, wide + base, L, lanes);
      m = a > m ? a : m;
    }
    float t = 0.0f;
    for (float v : lanes) t += v;
    o[ch] = t;
  }
  op.scale = scale;
  op.scale_inv = 1.0f / scale;
  if (amax != nullptr) *amax = m;
  return op;
}

Tensor widen_fp8(const Tensor& fp8) {
  MT_CHECK(fp8.defined() && is_float8(fp8.dtype()) && fp8.is_contiguous() && fp8.device().is_cpu(),
           "widen_fp8: expected a contiguous CPU FP8 tensor, got ", fp8.defined() ? fp8.describe() : "undefined");
  Tensor out = Tensor::empty(fp8.sizes(), TensorOptions(DType::BFloat16));
  const uint8_t* d = static_cast<const uint8_t*>(fp8.data_ptr());
  BFloat16* o = out.data_ptr<BFloat16>();
  const std::array<BFloat16, 256> table = fp8_to_bf16_table(fp8.dtype());
  const int64_t n = fp8.numel();
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for if (n >= cpu::kParallelGrain && chunks > 1) schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch)
    widen_fp8_codes(table, d + ch * kChunk, o + ch * kChunk, std::min(kChunk, n - ch * kChunk));
  return out;
}

namespace {
// fn(element index, its block's code) for every element, block by block (no division per
// element); rows in parallel (fn writes element i only).
template <typename Fn>
void for_each_block_value(const Fp8Operand& op, Fn&& fn) {
  const int64_t rows = op.data.size(0), cols = op.data.size(1), k = op.block_size;
  const uint8_t* sc = op.block_scales.data_ptr<uint8_t>();
  if (op.axis == 1) {
    const int64_t nb = op.block_scales.size(1);
#pragma omp parallel for if (rows * cols >= cpu::kParallelGrain) schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t code = sc[r * nb + b];
        for (int64_t c = b * k, end = std::min(cols, c + k); c < end; ++c) fn(r * cols + c, code);
      }
  } else {
#pragma omp parallel for if (rows * cols >= cpu::kParallelGrain) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* codes = sc + (r / k) * cols;  // the codes of the block row r is in
      for (int64_t c = 0; c < cols; ++c) fn(r * cols + c, codes[c]);
    }
  }
}

// 2^(code - 127) for every E8M0 code, exact (2^-127 is a float subnormal); NaN for 0xFF.
std::array<float, 256> e8m0_values() {
  std::array<float, 256> v;
  for (int c = 0; c < 255; ++c) v[c] = std::ldexp(1.0f, c - 127);
  v[255] = NAN;
  return v;
}

float fp8_value(DType dt, uint8_t b) { return dt == DType::Float8_e4m3fn ? e4m3fn_bits_to_float(b) : e5m2_bits_to_float(b); }
}  // namespace

std::array<BFloat16, 256> fp8_to_bf16_table(DType fp8) {
  // Every FP8 value is a BF16 value: its f32 pattern has zeros in the low 16 bits.
  std::array<BFloat16, 256> table;
  for (int b = 0; b < 256; ++b) table[b] = BFloat16(fp8_value(fp8, static_cast<uint8_t>(b)));
  return table;
}

Tensor widen_to_bf16(const Fp8Operand& op) {
  if (op.widened.defined()) return op.widened;
  MT_CHECK(op.data.defined() && op.data.dim() == 2 && op.data.is_contiguous(),
           "widen_to_bf16: expected a contiguous 2-D FP8 operand");
  if (op.axis < 0) return widen_fp8(op.data);
  Tensor out = Tensor::empty(op.data.sizes(), TensorOptions(DType::BFloat16));
  const uint8_t* d = static_cast<const uint8_t*>(op.data.data_ptr());
  BFloat16* o = out.data_ptr<BFloat16>();
  const DType dt = op.data.dtype();
  // value * 2^e, with BF16's range edges as mx_widen (amp/mx_block.h) handles them.
  std::array<float, 256> dec;
  for (int b = 0; b < 256; ++b) dec[b] = fp8_value(dt, static_cast<uint8_t>(b));
  const std::array<float, 256> pow2 = e8m0_values();
  for_each_block_value(op, [&](int64_t i, uint8_t code) { o[i] = mx_widen(dec[d[i]], pow2[code]); });
  return out;
}

Tensor dequantize(const Fp8Operand& op) {
  if (op.axis < 0) return from_float8(op.data, op.scale_inv);
  Tensor out = Tensor::empty(op.data.sizes(), TensorOptions(DType::Float32));
  const uint8_t* d = static_cast<const uint8_t*>(op.data.data_ptr());
  float* o = out.data_ptr<float>();
  const DType dt = op.data.dtype();
  std::array<float, 256> dec;
  for (int b = 0; b < 256; ++b) dec[b] = fp8_value(dt, static_cast<uint8_t>(b));
  const std::array<float, 256> pow2 = e8m0_values();
  for_each_block_value(op, [&](int64_t i, uint8_t code) { o[i] = dec[d[i]] * pow2[code]; });
  return out;
}

}  // namespace mixtape::amp
