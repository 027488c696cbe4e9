// amp/fp8_scaling.cpp — see amp/fp8_scaling.h.
#include "amp/fp8_scaling.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/cast.h"
#include "ops/cpu/elementwise.h"

namespace mixtape::amp {

float amax_of(const Tensor& x) {
  MT_CHECK(x.device().is_cpu(), "amax_of: runs on the CPU for now, got ", x.describe(), " on ", x.device());
  const Tensor c = contiguous(cpu::cast_to(x.detach(), DType::Float32));
  const float* p = c.data_ptr<float>();
  float m = 0.0f;
  for (int64_t i = 0, n = c.numel(); i < n; ++i) m = std::fmax(m, std::fabs(p[i]));  // fmax drops NaN
  return m;
}

float scale_from_amax(float amax, float fp8_max, float margin, bool power_of_2, float fallback) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return fallback;
  const float scaled_max = fp8_max * std::exp2(-margin);
  float s = scaled_max / amax;
  if (!(s <= FLT_MAX)) s = FLT_MAX;  // inf (or scaled_max inf): TE's value_for_inf
  if (s < FLT_MIN) s = FLT_MIN;      // keeps the scale and its reciprocal finite and positive
  if (power_of_2) {
    uint32_t bits;
    std::memcpy(&bits, &s, sizeof bits);
    bits &= 0xFF800000u;  // drop the mantissa: the power of two at or below s
    std::memcpy(&s, &bits, sizeof s);
  }
  return s;
}

Fp8Operand quantize_per_tensor(const Tensor& x32, DType fp8, float scale) {
  Fp8Operand op;
  op.data = to_float8(x32.detach(), fp8, Float8Cast{scale, Fp8Saturation::Finite});
  op.scale_inv = 1.0f / scale;
  return op;
}

namespace {
// The E8M0 code's power of two as an exponent; 0xFF is NaN (handled by the callers).
int mx_exponent(uint8_t code) { return static_cast<int>(code) - 127; }

template <typename Fn>
void for_each_block_value(const Fp8Operand& op, Fn&& fn) {
  const int64_t rows = op.data.size(0), cols = op.data.size(1);
  const uint8_t* sc = op.block_scales.data_ptr<uint8_t>();
  const int64_t nb_cols = op.axis == 1 ? op.block_scales.size(1) : cols;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t br = op.axis == 0 ? r / op.block_size : r, bc = op.axis == 1 ? c / op.block_size : c;
      fn(r * cols + c, sc[br * nb_cols + bc]);
    }
}

float fp8_value(DType dt, uint8_t b) { return dt == DType::Float8_e4m3fn ? e4m3fn_bits_to_float(b) : e5m2_bits_to_float(b); }
}  // namespace

Tensor widen_to_bf16(const Fp8Operand& op) {
  MT_CHECK(op.data.defined() && op.data.dim() == 2 && op.data.is_contiguous(),
           "widen_to_bf16: expected a contiguous 2-D FP8 operand");
  Tensor out = Tensor::empty(op.data.sizes(), TensorOptions(DType::BFloat16));
  const uint8_t* d = static_cast<const uint8_t*>(op.data.data_ptr());
  BFloat16* o = out.data_ptr<BFloat16>();
  const DType dt = op.data.dtype();
  if (op.axis < 0) {
    // Every FP8 value is a BF16 value: its f32 pattern has zeros in the low 16 bits.
    BFloat16 table[256];
    for (int b = 0; b < 256; ++b) table[b] = BFloat16(fp8_value(dt, static_cast<uint8_t>(b)));
    for (int64_t i = 0, n = op.data.numel(); i < n; ++i) o[i] = table[d[i]];
    return out;
  }
  for_each_block_value(op, [&](int64_t i, uint8_t code) {
    o[i] = code == 0xFF ? BFloat16::quiet_nan() : BFloat16(std::ldexp(fp8_value(dt, d[i]), mx_exponent(code)));
  });
  return out;
}

Tensor dequantize(const Fp8Operand& op) {
  if (op.axis < 0) return from_float8(op.data, op.scale_inv);
  Tensor out = Tensor::empty(op.data.sizes(), TensorOptions(DType::Float32));
  const uint8_t* d = static_cast<const uint8_t*>(op.data.data_ptr());
  float* o = out.data_ptr<float>();
  const DType dt = op.data.dtype();
  for_each_block_value(op, [&](int64_t i, uint8_t code) {
    o[i] = code == 0xFF ? NAN : std::ldexp(fp8_value(dt, d[i]), mx_exponent(code));
  });
  return out;
}

}  // namespace mixtape::amp
