// tests/amp/test_fp8_kernels.cpp — the FP8 path's vector kernels give the bits of the scalar
// paths they replace: conv2d's transposed AVX-512 im2col of an FP8 image (amp/fp8_im2col.h)
// against the row-by-row one, and the FP8 GEMM on either layout of that operand.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "amp/fp8_im2col.h"
#include "mixtape/mixtape.h"
#include "ops/conv_args.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/im2col_avx512.h"
#include "ops/cpu/steering.h"

using namespace mixtape;
using namespace mixtape::amp;

namespace {

struct Geometry {
  int64_t N, C, H, W, O, kH, kW;
  IntList stride, padding, dilation;
};

// SmallCNN's two convs (smaller batch), a 5x3 kernel, a 1x1, row dilation, and two geometries the
// AVX-512 im2col does not take (stride 2; OW != W).
const Geometry kGeometries[] = {
    {3, 1, 28, 28, 32, 3, 3, {1, 1}, {1, 1}, {1, 1}}, {3, 32, 14, 14, 64, 3, 3, {1, 1}, {1, 1}, {1, 1}},
    {2, 3, 7, 9, 5, 5, 3, {1, 1}, {2, 1}, {1, 1}},    {2, 4, 5, 6, 3, 1, 1, {1, 1}, {0, 0}, {1, 1}},
    {2, 3, 9, 8, 4, 3, 3, {1, 1}, {2, 1}, {2, 1}},    {2, 3, 9, 8, 4, 3, 3, {2, 2}, {1, 1}, {1, 1}},
    {2, 3, 9, 8, 4, 3, 3, {1, 1}, {0, 0}, {1, 1}},
};

ConvGeom geometry_of(const Geometry& g) {
  const Tensor x = zeros({g.N, g.C, g.H, g.W}), w = zeros({g.O, g.C, g.kH, g.kW});
  return check_conv_geometry("conv2d", Shown::of(x), Shown::of(w), g.stride, g.padding, g.dilation, 1);
}

bool takes_plane_shift(const ConvGeom& g) {
  return g.sH == 1 && g.sW == 1 && g.dW == 1 && g.OW == g.W && cpu::im2col_avx512_available();
}

// An FP8 tensor holding every one of the 256 codes first (NaNs, zeros, subnormals, the largest),
// then random codes.
Tensor every_code(IntList sizes, DType dt, uint64_t seed) {
  Tensor t = Tensor::empty(sizes, TensorOptions(dt));
  uint8_t* p = static_cast<uint8_t*>(t.data_ptr());
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = i < 256 ? static_cast<uint8_t>(i) : static_cast<uint8_t>(rng());
  return t;
}

std::vector<cpu::Bf16GemmPath> bf16_paths_here() {
  std::vector<cpu::Bf16GemmPath> k = {cpu::Bf16GemmPath::Emulated};
  if (cpu::can_run_bf16_native(cpu::cpu_features())) k.push_back(cpu::Bf16GemmPath::Avx512Bf16);
  if (cpu::can_run_bf16_amx(cpu::cpu_features_with_amx())) k.push_back(cpu::Bf16GemmPath::Amx);
  return k;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * element_size(a.dtype())) == 0;
}

}  // namespace

TEST(Fp8Im2col, TransposedAvx512MatrixHoldsTheRowMatrixBitForBit) {
  for (DType dt : {DType::Float8_e4m3fn, DType::Float8_e5m2})
    for (const Geometry& geo : kGeometries) {
      const ConvGeom g = geometry_of(geo);
      const Tensor x = every_code({g.N, g.C, g.H, g.W}, dt, 7);
      const Tensor t = im2col_fp8_to_bf16_transposed(x, g);
      ASSERT_EQ(t.defined(), takes_plane_shift(g)) << "geometry C=" << g.C << " H=" << g.H << " sH=" << g.sH;
      if (!t.defined()) continue;
      const Tensor r = im2col_fp8_to_bf16(x, g);  // (M, K)
      ASSERT_EQ(t.sizes(), (IntList{g.K(), g.N * g.L()}));
      const auto* tb = t.data_ptr<BFloat16>();
      const auto* rb = r.data_ptr<BFloat16>();
      for (int64_t i = 0; i < g.N * g.L(); ++i)
        for (int64_t k = 0; k < g.K(); ++k)
          ASSERT_EQ(tb[k * g.N * g.L() + i].bits, rb[i * g.K() + k].bits)
              << dtype_name(dt) << " C=" << g.C << " H=" << g.H << " row " << i << " col " << k;
    }
}

TEST(Fp8Im2col, GemmOnTheTransposedMatrixGivesTheBitsOfTheRowMatrix) {
  // conv2d's forward P @ W^T and weight gradient G^T @ P, P as im2col_operand writes it either way.
  Generator gen(3);
  for (const Geometry& geo : kGeometries) {
    const ConvGeom g = geometry_of(geo);
    if (!takes_plane_shift(g)) continue;  // the row matrix is then the only one
    const int64_t m = g.N * g.L();
    Fp8Operand image = quantize_per_tensor(randn({g.N, g.C, g.H, g.W}, {}, &gen), DType::Float8_e4m3fn, 4.0f);
    const Fp8Operand w = quantize_per_tensor(randn({g.O, g.K()}, {}, &gen), DType::Float8_e4m3fn, 8.0f);
    const Fp8Operand grad = quantize_per_tensor(randn({m, g.O}, {}, &gen), DType::Float8_e5m2, 2.0f);
    Fp8Operand rows = image, cols = image;
    rows.widened = im2col_fp8_to_bf16(image.data, g);
    cols.widened = im2col_fp8_to_bf16_transposed(image.data, g);
    cols.widened_transposed = true;
    for (cpu::Bf16GemmPath path : bf16_paths_here()) {
      cpu::Override on(path);
      EXPECT_TRUE(same_bits(fp8_gemm(rows, false, w, true, "t"), fp8_gemm(cols, false, w, true, "t")))
          << "forward, C=" << g.C << " path " << static_cast<int>(path);
      EXPECT_TRUE(same_bits(fp8_gemm(grad, true, rows, false, "t"), fp8_gemm(grad, true, cols, false, "t")))
          << "weight gradient, C=" << g.C << " path " << static_cast<int>(path);
    }
  }
}
