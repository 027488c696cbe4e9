// amp/mx_block.cpp — see amp/mx_block.h.
#include "amp/mx_block.h"

#include <algorithm>
#include <cmath>

#include "amp/fp8_cast_table.h"
#include "core/error.h"
#include "ops/cast.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/loops.h"

namespace mixtape::amp {

uint8_t mx_scale_code(float amax, DType elem, MxScaleRounding rounding) {
  if (!std::isfinite(amax)) return 0xFF;
  if (amax == 0.0f) return 127;
  int E = 0;
  const double m = std::frexp(static_cast<double>(std::fabs(amax)), &E);  // amax = m * 2^E, m in [0.5, 1)
  int e;
  if (rounding == MxScaleRounding::Spec) {
    const int emax_elem = elem == DType::Float8_e4m3fn ? 8 : 15;
    e = (E - 1) - emax_elem;
  } else {
    int Ef = 0;
    const double mf = std::frexp(static_cast<double>(fp8_max(elem)), &Ef);  // 448 = 0.875 * 2^9
    // amax <= mf * 2^(Ef + e)  <=>  m * 2^(E - Ef - e) <= mf; m >= 0.5 > mf / 2 rules out e = E - Ef - 1.
    e = m <= mf ? E - Ef : E - Ef + 1;
  }
  e = std::clamp(e, -127, 127);
  return static_cast<uint8_t>(e + 127);
}

Fp8Operand mx_quantize(const Tensor& x, int64_t axis, DType elem, const MXFP8BlockScaling& recipe, const char* who) {
  check_recipe(recipe, who);
  MT_CHECK(x.dim() == 2 && (axis == 0 || axis == 1), who, ": MX blocks need a 2-D tensor and axis 0 or 1, got ",
           x.describe(), " and axis ", axis);
  MT_CHECK(is_float8(elem), who, ": MX elements must be Float8_e4m3fn or Float8_e5m2, got ", dtype_name(elem));
  const int64_t rows = x.size(0), cols = x.size(1), len = x.size(axis), k = recipe.block_size;
  MT_CHECK(recipe.pad_tail || len % k == 0, who, ": MXFP8 block size ", k, " does not divide the reduction dim (",
           len, " values along dim ", axis, " of ", x.describe(), "); set pad_tail to end it in a block of ", len % k,
           " values");
  const Tensor x32 = contiguous(cpu::cast_to(x.detach(), DType::Float32));
  const float* src = x32.data_ptr<float>();
  const int64_t nb = (len + k - 1) / k;
  Fp8Operand op;
  op.axis = axis;
  op.block_size = k;
  op.data = Tensor::empty({rows, cols}, TensorOptions(elem));
  op.block_scales = Tensor::empty(axis == 1 ? IntList{rows, nb} : IntList{nb, cols}, TensorOptions(DType::UInt8));
  uint8_t* dst = static_cast<uint8_t*>(op.data.data_ptr());
  uint8_t* codes = op.block_scales.data_ptr<uint8_t>();
  const Fp8CastTable& cast = Fp8CastTable::of(elem);
  // One block: `n` values starting at element `start`, `step` apart.
  auto block = [&](int64_t start, int64_t step, int64_t n, uint8_t* code_out) {
    float amax = 0.0f;
    bool nonfinite = false;
    for (int64_t j = 0; j < n; ++j) {
      const float v = src[start + j * step];
      nonfinite = nonfinite || !std::isfinite(v);
      amax = std::fmax(amax, std::fabs(v));
    }
    const uint8_t code = mx_scale_code(nonfinite ? NAN : amax, elem, recipe.scale_rounding);
    *code_out = code;
    if (code == 0xFF) {  // the block's scale is NaN: so is every element
      for (int64_t j = 0; j < n; ++j) dst[start + j * step] = 0x7F;
      return;
    }
    // v / 2^e as v * 2^-e: 2^-e (e in [-127, 127]) is an exact float, so the product is v / 2^e
    // rounded once, as ldexp rounds it (exact unless it lands among the subnormals).
    const float inv = std::ldexp(1.0f, 127 - static_cast<int>(code));
    for (int64_t j = 0; j < n; ++j) dst[start + j * step] = cast(src[start + j * step] * inv);
  };
  // Blocks are independent: in parallel, the same bits at every thread count.
  const bool par = rows * cols >= cpu::kParallelGrain;
  if (axis == 1) {
#pragma omp parallel for if (par) schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < nb; ++b)
        block(r * cols + b * k, 1, std::min(k, cols - b * k), codes + r * nb + b);
  } else {
#pragma omp parallel for collapse(2) if (par) schedule(static)
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t c = 0; c < cols; ++c)
        block(b * k * cols + c, cols, std::min(k, rows - b * k), codes + b * cols + c);
  }
  return op;
}

}  // namespace mixtape::amp
