// amp/cuda/mx_block_cuda.cpp — see amp/cuda/mx_block_cuda.h: argument checks, outputs and launches
// of amp/cuda/mx_block.cu's kernels.
#include "amp/cuda/mx_block_cuda.h"

#include "amp/cuda/mx_block_kernels.h"
#include "amp/mx_block.h"
#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "ops/cuda/tensor_iter.h"

namespace mixtape::amp::cuda {
namespace {

MxBlocks blocks_of(const IntList& sizes, int64_t dim, int64_t k, DType elem, MxScaleRounding rounding) {
  MxBlocks b{1, sizes[size_t(dim)], 1, k, elem == DType::Float8_e5m2, rounding == MxScaleRounding::Spec};
  for (int64_t d = 0; d < dim; ++d) b.outer *= sizes[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < sizes.size(); ++d) b.inner *= sizes[d];
  return b;
}

}  // namespace

Fp8Operand mx_quantize_cuda(const Tensor& x, int64_t dim, DType elem, const MXFP8BlockScaling& recipe,
                            const char* who, bool keep_data, bool widen) {
  check_recipe(recipe, who);
  MT_CHECK(x.defined() && x.device().is_cuda() && dim >= 0 && dim < x.dim(), who,
           ": MX blocks need a CUDA tensor and a dim of it, got ", x.defined() ? x.describe() : "undefined",
           " and dim ", dim);
  MT_CHECK(x.dtype() == DType::Float32 || x.dtype() == DType::BFloat16 || x.dtype() == DType::Float16, who,
           ": MX blocks are cast from f32, bf16 or f16, got ", x.describe());
  MT_CHECK(is_float8(elem), who, ": MX elements must be Float8_e4m3fn or Float8_e5m2, got ", dtype_name(elem));
  check_mx_blocks(x, dim, recipe, who);
  ::mixtape::cuda::DeviceGuard guard(x.device().index());
  const MxBlocks b = blocks_of(x.sizes(), dim, recipe.block_size, elem, recipe.scale_rounding);
  const int64_t nb = (b.len + b.k - 1) / b.k;
  Fp8Operand op;
  op.axis = dim;
  op.block_size = recipe.block_size;
  op.block_scales = ::mixtape::cuda::empty_on({b.outer, nb, b.inner}, DType::UInt8, x.device());
  if (keep_data) op.data = ::mixtape::cuda::empty_on(x.sizes(), elem, x.device());
  if (widen) op.widened = ::mixtape::cuda::empty_on(x.sizes(), DType::BFloat16, x.device());
  const Tensor xc = ::mixtape::cuda::dense(x.detach(), who);
  MT_CUDA_CHECK(launch_mx_quantize(x.dtype(), xc.data_ptr(), b,
                                   keep_data ? static_cast<uint8_t*>(op.data.data_ptr()) : nullptr,
                                   static_cast<uint8_t*>(op.block_scales.data_ptr()),
                                   widen ? static_cast<uint16_t*>(op.widened.data_ptr()) : nullptr,
                                   ::mixtape::cuda::current_stream()),
                who);
  return op;
}

Tensor mx_widen_cuda(const Fp8Operand& op) {
  MT_CHECK(op.data.defined() && op.data.device().is_cuda() && is_float8(op.data.dtype()) && op.axis >= 0 &&
               op.axis < op.data.dim() && op.block_size >= 1 && op.block_scales.defined(),
           "mx_widen_cuda: expected a CUDA MX operand with its FP8 data and block codes, got data ",
           op.data.defined() ? op.data.describe() : std::string("undefined"), " on ",
           op.data.defined() ? op.data.device().str() : std::string("-"), ", axis ", op.axis, ", block size ",
           op.block_size, ", codes ", op.block_scales.defined() ? op.block_scales.describe() : std::string("undefined"));
  ::mixtape::cuda::DeviceGuard guard(op.data.device().index());
  const MxBlocks b = blocks_of(op.data.sizes(), op.axis, op.block_size, op.data.dtype(), MxScaleRounding::Up);
  MT_CHECK(op.block_scales.numel() == b.outer * ((b.len + b.k - 1) / b.k) * b.inner && op.data.is_contiguous() &&
               op.block_scales.is_contiguous(),
           "mx_widen_cuda: ", op.block_scales.describe(), " are not the block codes of ", op.data.describe());
  Tensor out = ::mixtape::cuda::empty_on(op.data.sizes(), DType::BFloat16, op.data.device());
  MT_CUDA_CHECK(launch_mx_widen(static_cast<const uint8_t*>(op.data.data_ptr()),
                                static_cast<const uint8_t*>(op.block_scales.data_ptr()), b,
                                static_cast<uint16_t*>(out.data_ptr()), ::mixtape::cuda::current_stream()),
                "mx_widen_cuda");
  return out;
}

}  // namespace mixtape::amp::cuda
