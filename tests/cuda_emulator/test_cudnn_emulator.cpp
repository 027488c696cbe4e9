// tests/cuda_emulator/test_cudnn_emulator.cpp — proves the emulator's cuDNN (cudnn.cpp) against
// values computed independently: hand-worked tiny convolutions, an f64 reference written here
// (gather formulations, unlike the emulator's scatter loop), and the adjoint identities that tie
// the three directions together. Also the scaling rules (alpha/beta, beta == 0 never reads the
// output, 16-bit results rounded once), the math types, the algorithm heuristics and workspaces,
// the documented error statuses, and the faults for memory that is not the handle's device memory.
// Device memory comes from the public CUDA runtime API, which the emulator's runtime provides.
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/bfloat16.h"
#include "core/half.h"
#include "tests/cuda_emulator/device_buffer.h"

namespace {

using mixtape::BFloat16;
using mixtape::Half;

#define CUDNN_OK(expr) ASSERT_EQ((expr), CUDNN_STATUS_SUCCESS) << #expr

// ---- values and device buffers ----

template <class T>
constexpr bool is16 = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <class T>
cudnnDataType_t dtype_of() {
  if constexpr (std::is_same_v<T, float>) return CUDNN_DATA_FLOAT;
  if constexpr (std::is_same_v<T, double>) return CUDNN_DATA_DOUBLE;
  if constexpr (std::is_same_v<T, Half>) return CUDNN_DATA_HALF;
  return CUDNN_DATA_BFLOAT16;
}

template <class T>
T from_double(double v) {
  if constexpr (is16<T>)
    return T(float(v));
  else
    return T(v);
}
template <class T>
double to_double(T v) {
  if constexpr (is16<T>)
    return double(float(v));
  else
    return double(v);
}

template <class T>
using Dev = mixtape::cuda_emulator::testing::DeviceBuffer<T>;

// Deterministic test data: integers in [-range, range] (exact in every data type and in every
// sum these tests form), or reals in [-1, 1).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 6364136223846793005ull + 1442695040888963407ull) {}
  uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t(s >> 33);
  }
  std::vector<double> ints(size_t n, int range) {
    std::vector<double> v(n);
    for (double& e : v) e = double(int(next() % uint32_t(2 * range + 1)) - range);
    return v;
  }
  std::vector<double> reals(size_t n) {
    std::vector<double> v(n);
    for (double& e : v) e = double(next()) / double(1u << 31) - 1.0;
    return v;
  }
};

// ---- geometry and the f64 reference ----

struct Geom {
  int N, C, H, W, K, R, S;
  int G = 1, ph = 0, pw = 0, u = 1, v = 1, dh = 1, dw = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int Cg() const { return C / G; }
  int OH() const { return (H + 2 * ph - ((R - 1) * dh + 1)) / u + 1; }
  int OW() const { return (W + 2 * pw - ((S - 1) * dw + 1)) / v + 1; }
  size_t xs() const { return size_t(N) * C * H * W; }
  size_t ws() const { return size_t(K) * Cg() * R * S; }
  size_t ys() const { return size_t(N) * K * OH() * OW(); }
  size_t xi(int n, int c, int h, int w) const { return ((size_t(n) * C + c) * H + h) * W + w; }
  size_t wi(int k, int c, int r, int s) const { return ((size_t(k) * Cg() + c) * R + r) * S + s; }
  size_t yi(int n, int k, int h, int w) const { return ((size_t(n) * K + k) * OH() + h) * OW() + w; }
};

// The filter a cross-correlation applies: CUDNN_CONVOLUTION rotates it by 180 degrees.
std::vector<double> effective_filter(const Geom& g, const std::vector<double>& w) {
  if (g.mode == CUDNN_CROSS_CORRELATION) return w;
  std::vector<double> f(w.size());
  for (int k = 0; k < g.K; ++k)
    for (int c = 0; c < g.Cg(); ++c)
      for (int r = 0; r < g.R; ++r)
        for (int s = 0; s < g.S; ++s) f[g.wi(k, c, r, s)] = w[g.wi(k, c, g.R - 1 - r, g.S - 1 - s)];
  return f;
}

// x at a padded position: zero outside the input.
double xat(const Geom& g, const std::vector<double>& x, int n, int c, int h, int w) {
  return h < 0 || h >= g.H || w < 0 || w >= g.W ? 0.0 : x[g.xi(n, c, h, w)];
}

std::vector<double> ref_forward(const Geom& g, const std::vector<double>& x, const std::vector<double>& w0) {
  const std::vector<double> w = effective_filter(g, w0);
  std::vector<double> y(g.ys());
  const int Kg = g.K / g.G;
  for (int n = 0; n < g.N; ++n)
    for (int k = 0; k < g.K; ++k)
      for (int oh = 0; oh < g.OH(); ++oh)
        for (int ow = 0; ow < g.OW(); ++ow) {
          double sum = 0;
          for (int c = 0; c < g.Cg(); ++c)
            for (int r = 0; r < g.R; ++r)
              for (int s = 0; s < g.S; ++s)
                sum += xat(g, x, n, (k / Kg) * g.Cg() + c, oh * g.u - g.ph + r * g.dh, ow * g.v - g.pw + s * g.dw) *
                       w[g.wi(k, c, r, s)];
          y[g.yi(n, k, oh, ow)] = sum;
        }
  return y;
}

// dx gathered per input pixel: the output pixels and taps that read it.
std::vector<double> ref_backward_data(const Geom& g, const std::vector<double>& w0, const std::vector<double>& dy) {
  const std::vector<double> w = effective_filter(g, w0);
  std::vector<double> dx(g.xs());
  const int Kg = g.K / g.G;
  for (int n = 0; n < g.N; ++n)
    for (int ci = 0; ci < g.C; ++ci)
      for (int h = 0; h < g.H; ++h)
        for (int x = 0; x < g.W; ++x) {
          const int grp = ci / g.Cg(), c = ci % g.Cg();
          double sum = 0;
          for (int k = grp * Kg; k < (grp + 1) * Kg; ++k)
            for (int r = 0; r < g.R; ++r)
              for (int s = 0; s < g.S; ++s) {
                const int th = h + g.ph - r * g.dh, tw = x + g.pw - s * g.dw;  // = oh * u, ow * v
                if (th < 0 || tw < 0 || th % g.u != 0 || tw % g.v != 0) continue;
                const int oh = th / g.u, ow = tw / g.v;
                if (oh >= g.OH() || ow >= g.OW()) continue;
                sum += w[g.wi(k, c, r, s)] * dy[g.yi(n, k, oh, ow)];
              }
          dx[g.xi(n, ci, h, x)] = sum;
        }
  return dx;
}

// dw gathered per filter tap over the batch and the output pixels.
std::vector<double> ref_backward_filter(const Geom& g, const std::vector<double>& x, const std::vector<double>& dy) {
  std::vector<double> dwe(g.ws());  // the gradient of the effective filter
  const int Kg = g.K / g.G;
  for (int k = 0; k < g.K; ++k)
    for (int c = 0; c < g.Cg(); ++c)
      for (int r = 0; r < g.R; ++r)
        for (int s = 0; s < g.S; ++s) {
          double sum = 0;
          for (int n = 0; n < g.N; ++n)
            for (int oh = 0; oh < g.OH(); ++oh)
              for (int ow = 0; ow < g.OW(); ++ow)
                sum += xat(g, x, n, (k / Kg) * g.Cg() + c, oh * g.u - g.ph + r * g.dh, ow * g.v - g.pw + s * g.dw) *
                       dy[g.yi(n, k, oh, ow)];
          dwe[g.wi(k, c, r, s)] = sum;
        }
  return effective_filter(g, dwe);  // rotating back is the same rotation
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- cuDNN plumbing ----

struct Handle {
  cudnnHandle_t h = nullptr;
  Handle() { EXPECT_EQ(cudnnCreate(&h), CUDNN_STATUS_SUCCESS); }
  ~Handle() { cudnnDestroy(h); }
};

struct Descs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Descs() {
    EXPECT_EQ(cudnnCreateTensorDescriptor(&x), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateTensorDescriptor(&y), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateFilterDescriptor(&w), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateConvolutionDescriptor(&conv), CUDNN_STATUS_SUCCESS);
  }
  // NCHW x and y, KCRS w, the geometry's convolution; compute float (double for double data).
  Descs(const Geom& g, cudnnDataType_t t, cudnnMathType_t math = CUDNN_FMA_MATH) : Descs() {
    const cudnnDataType_t compute = t == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    EXPECT_EQ(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, t, g.N, g.C, g.H, g.W), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, t, g.N, g.K, g.OH(), g.OW()), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetFilter4dDescriptor(w, t, CUDNN_TENSOR_NCHW, g.K, g.Cg(), g.R, g.S), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetConvolution2dDescriptor(conv, g.ph, g.pw, g.u, g.v, g.dh, g.dw, g.mode, compute),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetConvolutionGroupCount(conv, g.G), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetConvolutionMathType(conv, math), CUDNN_STATUS_SUCCESS);
  }
  ~Descs() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
};

enum class Dir { Forward, BackwardData, BackwardFilter };

// The scaling parameters as cuDNN reads them: double for double data, float otherwise.
struct Scaling {
  float fa, fb;
  double da, db;
  bool dbl;
  Scaling(cudnnDataType_t t, double a, double b) : fa(float(a)), fb(float(b)), da(a), db(b), dbl(t == CUDNN_DATA_DOUBLE) {}
  const void* alpha() const { return dbl ? static_cast<const void*>(&da) : &fa; }
  const void* beta() const { return dbl ? static_cast<const void*>(&db) : &fb; }
};

// Runs one direction on device buffers with the heuristics' first algorithm (the one that needs
// a workspace) and a workspace of exactly its size. a, b are the inputs (x & w, w & dy, x & dy).
cudnnStatus_t launch(Dir d, cudnnHandle_t h, const Descs& ds, cudnnDataType_t t, const void* a, const void* b, void* out,
                     double alpha, double beta) {
  const Scaling sc(t, alpha, beta);
  int n = 0;
  size_t need = 0;
  int algo = -1;
  cudnnStatus_t st;
  if (d == Dir::Forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    st = cudnnGetConvolutionForwardAlgorithm_v7(h, ds.x, ds.w, ds.conv, ds.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf);
    if (st == CUDNN_STATUS_SUCCESS && n > 0) algo = perf[0].algo, need = perf[0].memory;
  } else if (d == Dir::BackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    st = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, ds.w, ds.y, ds.conv, ds.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                     &n, perf);
    if (st == CUDNN_STATUS_SUCCESS && n > 0) algo = perf[0].algo, need = perf[0].memory;
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    st = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, ds.x, ds.y, ds.conv, ds.w,
                                                       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf);
    if (st == CUDNN_STATUS_SUCCESS && n > 0) algo = perf[0].algo, need = perf[0].memory;
  }
  if (st != CUDNN_STATUS_SUCCESS) return st;
  Dev<char> ws(need);
  switch (d) {
    case Dir::Forward:
      return cudnnConvolutionForward(h, sc.alpha(), ds.x, a, ds.w, b, ds.conv, cudnnConvolutionFwdAlgo_t(algo), ws.p,
                                     need, sc.beta(), ds.y, out);
    case Dir::BackwardData:
      return cudnnConvolutionBackwardData(h, sc.alpha(), ds.w, a, ds.y, b, ds.conv,
                                          cudnnConvolutionBwdDataAlgo_t(algo), ws.p, need, sc.beta(), ds.x, out);
    default:
      return cudnnConvolutionBackwardFilter(h, sc.alpha(), ds.x, a, ds.y, b, ds.conv,
                                            cudnnConvolutionBwdFilterAlgo_t(algo), ws.p, need, sc.beta(), ds.w, out);
  }
}

// One direction in data type T: uploads a, b and the prior output, runs, downloads the output.
template <class T>
std::vector<double> run(Dir d, const Geom& g, const std::vector<double>& a, const std::vector<double>& b,
                        const std::vector<double>& prior, double alpha = 1, double beta = 0,
                        cudnnMathType_t math = CUDNN_FMA_MATH, cudnnStatus_t expect = CUDNN_STATUS_SUCCESS) {
  auto conv = [](const std::vector<double>& v) {
    std::vector<T> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = from_double<T>(v[i]);
    return r;
  };
  Handle h;
  Descs ds(g, dtype_of<T>(), math);
  Dev<T> da(conv(a)), db(conv(b)), out(conv(prior));
  EXPECT_EQ(launch(d, h.h, ds, dtype_of<T>(), da.p, db.p, out.p, alpha, beta), expect);
  std::vector<double> r;
  for (T v : out.download()) r.push_back(to_double(v));
  return r;
}

size_t out_size(Dir d, const Geom& g) { return d == Dir::Forward ? g.ys() : d == Dir::BackwardData ? g.xs() : g.ws(); }

std::vector<double> reference(Dir d, const Geom& g, const std::vector<double>& a, const std::vector<double>& b) {
  switch (d) {
    case Dir::Forward: return ref_forward(g, a, b);
    case Dir::BackwardData: return ref_backward_data(g, a, b);
    default: return ref_backward_filter(g, a, b);
  }
}

// The inputs of a direction: (x, w), (w, dy) or (x, dy).
std::pair<size_t, size_t> in_sizes(Dir d, const Geom& g) {
  switch (d) {
    case Dir::Forward: return {g.xs(), g.ws()};
    case Dir::BackwardData: return {g.ws(), g.ys()};
    default: return {g.xs(), g.ys()};
  }
}

const char* dir_name(Dir d) {
  return d == Dir::Forward ? "forward" : d == Dir::BackwardData ? "backward-data" : "backward-filter";
}

// Padding, strides, dilation, groups (depthwise included) and both modes.
std::vector<Geom> geometries() {
  std::vector<Geom> gs;
  gs.push_back({2, 3, 5, 6, 4, 3, 2});
  gs.back().ph = 1;
  gs.push_back({1, 4, 7, 7, 6, 3, 3});
  gs.back().G = 2, gs.back().ph = 2, gs.back().pw = 1, gs.back().u = 2, gs.back().v = 3, gs.back().dh = 2;
  gs.push_back({2, 6, 6, 5, 3, 2, 2});
  gs.back().G = 3, gs.back().pw = 1, gs.back().v = 2, gs.back().dw = 2, gs.back().mode = CUDNN_CONVOLUTION;
  gs.push_back({1, 2, 4, 4, 2, 3, 3});  // depthwise, convolution mode
  gs.back().G = 2, gs.back().ph = 1, gs.back().pw = 1, gs.back().u = 2, gs.back().v = 2,
  gs.back().mode = CUDNN_CONVOLUTION;
  gs.push_back({1, 2, 7, 5, 3, 1, 2});  // stride 3 > filter: some input rows are never read
  gs.back().u = 3, gs.back().pw = 1, gs.back().dw = 3;
  return gs;
}

std::string describe(const Geom& g) {
  char b[200];
  std::snprintf(b, sizeof b, "N%d C%d H%d W%d K%d R%d S%d G%d pad %d,%d stride %d,%d dil %d,%d %s", g.N, g.C, g.H, g.W,
                g.K, g.R, g.S, g.G, g.ph, g.pw, g.u, g.v, g.dh, g.dw,
                g.mode == CUDNN_CONVOLUTION ? "convolution" : "cross-correlation");
  return b;
}

// Integer data: every product and sum is exact in every data type, so results compare exactly.
template <class T>
void check_against_reference(int range) {
  int seed = 1;
  for (const Geom& g : geometries())
    for (Dir d : {Dir::Forward, Dir::BackwardData, Dir::BackwardFilter}) {
      Rng rng(uint64_t(seed++));
      auto [na, nb] = in_sizes(d, g);
      const std::vector<double> a = rng.ints(na, range), b = rng.ints(nb, range);
      const std::vector<double> want = reference(d, g, a, b);
      const std::vector<double> got = run<T>(d, g, a, b, std::vector<double>(out_size(d, g), 0.0));
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << dir_name(d) << " " << describe(g) << " element " << i;
    }
}

// ---- hand-worked cases: x = 1..9 (3x3), w = [1 2; 3 4] ----

const std::vector<double> kX9 = {1, 2, 3, 4, 5, 6, 7, 8, 9};
const std::vector<double> kW4 = {1, 2, 3, 4};

TEST(CudnnEmulator, HandWorkedCrossCorrelationAndConvolution) {
  Geom g{1, 1, 3, 3, 1, 2, 2};
  // y[i][j] = sum x[i+r][j+s] * w[r][s]: 1+4+12+20, 2+6+15+24, 4+10+21+32, 5+12+24+36.
  EXPECT_EQ(run<float>(Dir::Forward, g, kX9, kW4, {0, 0, 0, 0}), (std::vector<double>{37, 47, 67, 77}));
  // Convolution mode applies w rotated: [4 3; 2 1].
  g.mode = CUDNN_CONVOLUTION;
  EXPECT_EQ(run<float>(Dir::Forward, g, kX9, kW4, {0, 0, 0, 0}), (std::vector<double>{23, 33, 53, 63}));
}

TEST(CudnnEmulator, HandWorkedPaddingAndStride) {
  Geom g{1, 1, 3, 3, 1, 2, 2};
  g.ph = g.pw = 1, g.u = g.v = 2;  // output (3 + 2 - 2) / 2 + 1 = 2; windows start at -1 and 1
  // (0,0) sees x00 under w11; (0,1) x01 w10 + x02 w11; (1,0) x10 w01 + x20 w11; (1,1) all four.
  EXPECT_EQ(run<float>(Dir::Forward, g, kX9, kW4, {0, 0, 0, 0}), (std::vector<double>{4, 18, 36, 77}));
}

TEST(CudnnEmulator, HandWorkedBackwardDataAndFilter) {
  Geom g{1, 1, 3, 3, 1, 2, 2};
  const std::vector<double> z9(9, 0.0);
  // dx scatters w into the window of each output pixel.
  EXPECT_EQ(run<float>(Dir::BackwardData, g, kW4, {1, 0, 0, 0}, z9), (std::vector<double>{1, 2, 0, 3, 4, 0, 0, 0, 0}));
  EXPECT_EQ(run<float>(Dir::BackwardData, g, kW4, {0, 0, 0, 1}, z9), (std::vector<double>{0, 0, 0, 0, 1, 2, 0, 3, 4}));
  // dw collects the window of x each output pixel saw.
  EXPECT_EQ(run<float>(Dir::BackwardFilter, g, kX9, {1, 0, 0, 0}, {0, 0, 0, 0}), (std::vector<double>{1, 2, 4, 5}));
  EXPECT_EQ(run<float>(Dir::BackwardFilter, g, kX9, {0, 0, 0, 1}, {0, 0, 0, 0}), (std::vector<double>{5, 6, 8, 9}));
  g.mode = CUDNN_CONVOLUTION;  // the gradient of the rotated filter, rotated back
  EXPECT_EQ(run<float>(Dir::BackwardFilter, g, kX9, {1, 0, 0, 0}, {0, 0, 0, 0}), (std::vector<double>{5, 4, 2, 1}));
  EXPECT_EQ(run<float>(Dir::BackwardData, g, kW4, {1, 0, 0, 0}, z9), (std::vector<double>{4, 3, 0, 2, 1, 0, 0, 0, 0}));
}

// ---- against the f64 reference ----

TEST(CudnnEmulator, FloatMatchesReference) { check_against_reference<float>(4); }
TEST(CudnnEmulator, DoubleMatchesReference) { check_against_reference<double>(4); }
TEST(CudnnEmulator, HalfMatchesReference) { check_against_reference<Half>(3); }
TEST(CudnnEmulator, BFloat16MatchesReference) { check_against_reference<BFloat16>(1); }

TEST(CudnnEmulator, RealDataMatchesReferenceWithinFloatRounding) {
  for (const Geom& g : geometries())
    for (Dir d : {Dir::Forward, Dir::BackwardData, Dir::BackwardFilter}) {
      Rng rng(77);
      auto [na, nb] = in_sizes(d, g);
      const std::vector<double> a = rng.reals(na), b = rng.reals(nb);
      std::vector<double> af(a), bf(b);  // the float inputs, exactly
      for (double& e : af) e = double(float(e));
      for (double& e : bf) e = double(float(e));
      const std::vector<double> want = reference(d, g, af, bf);
      const std::vector<double> got = run<float>(d, g, a, b, std::vector<double>(out_size(d, g), 0.0));
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5) << dir_name(d) << " " << describe(g) << " element " << i;
    }
}

// <conv(x, w), dy> = <x, bwd_data(w, dy)> = <w, bwd_filter(x, dy)>: the backward directions are
// the adjoints of the forward one, in each argument.
TEST(CudnnEmulator, BackwardDirectionsAreAdjointsOfForward) {
  for (const Geom& g : geometries()) {
    Rng rng(5);
    const std::vector<double> x = rng.reals(g.xs()), w = rng.reals(g.ws()), dy = rng.reals(g.ys());
    const std::vector<double> y = run<double>(Dir::Forward, g, x, w, std::vector<double>(g.ys(), 0.0));
    const std::vector<double> dx = run<double>(Dir::BackwardData, g, w, dy, std::vector<double>(g.xs(), 0.0));
    const std::vector<double> dw = run<double>(Dir::BackwardFilter, g, x, dy, std::vector<double>(g.ws(), 0.0));
    const double lhs = dot(y, dy);
    EXPECT_NEAR(dot(x, dx), lhs, 1e-12 * (1 + std::abs(lhs))) << describe(g);
    EXPECT_NEAR(dot(w, dw), lhs, 1e-12 * (1 + std::abs(lhs))) << describe(g);
  }
}

// ---- scaling ----

TEST(CudnnEmulator, AlphaBetaBlendWithThePriorOutput) {
  const Geom g = geometries()[1];
  for (Dir d : {Dir::Forward, Dir::BackwardData, Dir::BackwardFilter}) {
    Rng rng(9);
    auto [na, nb] = in_sizes(d, g);
    const std::vector<double> a = rng.ints(na, 3), b = rng.ints(nb, 3), prior = rng.ints(out_size(d, g), 5);
    const std::vector<double> conv = reference(d, g, a, b);
    const std::vector<double> got = run<float>(d, g, a, b, prior, 2.0, -0.5);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], 2.0 * conv[i] - 0.5 * prior[i]) << dir_name(d) << " " << i;
  }
}

TEST(CudnnEmulator, BetaZeroNeverReadsTheOutput) {
  const Geom g = geometries()[0];
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (Dir d : {Dir::Forward, Dir::BackwardData, Dir::BackwardFilter}) {
    Rng rng(3);
    auto [na, nb] = in_sizes(d, g);
    const std::vector<double> a = rng.ints(na, 3), b = rng.ints(nb, 3), nans(out_size(d, g), nan);
    EXPECT_EQ(run<float>(d, g, a, b, nans, 1.0, 0.0), reference(d, g, a, b)) << dir_name(d);
    EXPECT_EQ(run<Half>(d, g, a, b, nans, 1.0, 0.0), reference(d, g, a, b)) << dir_name(d);
    // With beta != 0 the prior output is read, NaN and all.
    for (double v : run<float>(d, g, a, b, nans, 1.0, 1.0)) ASSERT_TRUE(std::isnan(v)) << dir_name(d);
  }
}

// One 1x1 output: x = [1, t] . w = [1, 1] = 1 + t, with t half an ulp of 1 (a tie, to even: 1).
// Rounded once, alpha * (1 + t) and (1 + t) + beta * prior land above the tie; rounding the
// convolution first would give alpha * 1 and 1 + prior instead.
template <class T>
uint16_t bits_of(double alpha, double beta, double prior, double t) {
  Geom g{1, 1, 1, 2, 1, 1, 2};
  const std::vector<double> r = run<T>(Dir::Forward, g, {1, t}, {1, 1}, {prior}, alpha, beta);
  return from_double<T>(r[0]).bits;
}

TEST(CudnnEmulator, HalfResultIsRoundedOnce) {
  const double t = std::ldexp(1.0, -11);
  EXPECT_EQ(Half(1.5f * float(Half(float(1 + t)))).bits, 0x3E00);  // what double rounding would give
  EXPECT_EQ(bits_of<Half>(1.5, 0, 0, t), 0x3E01);                  // 1.5 + 0.75 ulp -> up
  const double prior = std::ldexp(1.0, -12);
  EXPECT_EQ(Half(float(Half(float(1 + t))) + float(prior)).bits, 0x3C00);
  EXPECT_EQ(bits_of<Half>(1, 1, prior, t), 0x3C01);  // 1 + 0.75 ulp -> up
}

TEST(CudnnEmulator, BFloat16ResultIsRoundedOnce) {
  const double t = std::ldexp(1.0, -8);
  EXPECT_EQ(BFloat16(1.5f * float(BFloat16(float(1 + t)))).bits, 0x3FC0);
  EXPECT_EQ(bits_of<BFloat16>(1.5, 0, 0, t), 0x3FC1);
  EXPECT_EQ(bits_of<BFloat16>(1, 1, std::ldexp(1.0, -9), t), 0x3F81);
}

TEST(CudnnEmulator, DoubleDataTakesDoubleScaling) {
  Geom g{1, 1, 1, 1, 1, 1, 1};
  const double alpha = 1 + std::ldexp(1.0, -40), beta = std::ldexp(1.0, -45);  // not floats
  EXPECT_EQ(run<double>(Dir::Forward, g, {1}, {1}, {1}, alpha, beta)[0], alpha + beta);
}

// FLOAT data under the default math type may run on TF32 tensor cores (A100 and newer), which
// keep 10 mantissa bits of each input; CUDNN_FMA_MATH is exact FP32.
TEST(CudnnEmulator, FloatDefaultMathIsTf32AndFmaMathIsExact) {
  Geom g{1, 1, 1, 1, 1, 1, 1};
  const double x = 1 + std::ldexp(1.0, -20);
  EXPECT_EQ(run<float>(Dir::Forward, g, {x}, {1}, {0}, 1, 0, CUDNN_FMA_MATH)[0], x);
  EXPECT_EQ(run<float>(Dir::Forward, g, {x}, {1}, {0}, 1, 0, CUDNN_DEFAULT_MATH)[0], 1.0);
  EXPECT_EQ(run<float>(Dir::Forward, g, {x}, {1}, {0}, 1, 0, CUDNN_TENSOR_OP_MATH)[0], 1.0);
  const double y = 1 + 3 * std::ldexp(1.0, -11);  // 1.5 TF32 ulps: rounds to 2 ulps
  EXPECT_EQ(run<float>(Dir::Forward, g, {y}, {1}, {0}, 1, 0, CUDNN_DEFAULT_MATH)[0], 1 + std::ldexp(1.0, -9));
  // 16-bit data accumulates in FP32 whatever the math type.
  EXPECT_EQ(run<Half>(Dir::Forward, g, {1}, {1}, {0}, 1, 0, CUDNN_DEFAULT_MATH)[0], 1.0);
}

// ---- layouts ----

TEST(CudnnEmulator, NhwcAndStridedDescriptorsAddressTheirElements) {
  Geom g{2, 3, 4, 5, 2, 3, 2};
  g.ph = 1, g.v = 2;
  Rng rng(11);
  const std::vector<double> x = rng.ints(g.xs(), 3), w = rng.ints(g.ws(), 3);
  const std::vector<double> want = ref_forward(g, x, w);
  // x NHWC, w KRSC, y NCHW with each row padded to OW + 3 elements.
  std::vector<float> xn(g.xs()), wn(g.ws());
  for (int n = 0; n < g.N; ++n)
    for (int c = 0; c < g.C; ++c)
      for (int h = 0; h < g.H; ++h)
        for (int i = 0; i < g.W; ++i) xn[((size_t(n) * g.H + h) * g.W + i) * g.C + c] = float(x[g.xi(n, c, h, i)]);
  for (int k = 0; k < g.K; ++k)
    for (int c = 0; c < g.Cg(); ++c)
      for (int r = 0; r < g.R; ++r)
        for (int s = 0; s < g.S; ++s) wn[((size_t(k) * g.R + r) * g.S + s) * g.Cg() + c] = float(w[g.wi(k, c, r, s)]);
  const int row = g.OW() + 3;
  const size_t ycount = size_t(g.N) * g.K * g.OH() * row;
  Handle h;
  Descs ds;
  CUDNN_OK(cudnnSetTensor4dDescriptor(ds.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, g.N, g.C, g.H, g.W));
  CUDNN_OK(cudnnSetFilter4dDescriptor(ds.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, g.K, g.C, g.R, g.S));
  CUDNN_OK(cudnnSetTensor4dDescriptorEx(ds.y, CUDNN_DATA_FLOAT, g.N, g.K, g.OH(), g.OW(), g.K * g.OH() * row,
                                        g.OH() * row, row, 1));
  CUDNN_OK(cudnnSetConvolution2dDescriptor(ds.conv, g.ph, g.pw, g.u, g.v, 1, 1, CUDNN_CROSS_CORRELATION,
                                           CUDNN_DATA_FLOAT));
  CUDNN_OK(cudnnSetConvolutionMathType(ds.conv, CUDNN_FMA_MATH));
  Dev<float> dx(xn), dw(wn), dy(std::vector<float>(ycount, -7.0f));
  ASSERT_EQ(launch(Dir::Forward, h.h, ds, CUDNN_DATA_FLOAT, dx.p, dw.p, dy.p, 1, 0), CUDNN_STATUS_SUCCESS);
  const std::vector<float> y = dy.download();
  for (int n = 0; n < g.N; ++n)
    for (int k = 0; k < g.K; ++k)
      for (int oh = 0; oh < g.OH(); ++oh)
        for (int i = 0; i < row; ++i) {
          const float v = y[((size_t(n) * g.K + k) * g.OH() + oh) * row + i];
          if (i < g.OW())
            ASSERT_EQ(v, want[g.yi(n, k, oh, i)]);
          else
            ASSERT_EQ(v, -7.0f) << "the row padding is not the tensor's";
        }
}

TEST(CudnnEmulator, OutputDimensionRule) {
  Descs ds;
  const struct {
    int H, R, pad, stride, dil;
  } cases[] = {{5, 3, 0, 1, 1}, {5, 3, 0, 2, 1}, {5, 3, 1, 1, 2}, {8, 2, 0, 3, 1}, {7, 3, 3, 2, 3}, {4, 4, 0, 1, 1}};
  for (const auto& c : cases) {
    CUDNN_OK(cudnnSetTensor4dDescriptor(ds.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 3, 6, c.H, c.H + 1));
    CUDNN_OK(cudnnSetFilter4dDescriptor(ds.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 3, c.R, 1));
    CUDNN_OK(cudnnSetConvolution2dDescriptor(ds.conv, c.pad, 0, c.stride, 1, c.dil, 1, CUDNN_CROSS_CORRELATION,
                                             CUDNN_DATA_FLOAT));
    CUDNN_OK(cudnnSetConvolutionGroupCount(ds.conv, 2));
    int n = 0, k = 0, oh = 0, ow = 0;
    CUDNN_OK(cudnnGetConvolution2dForwardOutputDim(ds.conv, ds.x, ds.w, &n, &k, &oh, &ow));
    EXPECT_EQ(n, 3);
    EXPECT_EQ(k, 4);
    EXPECT_EQ(oh, 1 + (c.H + 2 * c.pad - ((c.R - 1) * c.dil + 1)) / c.stride);
    EXPECT_EQ(ow, c.H + 1);
  }
  // A filter larger than the padded input, and 6 input channels against 2 groups of 2.
  CUDNN_OK(cudnnSetFilter4dDescriptor(ds.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 3, 9, 1));
  int n, k, oh, ow;
  EXPECT_EQ(cudnnGetConvolution2dForwardOutputDim(ds.conv, ds.x, ds.w, &n, &k, &oh, &ow), CUDNN_STATUS_BAD_PARAM);
  CUDNN_OK(cudnnSetFilter4dDescriptor(ds.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 2, 1, 1));
  EXPECT_EQ(cudnnGetConvolution2dForwardOutputDim(ds.conv, ds.x, ds.w, &n, &k, &oh, &ow), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnGetConvolution2dForwardOutputDim(ds.conv, ds.x, ds.w, nullptr, &k, &oh, &ow), CUDNN_STATUS_BAD_PARAM);
}

// ---- algorithms and workspaces ----

TEST(CudnnEmulator, HeuristicsListAWorkspaceAlgorithmFirst) {
  const Geom g = geometries()[1];
  Handle h;
  Descs ds(g, CUDNN_DATA_FLOAT);
  int n = 0;
  {
    cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    CUDNN_OK(cudnnGetConvolutionForwardAlgorithm_v7(h.h, ds.x, ds.w, ds.conv, ds.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                    &n, p));
    ASSERT_EQ(n, CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    EXPECT_EQ(p[0].status, CUDNN_STATUS_SUCCESS);
    EXPECT_GT(p[0].memory, 0u);
    EXPECT_EQ(p[0].mathType, CUDNN_FMA_MATH);
    size_t bytes = 0;
    CUDNN_OK(cudnnGetConvolutionForwardWorkspaceSize(h.h, ds.x, ds.w, ds.conv, ds.y, p[0].algo, &bytes));
    EXPECT_EQ(bytes, p[0].memory);
    EXPECT_EQ(p[1].status, CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(p[1].memory, 0u);
    for (int i = 2; i < n; ++i) EXPECT_EQ(p[i].status, CUDNN_STATUS_NOT_SUPPORTED) << i;
    CUDNN_OK(cudnnGetConvolutionForwardAlgorithm_v7(h.h, ds.x, ds.w, ds.conv, ds.y, 1, &n, p));
    EXPECT_EQ(n, 1);
    EXPECT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(h.h, ds.x, ds.w, ds.conv, ds.y, 0, &n, p), CUDNN_STATUS_BAD_PARAM);
    EXPECT_EQ(cudnnGetConvolutionForwardWorkspaceSize(h.h, ds.x, ds.w, ds.conv, ds.y, p[0].algo, nullptr),
              CUDNN_STATUS_BAD_PARAM);
  }
  {
    cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    CUDNN_OK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h.h, ds.w, ds.y, ds.conv, ds.x,
                                                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, p));
    ASSERT_EQ(n, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    EXPECT_EQ(p[0].status, CUDNN_STATUS_SUCCESS);
    EXPECT_GT(p[0].memory, 0u);
    size_t bytes = 0;
    CUDNN_OK(cudnnGetConvolutionBackwardDataWorkspaceSize(h.h, ds.w, ds.y, ds.conv, ds.x, p[0].algo, &bytes));
    EXPECT_EQ(bytes, p[0].memory);
    for (int i = 2; i < n; ++i) EXPECT_EQ(p[i].status, CUDNN_STATUS_NOT_SUPPORTED) << i;
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    CUDNN_OK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h.h, ds.x, ds.y, ds.conv, ds.w,
                                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, p));
    ASSERT_EQ(n, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    EXPECT_EQ(p[0].status, CUDNN_STATUS_SUCCESS);
    EXPECT_GT(p[0].memory, 0u);
    size_t bytes = 0;
    CUDNN_OK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h.h, ds.x, ds.y, ds.conv, ds.w, p[0].algo, &bytes));
    EXPECT_EQ(bytes, p[0].memory);
    for (int i = 2; i < n; ++i) EXPECT_EQ(p[i].status, CUDNN_STATUS_NOT_SUPPORTED) << i;
  }
}

TEST(CudnnEmulator, ShortWorkspaceIsBadParam) {
  const Geom g = geometries()[0];
  Handle h;
  Descs ds(g, CUDNN_DATA_FLOAT);
  Dev<float> x(g.xs()), w(g.ws()), y(g.ys());
  const float one = 1, zero = 0;
  size_t need = 0;
  CUDNN_OK(cudnnGetConvolutionForwardWorkspaceSize(h.h, ds.x, ds.w, ds.conv, ds.y, CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                                   &need));
  ASSERT_GT(need, 0u);
  Dev<char> ws(need);
  EXPECT_EQ(cudnnConvolutionForward(h.h, &one, ds.x, x.p, ds.w, w.p, ds.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws.p,
                                    need - 1, &zero, ds.y, y.p),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnConvolutionForward(h.h, &one, ds.x, x.p, ds.w, w.p, ds.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws.p,
                                    need, &zero, ds.y, y.p),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnConvolutionForward(h.h, &one, ds.x, x.p, ds.w, w.p, ds.conv,
                                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, ds.y, y.p),
            CUDNN_STATUS_SUCCESS);

  CUDNN_OK(cudnnGetConvolutionBackwardDataWorkspaceSize(h.h, ds.w, ds.y, ds.conv, ds.x,
                                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, &need));
  ASSERT_GT(need, 0u);
  Dev<char> wsd(need);
  EXPECT_EQ(cudnnConvolutionBackwardData(h.h, &one, ds.w, w.p, ds.y, y.p, ds.conv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                                         wsd.p, need - 1, &zero, ds.x, x.p),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnConvolutionBackwardData(h.h, &one, ds.w, w.p, ds.y, y.p, ds.conv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                                         wsd.p, need, &zero, ds.x, x.p),
            CUDNN_STATUS_SUCCESS);

  CUDNN_OK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h.h, ds.x, ds.y, ds.conv, ds.w,
                                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, &need));
  ASSERT_GT(need, 0u);
  Dev<char> wsf(need);
  EXPECT_EQ(cudnnConvolutionBackwardFilter(h.h, &one, ds.x, x.p, ds.y, y.p, ds.conv,
                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, wsf.p, need - 1, &zero, ds.w, w.p),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnConvolutionBackwardFilter(h.h, &one, ds.x, x.p, ds.y, y.p, ds.conv,
                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, wsf.p, need, &zero, ds.w, w.p),
            CUDNN_STATUS_SUCCESS);
}

// ---- error statuses ----

TEST(CudnnEmulator, DescriptorSettersRejectBadArguments) {
  Descs ds;
  EXPECT_EQ(cudnnSetTensor4dDescriptor(ds.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, -1, 2, 2), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(ds.x, cudnnTensorFormat_t(7), CUDNN_DATA_FLOAT, 1, 1, 2, 2),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(ds.x, CUDNN_TENSOR_NCHW, cudnnDataType_t(99), 1, 1, 2, 2),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(nullptr, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 2, 2),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(ds.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1 << 16, 1 << 16, 2, 1),
            CUDNN_STATUS_NOT_SUPPORTED);  // over 2 Giga-elements
  EXPECT_EQ(cudnnSetTensor4dDescriptorEx(ds.x, CUDNN_DATA_FLOAT, 1, 1, -2, 2, 4, 4, 2, 1), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetFilter4dDescriptor(ds.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 1, 1, -3, 3), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetFilter4dDescriptor(ds.w, CUDNN_DATA_FLOAT, cudnnTensorFormat_t(9), 1, 1, 3, 3),
            CUDNN_STATUS_BAD_PARAM);
  const auto set2d = [&](int ph, int pw, int u, int v, int dh, int dw, int mode) {
    return cudnnSetConvolution2dDescriptor(ds.conv, ph, pw, u, v, dh, dw, cudnnConvolutionMode_t(mode),
                                           CUDNN_DATA_FLOAT);
  };
  EXPECT_EQ(set2d(-1, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(set2d(0, -1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(set2d(0, 0, 0, 1, 1, 1, CUDNN_CROSS_CORRELATION), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(set2d(0, 0, 1, -1, 1, 1, CUDNN_CROSS_CORRELATION), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(set2d(0, 0, 1, 1, 0, 1, CUDNN_CROSS_CORRELATION), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(set2d(0, 0, 1, 1, 1, 0, CUDNN_CROSS_CORRELATION), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(set2d(0, 0, 1, 1, 1, 1, 2), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(set2d(0, 0, 1, 1, 1, 1, CUDNN_CONVOLUTION), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnSetConvolutionGroupCount(ds.conv, 0), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetConvolutionMathType(ds.conv, cudnnMathType_t(7)), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetConvolutionMathType(nullptr, CUDNN_FMA_MATH), CUDNN_STATUS_BAD_PARAM);
}

// Calls one direction with the implicit (no workspace) algorithm on valid device memory.
cudnnStatus_t call(Dir d, cudnnHandle_t h, const Descs& ds, const void* alpha, const void* beta) {
  static Dev<double> mem(1 << 12);  // large enough for every operand below
  switch (d) {
    case Dir::Forward:
      return cudnnConvolutionForward(h, alpha, ds.x, mem.p, ds.w, mem.p, ds.conv,
                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, beta, ds.y, mem.p + 2048);
    case Dir::BackwardData:
      return cudnnConvolutionBackwardData(h, alpha, ds.w, mem.p, ds.y, mem.p, ds.conv,
                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, nullptr, 0, beta, ds.x, mem.p + 2048);
    default:
      return cudnnConvolutionBackwardFilter(h, alpha, ds.x, mem.p, ds.y, mem.p, ds.conv,
                                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, nullptr, 0, beta, ds.w, mem.p + 2048);
  }
}

TEST(CudnnEmulator, ConvolutionsRejectInconsistentDescriptors) {
  Handle h;
  const float one = 1, zero = 0;
  auto fresh = [&](Descs& ds) {  // x 2x4x5x5, w 6x2x3x3 in 2 groups, y 2x6x3x3
    EXPECT_EQ(cudnnSetTensor4dDescriptor(ds.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 4, 5, 5), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetFilter4dDescriptor(ds.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 6, 2, 3, 3), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetTensor4dDescriptor(ds.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 6, 3, 3), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetConvolution2dDescriptor(ds.conv, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetConvolutionGroupCount(ds.conv, 2), CUDNN_STATUS_SUCCESS);
  };
  for (Dir d : {Dir::Forward, Dir::BackwardData, Dir::BackwardFilter}) {
    SCOPED_TRACE(dir_name(d));
    {
      Descs ds;
      EXPECT_EQ(call(d, h.h, ds, &one, &zero), CUDNN_STATUS_BAD_PARAM);  // descriptors never set
      fresh(ds);
      EXPECT_EQ(call(d, h.h, ds, &one, &zero), CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(call(d, h.h, ds, nullptr, &zero), CUDNN_STATUS_BAD_PARAM);
      EXPECT_EQ(call(d, h.h, ds, &one, nullptr), CUDNN_STATUS_BAD_PARAM);
      EXPECT_EQ(call(d, nullptr, ds, &one, &zero), CUDNN_STATUS_BAD_PARAM);
    }
    {
      Descs ds;
      fresh(ds);  // data types disagree
      EXPECT_EQ(cudnnSetFilter4dDescriptor(ds.w, CUDNN_DATA_HALF, CUDNN_TENSOR_NCHW, 6, 2, 3, 3), CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(call(d, h.h, ds, &one, &zero), CUDNN_STATUS_BAD_PARAM);
    }
    {
      Descs ds;
      fresh(ds);  // 4 input channels, 2 groups of 3
      EXPECT_EQ(cudnnSetFilter4dDescriptor(ds.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 6, 3, 3, 3), CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(call(d, h.h, ds, &one, &zero), CUDNN_STATUS_BAD_PARAM);
    }
    {
      Descs ds;
      fresh(ds);  // 5 output channels in 2 groups: BAD_PARAM, but NOT_SUPPORTED for backward data
      EXPECT_EQ(cudnnSetFilter4dDescriptor(ds.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 5, 2, 3, 3), CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(cudnnSetTensor4dDescriptor(ds.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 5, 3, 3), CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(call(d, h.h, ds, &one, &zero),
                d == Dir::BackwardData ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_BAD_PARAM);
    }
    {
      Descs ds;
      fresh(ds);  // y with the wrong channel count, then the wrong batch
      EXPECT_EQ(cudnnSetTensor4dDescriptor(ds.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 4, 3, 3), CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(call(d, h.h, ds, &one, &zero), CUDNN_STATUS_BAD_PARAM);
      EXPECT_EQ(cudnnSetTensor4dDescriptor(ds.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 6, 3, 3), CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(call(d, h.h, ds, &one, &zero), CUDNN_STATUS_BAD_PARAM);
    }
    {
      Descs ds;
      fresh(ds);  // y of the wrong spatial size: NOT_SUPPORTED for forward, BAD_PARAM backward
      EXPECT_EQ(cudnnSetTensor4dDescriptor(ds.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 6, 3, 4), CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(call(d, h.h, ds, &one, &zero), d == Dir::Forward ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_BAD_PARAM);
    }
    {
      Descs ds;
      fresh(ds);  // a filter taller than the padded input
      EXPECT_EQ(cudnnSetFilter4dDescriptor(ds.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 6, 2, 6, 3), CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(call(d, h.h, ds, &one, &zero), CUDNN_STATUS_BAD_PARAM);
    }
  }
}

TEST(CudnnEmulator, UnimplementedConfigurationsAreNotSupported) {
  Handle h;
  const float one = 1, zero = 0;
  const Geom g{1, 2, 4, 4, 2, 2, 2};
  for (Dir d : {Dir::Forward, Dir::BackwardData, Dir::BackwardFilter}) {
    SCOPED_TRACE(dir_name(d));
    {
      Descs ds(g, CUDNN_DATA_FLOAT);  // float data, double compute: not a documented configuration
      EXPECT_EQ(cudnnSetConvolution2dDescriptor(ds.conv, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_DOUBLE),
                CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(call(d, h.h, ds, &one, &zero), CUDNN_STATUS_NOT_SUPPORTED);
    }
    {
      Descs ds(g, CUDNN_DATA_HALF);  // TRUE_HALF_CONFIG (half compute) is not emulated
      EXPECT_EQ(cudnnSetConvolution2dDescriptor(ds.conv, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_HALF),
                CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(call(d, h.h, ds, &one, &zero), CUDNN_STATUS_NOT_SUPPORTED);
    }
    {
      Descs ds(g, CUDNN_DATA_DOUBLE);  // double data with float compute
      EXPECT_EQ(cudnnSetConvolution2dDescriptor(ds.conv, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(call(d, h.h, ds, &one, &zero), CUDNN_STATUS_NOT_SUPPORTED);
    }
    {
      Descs ds(g, CUDNN_DATA_INT8);
      EXPECT_EQ(call(d, h.h, ds, &one, &zero), CUDNN_STATUS_NOT_SUPPORTED);
    }
    {
      Descs ds(g, CUDNN_DATA_FLOAT);  // negative strides
      EXPECT_EQ(cudnnSetTensor4dDescriptorEx(ds.x, CUDNN_DATA_FLOAT, 1, 2, 4, 4, 32, 16, -4, 1), CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(call(d, h.h, ds, &one, &zero), CUDNN_STATUS_NOT_SUPPORTED);
    }
  }
  {
    Descs ds(g, CUDNN_DATA_FLOAT);  // an output whose elements overlap
    EXPECT_EQ(cudnnSetTensor4dDescriptorEx(ds.y, CUDNN_DATA_FLOAT, 1, 2, 3, 3, 18, 9, 3, 0), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(call(Dir::Forward, h.h, ds, &one, &zero), CUDNN_STATUS_NOT_SUPPORTED);
  }
  {
    Descs ds(g, CUDNN_DATA_FLOAT);  // an algorithm the emulator does not implement, and no algorithm
    Dev<float> mem(256);
    size_t bytes = 0;
    EXPECT_EQ(cudnnGetConvolutionForwardWorkspaceSize(h.h, ds.x, ds.w, ds.conv, ds.y, CUDNN_CONVOLUTION_FWD_ALGO_FFT,
                                                      &bytes),
              CUDNN_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(cudnnConvolutionForward(h.h, &one, ds.x, mem.p, ds.w, mem.p, ds.conv, CUDNN_CONVOLUTION_FWD_ALGO_FFT,
                                      mem.p, 1024, &zero, ds.y, mem.p + 128),
              CUDNN_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(cudnnConvolutionForward(h.h, &one, ds.x, mem.p, ds.w, mem.p, ds.conv, cudnnConvolutionFwdAlgo_t(42),
                                      mem.p, 1024, &zero, ds.y, mem.p + 128),
              CUDNN_STATUS_BAD_PARAM);
  }
  {
    Descs ds(g, CUDNN_DATA_INT8);  // the heuristics answer for every algorithm
    cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    CUDNN_OK(cudnnGetConvolutionForwardAlgorithm_v7(h.h, ds.x, ds.w, ds.conv, ds.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                    &n, p));
    ASSERT_GT(n, 0);
    for (int i = 0; i < n; ++i) EXPECT_EQ(p[i].status, CUDNN_STATUS_NOT_SUPPORTED);
  }
}

// ---- device memory ----

void forward_with(const void* x, void* workspace, size_t workspace_bytes) {
  const Geom g{1, 1, 3, 3, 1, 2, 2};
  Handle h;
  Descs ds(g, CUDNN_DATA_FLOAT);
  Dev<float> w(g.ws()), y(g.ys());
  const float one = 1, zero = 0;
  cudnnConvolutionForward(h.h, &one, ds.x, x, ds.w, w.p, ds.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, workspace,
                          workspace_bytes, &zero, ds.y, y.p);
}

TEST(CudnnEmulatorDeathTest, HostPointerOperandAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> host(9, 1.0f);
  Dev<char> ws(1 << 12);
  EXPECT_DEATH(forward_with(host.data(), ws.p, 1 << 12),
               "mixtape CUDA emulator: cudnnConvolutionForward: x: .* is not inside one live device allocation");
  Dev<float> short_x(8);  // one element short of the 3x3 its descriptor describes
  EXPECT_DEATH(forward_with(short_x.p, ws.p, 1 << 12), "cudnnConvolutionForward: x: .*\\+36 bytes");
  Dev<float> x(9);
  std::vector<char> host_ws(1 << 12);
  EXPECT_DEATH(forward_with(x.p, host_ws.data(), host_ws.size()), "cudnnConvolutionForward: workSpace: ");
}

TEST(CudnnEmulatorDeathTest, DeviceScalingParameterAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Geom g{1, 1, 3, 3, 1, 2, 2};
  Handle h;
  Descs ds(g, CUDNN_DATA_FLOAT);
  Dev<float> x(g.xs()), w(g.ws()), y(g.ys()), alpha(std::vector<float>{1.0f});
  const float zero = 0;
  EXPECT_DEATH(cudnnConvolutionForward(h.h, alpha.p, ds.x, x.p, ds.w, w.p, ds.conv,
                                       CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, ds.y, y.p),
               "cudnnConvolutionForward: alpha and beta must point to host memory");
}

TEST(CudnnEmulatorDeathTest, OperandOnAnotherDeviceAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << "one device";
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  Dev<float> x(9);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  Dev<char> ws(1 << 12);
  EXPECT_DEATH(forward_with(x.p, ws.p, 1 << 12),
               "cudnnConvolutionForward: x is memory of device 1, but the cuDNN handle belongs to device 0");
}

// ---- handles ----

TEST(CudnnEmulator, HandleKeepsItsDeviceAndStream) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << "one device";
  cudaStream_t s0 = nullptr, s1 = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s0), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
  cudnnHandle_t h = nullptr;
  CUDNN_OK(cudnnCreate(&h));  // belongs to device 1
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t got = s0;
  CUDNN_OK(cudnnGetStream(h, &got));
  EXPECT_EQ(got, nullptr);  // the default stream until one is set
  CUDNN_OK(cudnnSetStream(h, s1));
  CUDNN_OK(cudnnGetStream(h, &got));
  EXPECT_EQ(got, s1);
  // A stream of another device is the documented CUDNN_STATUS_MAPPING_ERROR (cuDNN 9 spells it so).
  EXPECT_EQ(cudnnSetStream(h, s0), CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED);
  CUDNN_OK(cudnnGetStream(h, &got));
  EXPECT_EQ(got, s1);
  EXPECT_EQ(cudnnSetStream(nullptr, s1), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnGetStream(h, nullptr), CUDNN_STATUS_BAD_PARAM);
  CUDNN_OK(cudnnDestroy(h));
  EXPECT_EQ(cudnnCreate(nullptr), CUDNN_STATUS_BAD_PARAM);
  cudaStreamDestroy(s0);
  cudaStreamDestroy(s1);
}

TEST(CudnnEmulator, ErrorStringsNameTheStatus) {
  EXPECT_STREQ(cudnnGetErrorString(CUDNN_STATUS_SUCCESS), "CUDNN_STATUS_SUCCESS");
  EXPECT_STREQ(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "CUDNN_STATUS_BAD_PARAM");
  EXPECT_STREQ(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED), "CUDNN_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(cudnnGetErrorString(cudnnStatus_t(12345)), "CUDNN_UNKNOWN_STATUS");
}

// ---- cudnnAddTensor ----

TEST(CudnnEmulator, AddTensorBroadcastsAChannelBias) {
  Handle h;
  cudnnTensorDescriptor_t bd = nullptr, cd = nullptr;
  CUDNN_OK(cudnnCreateTensorDescriptor(&bd));
  CUDNN_OK(cudnnCreateTensorDescriptor(&cd));
  const int N = 2, C = 3, H = 2, W = 3;
  CUDNN_OK(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, C, 1, 1));
  CUDNN_OK(cudnnSetTensor4dDescriptor(cd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
  const std::vector<float> bias = {10, 20, 30};
  std::vector<float> c0(N * C * H * W);
  for (size_t i = 0; i < c0.size(); ++i) c0[i] = float(i);
  Dev<float> b(bias), c(c0);
  const float one = 1, two = 2, zero = 0, half = 0.5f;
  CUDNN_OK(cudnnAddTensor(h.h, &two, bd, b.p, &half, cd, c.p));  // C = 2 b[c] + C / 2
  std::vector<float> got = c.download();
  for (int n = 0; n < N; ++n)
    for (int ch = 0; ch < C; ++ch)
      for (int i = 0; i < H * W; ++i) {
        const size_t at = (size_t(n) * C + ch) * H * W + i;
        ASSERT_EQ(got[at], 2 * bias[ch] + 0.5f * c0[at]) << at;
      }
  c.upload(std::vector<float>(c0.size(), std::numeric_limits<float>::quiet_NaN()));  // beta = 0: never read
  CUDNN_OK(cudnnAddTensor(h.h, &one, bd, b.p, &zero, cd, c.p));
  got = c.download();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], bias[(i / (H * W)) % C]) << i;

  // A's dimensions must each be 1 or C's; the data types must agree.
  CUDNN_OK(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, C, 2, 1));
  Dev<float> b6(std::vector<float>(C * 2, 1.0f));
  EXPECT_EQ(cudnnAddTensor(h.h, &one, bd, b6.p, &one, cd, c.p), CUDNN_STATUS_SUCCESS);  // H is 2 in both
  CUDNN_OK(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 2, 1, 1));
  EXPECT_EQ(cudnnAddTensor(h.h, &one, bd, b.p, &one, cd, c.p), CUDNN_STATUS_BAD_PARAM);
  CUDNN_OK(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, C, 1, 1));
  EXPECT_EQ(cudnnAddTensor(h.h, &one, bd, b.p, &one, cd, c.p), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnAddTensor(h.h, nullptr, bd, b.p, &one, cd, c.p), CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyTensorDescriptor(bd);
  cudnnDestroyTensorDescriptor(cd);
}

TEST(CudnnEmulator, AddTensorRoundsHalfOnce) {
  Handle h;
  cudnnTensorDescriptor_t d = nullptr;
  CUDNN_OK(cudnnCreateTensorDescriptor(&d));
  CUDNN_OK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, 1, 1, 1));
  Dev<Half> a(std::vector<Half>{Half(1.0f)}), c(std::vector<Half>{Half(std::ldexp(1.0f, -12))});
  const float alpha = 1 + std::ldexp(1.0f, -11), beta = 1;  // alpha * 1 alone would tie down to 1
  CUDNN_OK(cudnnAddTensor(h.h, &alpha, d, a.p, &beta, d, c.p));
  EXPECT_EQ(c.download()[0].bits, 0x3C01);  // 1 + 0.75 ulp, rounded once
  cudnnDestroyTensorDescriptor(d);
}

}  // namespace
