// amp/mx_block.cpp — see amp/mx_block.h.
#include "amp/mx_block.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <vector>

#include "amp/fp8_cast_table.h"
#include "amp/mx_block_avx512.h"
#include "core/error.h"
#include "ops/cast.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/loops.h"

namespace mixtape::amp {

uint8_t mx_scale_code(float amax, DType elem, MxScaleRounding rounding) {
  return mx_code_of(amax, elem == DType::Float8_e5m2, rounding == MxScaleRounding::Spec);
}

void check_mx_blocks(const Tensor& x, int64_t dim, const MXFP8BlockScaling& recipe, const char* who) {
  const int64_t len = x.size(dim), k = recipe.block_size;
  MT_CHECK(recipe.pad_tail || len % k == 0, who, ": MXFP8 block size ", k, " does not divide the reduction dim (",
           len, " values along dim ", dim, " of ", x.describe(), "); set pad_tail to end it in a block of ", len % k,
           " values");
}

Fp8Operand mx_quantize(const Tensor& x, int64_t axis, DType elem, const MXFP8BlockScaling& recipe, const char* who) {
  MT_CHECK(x.dim() == 2 && (axis == 0 || axis == 1), who, ": MX blocks need a 2-D tensor and axis 0 or 1, got ",
           x.describe(), " and axis ", axis);
  Fp8Operand op = mx_quantize_widened(x, axis, elem, recipe, who, true);
  const int64_t nb = op.block_scales.size(1);
  op.block_scales = op.block_scales.reshape(axis == 1 ? IntList{x.size(0), nb} : IntList{nb, x.size(1)});
  return op;
}

Fp8Operand mx_quantize_widened(const Tensor& x, int64_t dim, DType elem, const MXFP8BlockScaling& recipe,
                               const char* who, bool keep_data) {
  check_recipe(recipe, who);
  MT_CHECK(x.defined() && x.device().is_cpu() && dim >= 0 && dim < x.dim(), who,
           ": MX blocks need a CPU tensor and a dim of it, got ", x.defined() ? x.describe() : "undefined",
           " and dim ", dim);
  MT_CHECK(is_float8(elem), who, ": MX elements must be Float8_e4m3fn or Float8_e5m2, got ", dtype_name(elem));
  const int64_t len = x.size(dim), k = recipe.block_size;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  check_mx_blocks(x, dim, recipe, who);
  const int64_t nb = (len + k - 1) / k;
  Fp8Operand op;
  op.axis = dim;
  op.block_size = k;
  op.widened = Tensor::empty(x.sizes(), TensorOptions(DType::BFloat16));
  if (keep_data) op.data = Tensor::empty(x.sizes(), TensorOptions(elem));
  op.block_scales = Tensor::empty({outer, nb, inner}, TensorOptions(DType::UInt8));
  if (x.numel() == 0) return op;  // no block holds a value
  // The source read as it is when f32 or bf16 (no f32 copy), f16 through f32.
  const Tensor xc = contiguous(x.detach());
  const bool as_is = xc.dtype() == DType::Float32 || xc.dtype() == DType::BFloat16;
  const Tensor x32 = as_is ? xc : cpu::cast_to(xc, DType::Float32);
  const float* f32 = x32.dtype() == DType::Float32 ? x32.data_ptr<float>() : nullptr;
  const BFloat16* b16 = f32 == nullptr ? x32.data_ptr<BFloat16>() : nullptr;
  uint8_t* dst = keep_data ? static_cast<uint8_t*>(op.data.data_ptr()) : nullptr;
  BFloat16* wide = op.widened.data_ptr<BFloat16>();
  uint8_t* codes = op.block_scales.data_ptr<uint8_t>();
  const Fp8CastTable& cast = Fp8CastTable::of(elem);
  std::array<float, 256> dec;  // each FP8 code's value (exact)
  const std::array<BFloat16, 256> table = fp8_to_bf16_table(elem);
  for (int b = 0; b < 256; ++b) dec[b] = static_cast<float>(table[b]);
  // Blocks are independent: in parallel, the same bits at every thread count. One block row at a
  // time over the `inner` positions, so the reads run along memory and the amax loop vectorizes:
  // it is a max of |v|'s bits (monotonic for non-NaN floats), and any non-finite value (inf or
  // NaN, exponent all ones) makes it >= 0x7F800000, which marks the block's scale NaN.
  const bool par = outer * len * inner >= cpu::kParallelGrain && outer * nb > 1;
  const bool e5m2 = elem == DType::Float8_e5m2, spec = recipe.scale_rounding == MxScaleRounding::Spec;
  if (inner == 1 && mx_contiguous_blocks_available()) {
    // Contiguous blocks (inner 1): each one in a single AVX-512 pass (amp/mx_block_avx512.h), in
    // runs of up to kRun blocks; the blocks it leaves (a NaN scale or one near BF16's edges) then
    // take the scalar rule below, element by element.
    constexpr int64_t kRun = 256;
    const int64_t runs = (nb + kRun - 1) / kRun;
#pragma omp parallel for collapse(2) if (par) schedule(static)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = 0; r < runs; ++r) {
        const int64_t b0 = r * kRun, lo = o * len + b0 * k, n = std::min(len - b0 * k, kRun * k);
        uint8_t* c = codes + o * nb + b0;
        uint8_t* d = dst != nullptr ? dst + lo : nullptr;
        if (f32 != nullptr) mx_contiguous_blocks(f32 + lo, n, k, e5m2, spec, c, d, wide + lo);
        else mx_contiguous_blocks(b16 + lo, n, k, e5m2, spec, c, d, wide + lo);
        for (int64_t b = 0; b * k < n; ++b) {
          if (mx_widening_is_product(c[b])) continue;
          const float inv = mx_inv_scale_of(c[b]), pow2 = mx_scale_of(c[b]);
          for (int64_t j = lo + b * k; j < lo + std::min(n, (b + 1) * k); ++j) {
            const float v = f32 != nullptr ? f32[j] : static_cast<float>(b16[j]);
            const uint8_t q = c[b] == 0xFF ? uint8_t{0x7F} : cast(v * inv);  // a NaN block: every element NaN
            if (dst != nullptr) dst[j] = q;
            wide[j] = mx_widen(dec[q], pow2);
          }
        }
      }
    return op;
  }
  // The amax and code loops below, 16 lanes a vector (amp/mx_block_avx512.h).
  const bool avx512_rows = mx_contiguous_blocks_available();
#pragma omp parallel if (par)
  {
    std::vector<uint32_t> amax(static_cast<size_t>(inner));
    std::vector<float> inv(static_cast<size_t>(inner)), pow2(static_cast<size_t>(inner));
#pragma omp for collapse(2) schedule(static)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t n = std::min(k, len - b * k), base = (o * len + b * k) * inner;
        uint32_t* am = amax.data();
        std::fill(amax.begin(), amax.end(), 0u);
        if (avx512_rows) {
          if (f32 != nullptr) mx_amax_rows(f32 + base, n, inner, am);
          else mx_amax_rows(b16 + base, n, inner, am);
        }
        for (int64_t j = 0; j < n && !avx512_rows; ++j) {
          const int64_t row = base + j * inner;
          if (f32 != nullptr) {
            for (int64_t i = 0; i < inner; ++i)
              am[i] = std::max(am[i], std::bit_cast<uint32_t>(f32[row + i]) & 0x7FFFFFFFu);
          } else {
            for (int64_t i = 0; i < inner; ++i)
              am[i] = std::max(am[i], (static_cast<uint32_t>(b16[row + i].bits) & 0x7FFFu) << 16);
          }
        }
        uint8_t* c = codes + (o * nb + b) * inner;
        bool all_exact = true;  // no NaN scale, no BF16 edge: the vector cast, times 2^e in its pass
        if (avx512_rows) all_exact = mx_codes_of(am, inner, e5m2, spec, c, inv.data(), pow2.data());  // 16 at once
        for (int64_t i = 0; i < inner && !avx512_rows; ++i) {
          c[i] = mx_code_of(am[i] >= 0x7F800000u ? NAN : std::bit_cast<float>(am[i]), e5m2, spec);
          // v / 2^e as v * 2^-e: 2^-e (e in [-127, 127]) is an exact float, so the product is
          // v / 2^e rounded once, as ldexp rounds it (exact unless it lands among the subnormals).
          // (2^e and 2^-e built from their bits: amp/mx_scale_rule.h, NaN for the NaN code.)
          inv[i] = mx_inv_scale_of(c[i]);
          pow2[i] = mx_scale_of(c[i]);
          // The widening is then the product's top half (mx_widen's edges cannot occur), so the
          // cast multiplies its rounded value by 2^e before storing it.
          all_exact = all_exact && mx_widening_is_product(c[i]);
        }
        if (all_exact) {
          // A contiguous block under one scale (inner 1), or one row of the block at a time with
          // one scale per lane: the AVX-512 cast (cast_*_widened), BF16 read in the register.
          uint8_t* d = dst != nullptr ? dst + base : nullptr;
          if (inner == 1) {
            if (f32 != nullptr) cast.cast_block_widened(f32 + base, inv[0], pow2[0], d, wide + base, n);
            else cast.cast_block_widened(b16 + base, inv[0], pow2[0], d, wide + base, n);
            continue;
          }
          for (int64_t j = 0; j < n; ++j) {
            const int64_t off = j * inner;
            if (f32 != nullptr)
              cast.cast_lanes_widened(f32 + base + off, inv.data(), d != nullptr ? d + off : nullptr, wide + base + off,
                                      inner, pow2.data());
            else
              cast.cast_lanes_widened(b16 + base + off, inv.data(), d != nullptr ? d + off : nullptr, wide + base + off,
                                      inner, pow2.data());
          }
          continue;
        }
        for (int64_t j = 0; j < n; ++j) {
          const int64_t row = base + j * inner;
          for (int64_t i = 0; i < inner; ++i) {
            const float v = f32 != nullptr ? f32[row + i] : static_cast<float>(b16[row + i]);
            // A block whose scale is NaN: every element is NaN (0x7F in both formats).
            const uint8_t q = c[i] == 0xFF ? uint8_t{0x7F} : cast(v * inv[i]);
            if (dst != nullptr) dst[row + i] = q;
            wide[row + i] = mx_widen(dec[q], pow2[i]);
          }
        }
      }
  }
  return op;
}

}  // namespace mixtape::amp
