// amp/fp8_recipe.h — the FP8 scaling recipes (docs/FP8.md, "Recipes"): what Fp8Autocast is
// configured with. Plain values with Transformer Engine's defaults; check_recipe refuses a bad
// one with its numbers. The math lives elsewhere: per-tensor scales in amp/fp8_scaling.h, the
// delayed recipe's per-module state in amp/fp8_meta.h, MX blocks in amp/mx_block.h.
// Invariant: a recipe that passed check_recipe never makes the scale math divide by zero or
// produce a non-finite or non-positive scale.
#pragma once
#include <cstdint>
#include <string>
#include <variant>

#include "core/dtype.h"

namespace mixtape::amp {

// Which FP8 format each tensor role uses (TE's recipe.Format).
//   Hybrid: E4M3 for the forward operands (input, weight), E5M2 for the output gradient.
//   E4M3:   E4M3 everywhere.
enum class Fp8Format : uint8_t { Hybrid, E4M3 };

// The three tensors of a GEMM-carrying module that are cast to FP8 (TE's fp8_meta slots).
enum class Fp8Role : uint8_t { Input = 0, Weight = 1, GradOutput = 2 };
inline constexpr int kFp8Roles = 3;
const char* fp8_role_name(Fp8Role r);  // "input", "weight", "grad_output"

// Delayed scaling: the scale used at step t comes from the amaxes recorded at steps < t.
enum class AmaxComputeAlgo : uint8_t { Max, MostRecent };
struct DelayedScaling {
  float margin = 0.0f;                 // scale = fp8_max * 2^-margin / amax; finite, any sign
  Fp8Format fp8_format = Fp8Format::Hybrid;
  int64_t amax_history_len = 1024;     // rows of the amax history; >= 1
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::Max;
  // Round every scale down to a power of two (TE's force_pow_2_scales; off in TE's delayed recipe):
  // then quantize/dequantize multiply exactly.
  bool power_of_2_scales = false;
};

// Current scaling: one scale per tensor from this cast's own amax (TE's Float8CurrentScaling).
struct CurrentScaling {
  Fp8Format fp8_format = Fp8Format::Hybrid;
  bool power_of_2_scales = false;
};

// MXFP8 (OCP MX v1.0): one E8M0 scale per block_size consecutive values along the reduction dim.
//   Up:   the scale is the smallest power of two 2^e with amax <= fp8_max * 2^e (NVIDIA's MXFP8
//         pre-training recipe, TE's): nothing in the block saturates.
//   Spec: the OCP spec's 2^(floor(log2 amax) - emax_elem): blocks whose amax lies between
//         fp8_max * 2^k and 2^(emax_elem + 1 + k) clamp their largest values to fp8_max.
enum class MxScaleRounding : uint8_t { Up, Spec };
struct MXFP8BlockScaling {
  Fp8Format fp8_format = Fp8Format::E4M3;  // TE's default for MXFP8
  int64_t block_size = 32;                  // the spec's k; >= 1
  MxScaleRounding scale_rounding = MxScaleRounding::Up;
  // A reduction dim that block_size does not divide: true, the last block is shorter (what
  // zero-padding it to block_size gives: zeros change neither its amax nor any product);
  // false, refused with the numbers (TE's MXFP8 requires divisibility by 32).
  bool pad_tail = true;
};

using Fp8Recipe = std::variant<DelayedScaling, CurrentScaling, MXFP8BlockScaling>;

// Throws, naming `who` and the bad numbers, for a history length < 1, a non-finite margin, or
// a block size < 1.
void check_recipe(const Fp8Recipe& recipe, const char* who);
std::string recipe_string(const Fp8Recipe& recipe);  // "DelayedScaling(margin=0, HYBRID, ...)"

Fp8Format recipe_format(const Fp8Recipe& recipe);
// The FP8 dtype a role is cast to under `format`.
DType fp8_dtype_for(Fp8Format format, Fp8Role role);
// The largest finite value of an FP8 dtype: 448 (e4m3fn) or 57344 (e5m2).
float fp8_max(DType fp8);

}  // namespace mixtape::amp
