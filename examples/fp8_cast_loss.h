// examples/fp8_cast_loss.h — what one FP8 cast loses, measured with the casts amp::Fp8Autocast
// uses (amp::quantize_per_tensor, amp::mx_quantize), for the teaching programs fp8_tour and
// fp8_underflow: how many values saturate (lie beyond the largest value their scale can
// represent, so the cast clips them to ±max) and how many nonzero values flush to zero.
// Invariant: counts, not fractions, so that several casts add up exactly.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "amp/fp8_scaling.h"
#include "amp/mx_block.h"
#include "mixtape/mixtape.h"

namespace fp8_example {

using namespace mixtape;
using namespace mixtape::amp;

struct CastLoss {
  int64_t values = 0, nonzero = 0, saturated = 0, flushed = 0;
  double saturated_pct() const { return pct(saturated, values); }
  double flushed_pct() const { return pct(flushed, nonzero); }
  static double pct(int64_t k, int64_t n) { return 100.0 * static_cast<double>(k) / static_cast<double>(std::max<int64_t>(n, 1)); }
  CastLoss& operator+=(const CastLoss& o) {
    values += o.values, nonzero += o.nonzero, saturated += o.saturated, flushed += o.flushed;
    return *this;
  }
};

// x: the f32 values cast; q: their dequantized FP8 values; limit(i): the largest magnitude the
// scale of value i represents.
template <class Limit>
CastLoss count_loss(const Tensor& x, const Tensor& q, Limit limit) {
  const auto xv = x.contiguous().to_vector<float>(), qv = q.contiguous().to_vector<float>();
  CastLoss l;
  l.values = static_cast<int64_t>(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    if (std::fabs(xv[i]) > limit(i)) ++l.saturated;
    if (xv[i] != 0.0f) {
      ++l.nonzero;
      if (qv[i] == 0.0f) ++l.flushed;
    }
  }
  return l;
}

// A 2-D f32 tensor cast per tensor at `scale`.
inline CastLoss per_tensor_loss(const Tensor& t, DType fp8, float scale) {
  const Fp8Operand q = quantize_per_tensor(t, fp8, scale);
  const float limit = fp8_max(fp8) / scale;
  return count_loss(t, dequantize(q), [&](size_t) { return limit; });
}

// A 2-D f32 tensor cast in MX blocks along dim 1; the E8M0 exponents' range in *emin, *emax.
inline CastLoss mx_loss(const Tensor& t, DType fp8, const MXFP8BlockScaling& recipe, Fp8Operand* quantized = nullptr,
                        int* emin = nullptr, int* emax = nullptr) {
  const Fp8Operand q = mx_quantize(t, 1, fp8, recipe, "mx_loss");
  const int64_t cols = t.size(1), nb = q.block_scales.size(1);
  const uint8_t* code = q.block_scales.data_ptr<uint8_t>();
  auto exponent = [&](size_t i) {
    const int64_t row = static_cast<int64_t>(i) / cols, col = static_cast<int64_t>(i) % cols;
    return code[row * nb + col / q.block_size] - 127;
  };
  if (emin != nullptr && emax != nullptr) {
    *emin = 255, *emax = -255;
    for (int64_t b = 0; b < q.block_scales.numel(); ++b) {
      *emin = std::min(*emin, code[b] - 127);
      *emax = std::max(*emax, code[b] - 127);
    }
  }
  const float max = fp8_max(fp8);
  const CastLoss l = count_loss(t, dequantize(q), [&](size_t i) { return std::ldexp(max, exponent(i)); });
  if (quantized != nullptr) *quantized = q;
  return l;
}

}  // namespace fp8_example
