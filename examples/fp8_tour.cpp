// examples/fp8_tour.cpp — FP8 training steps narrated from the inside, on 64 real Fashion-MNIST
// images and a two-layer MLP: per tensor that an FP8 GEMM casts (each layer's input, weight and
// output gradient), the format, the amax, the scale and how it was derived, and what fraction
// saturated (clipped to ±max) or flushed to zero; for delayed scaling over a few steps, with the
// amax history rolling; then one step each under current scaling and MXFP8 (both scale roundings).
//
//   build/examples/fp8_tour
//
// docs/FP8.md follows the same step through the source code. Lines of the form
// "scale = <fp8_max> / <amax> = <scale>" and the history lines are checked by
// examples/fp8_tour_check.cmake (ctest example_fp8_tour).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "amp/fp8_autocast.h"
#include "amp/fp8_scaling.h"
#include "amp/mx_block.h"
#include "fp8_cast_loss.h"
#include "mixtape/mixtape.h"

using namespace mixtape;
using namespace mixtape::amp;

namespace {

void section(const char* title) { std::printf("\n==== %s ====\n", title); }

struct Net {
  Tensor w1, b1, w2, b2;
  TensorList params() const { return {w1, b1, w2, b2}; }
  std::vector<std::pair<std::string, Tensor>> named() const {
    return {{"fc1.weight", w1}, {"fc1.bias", b1}, {"fc2.weight", w2}, {"fc2.bias", b2}};
  }
};

Net make_net() {
  manual_seed(0);
  nn::Linear fc1(784, 64), fc2(64, 10);
  auto p1 = fc1.parameters(), p2 = fc2.parameters();
  return {p1[0], p1[1], p2[0], p2[1]};
}

// What one FP8 GEMM layer cast in a step, in f32 (the values the casts saw).
struct Casts {
  std::string layer;
  Tensor input, weight, grad_output;
  const Tensor& of(Fp8Role r) const {
    return r == Fp8Role::Input ? input : r == Fp8Role::Weight ? weight : grad_output;
  }
};

// One step: forward inside the region (opened by `open`), backward, SGD. Returns each layer's casts.
template <class Open>
std::vector<Casts> step(Net& net, optim::SGD& opt, const Tensor& x, const Tensor& y, Open open, double* loss_out) {
  Tensor h1, a1, out, loss;
  {
    auto region = open();
    h1 = linear(x, net.w1, net.b1);
    h1.retain_grad();
    a1 = relu(h1);
    out = linear(a1, net.w2, net.b2);
    out.retain_grad();
    loss = cross_entropy(out, y);
  }
  opt.zero_grad();
  loss.backward();
  *loss_out = loss.item<double>();
  // Copies: the step below updates the weights in place.
  auto f32 = [](const Tensor& t) { return clone(t.detach().to(DType::Float32)); };
  std::vector<Casts> c = {{"fc1", f32(x), f32(net.w1), f32(h1.grad())}, {"fc2", f32(a1), f32(net.w2), f32(out.grad())}};
  opt.step();
  return c;
}

const char* format_of(DType dt) { return dt == DType::Float8_e4m3fn ? "E4M3" : "E5M2"; }

// A per-tensor cast at `scale`, as the FP8 GEMM does it, and what it lost.
void show_per_tensor(const Casts& c, Fp8Role r, DType dt, float scale) {
  const Tensor& t = c.of(r);
  const fp8_example::CastLoss l = fp8_example::per_tensor_loss(t, dt, scale);
  std::printf("  %s %-11s %s  amax %.6e  scale %.6e  saturated %5.2f%%  flushed %5.2f%% of the nonzero values\n",
              c.layer.c_str(), fp8_role_name(r), format_of(dt), static_cast<double>(amax_of(t)),
              static_cast<double>(scale), l.saturated_pct(), l.flushed_pct());
}

// History rows newest first: row 0 (this step's, still collecting), then rows len-1 ... 1.
std::vector<float> newest_first(const Fp8Meta& m, Fp8Role r) {
  const int64_t len = m.amax_history.size(0);
  const float* h = m.amax_history.data_ptr<float>();
  std::vector<float> v{h[static_cast<int>(r)]};
  for (int64_t row = len - 1; row >= 1; --row) v.push_back(h[row * kFp8Roles + static_cast<int>(r)]);
  return v;
}

const Fp8Role kRoles[] = {Fp8Role::Input, Fp8Role::Weight, Fp8Role::GradOutput};

void delayed_tour(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys) {
  DelayedScaling recipe;
  recipe.amax_history_len = 3;  // short, so that it rolls over within the tour
  section("1. delayed scaling (HYBRID: E4M3 forward, E5M2 gradients), amax_history_len 3, max, margin 0");
  std::printf("%s\n", recipe_string(recipe).c_str());
  std::puts("Each layer keeps an amax history per role (amp::Fp8Metas). Opening Fp8Autocast updates the");
  std::puts("scales from it: amax = the largest entry, scale = fp8_max * 2^-margin / amax (kept when amax");
  std::puts("is 0), then the history rolls: the oldest row drops out, a new row 0 starts collecting.");
  std::puts("Every cast records its tensor's amax in row 0, so this step's scales are last steps'.");
  Net net = make_net();
  optim::SGD opt(net.params(), {.lr = 0.1});
  Fp8Metas metas(recipe, net.named());
  std::vector<std::vector<float>> before(metas.size() * kFp8Roles);  // each history, newest first, before the update
  for (size_t m = 0; m < metas.size(); ++m)
    for (Fp8Role r : kRoles) before[m * kFp8Roles + static_cast<int>(r)] = newest_first(metas.metas()[m], r);
  for (int s = 1; s <= 4; ++s) {
    std::printf("\n--- step %d ---\n", s);
    double loss = 0;
    const auto casts = step(net, opt, xs[static_cast<size_t>(s - 1)], ys[static_cast<size_t>(s - 1)],
                            [&] { return std::make_unique<Fp8Autocast>(recipe, &metas); }, &loss);
    std::puts("scales from the update at the region's opening (max over the history before it rolled):");
    for (size_t m = 0; m < metas.size(); ++m)
      for (Fp8Role r : kRoles) {
        const Fp8Meta& meta = metas.metas()[m];
        const std::vector<float>& h = before[m * kFp8Roles + static_cast<int>(r)];
        const float amax = *std::max_element(h.begin(), h.end());
        const float fmax = fp8_max(fp8_dtype_for(recipe.fp8_format, r));
        if (amax > 0)
          std::printf("  %s %-11s scale = %.6e / %.6e = %.6e\n", meta.name.c_str(), fp8_role_name(r),
                      static_cast<double>(fmax), static_cast<double>(amax), static_cast<double>(meta.scale_of(r)));
        else
          std::printf("  %s %-11s history all zero: scale kept at %.6e\n", meta.name.c_str(), fp8_role_name(r),
                      static_cast<double>(meta.scale_of(r)));
      }
    std::printf("the casts (loss %.4f):\n", loss);
    for (size_t m = 0; m < metas.size(); ++m)
      for (Fp8Role r : kRoles)
        show_per_tensor(casts[m], r, fp8_dtype_for(recipe.fp8_format, r), metas.metas()[m].scale_of(r));
    std::puts("amax histories after backward, newest first (row 0 = this step's amaxes):");
    for (size_t m = 0; m < metas.size(); ++m)
      for (Fp8Role r : kRoles) {
        const std::vector<float> h = newest_first(metas.metas()[m], r);
        std::printf("  step %d %s %-11s history", s, metas.metas()[m].name.c_str(), fp8_role_name(r));
        for (float v : h) std::printf(" %.6e", static_cast<double>(v));
        std::printf("\n");
        before[m * kFp8Roles + static_cast<int>(r)] = h;
      }
  }
  std::puts("\nStep 1 cast at scale 1 (nothing recorded yet): the small weights and gradients flushed.");
  std::puts("Each step's row 0 becomes the next step's second entry: the history rolled.");
  std::puts("From step 2 on each scale maps the largest recent amax onto fp8_max. A tensor whose amax");
  std::puts("grew since (the weights, after the update) saturates a little: its scale is a step old.");
  std::puts("A row leaves the history after 3 steps, so a step's amax stops counting then.");
}

void current_tour(const Tensor& x, const Tensor& y) {
  section("2. current scaling (HYBRID): each cast's scale from its own amax");
  CurrentScaling recipe;
  Net net = make_net();
  optim::SGD opt(net.params(), {.lr = 0.1});
  double loss = 0;
  const auto casts = step(net, opt, x, y, [&] { return std::make_unique<Fp8Autocast>(recipe); }, &loss);
  std::printf("%s, loss %.4f\n", recipe_string(recipe).c_str(), loss);
  for (const Casts& c : casts)
    for (Fp8Role r : kRoles) {
      const DType dt = fp8_dtype_for(recipe.fp8_format, r);
      const float amax = amax_of(c.of(r));
      const float scale = scale_from_amax(amax, fp8_max(dt), 0.0f, recipe.power_of_2_scales, 1.0f);
      std::printf("  %s %-11s scale = %.6e / %.6e = %.6e\n", c.layer.c_str(), fp8_role_name(r),
                  static_cast<double>(fp8_max(dt)), static_cast<double>(amax), static_cast<double>(scale));
      show_per_tensor(c, r, dt, scale);
    }
  std::puts("Nothing saturates: every amax lands on fp8_max. What flushes is what lies more than the");
  std::puts("format's range (E4M3: 2^17.8, E5M2: 2^31.8) below the amax.");
}

void mx_tour(const Tensor& x, const Tensor& y, MxScaleRounding rounding) {
  MXFP8BlockScaling recipe;
  recipe.scale_rounding = rounding;
  const bool up = rounding == MxScaleRounding::Up;
  section(up ? "3. MXFP8, scales rounded up (NVIDIA's recipe)" : "4. MXFP8, the OCP spec's scale rounding");
  Net net = make_net();
  optim::SGD opt(net.params(), {.lr = 0.1});
  double loss = 0;
  const auto casts = step(net, opt, x, y, [&] { return std::make_unique<Fp8Autocast>(recipe); }, &loss);
  std::printf("%s, loss %.4f\n", recipe_string(recipe).c_str(), loss);
  std::puts("One E8M0 scale 2^e per 32 values along a GEMM's reduction dim (shown: along the rows, the");
  std::puts("forward's for input and weight, the input gradient's for grad_output); the values are stored");
  std::puts("divided by 2^e.");
  for (const Casts& c : casts)
    for (Fp8Role r : kRoles) {
      const DType dt = fp8_dtype_for(recipe.fp8_format, r);
      const Tensor& t = c.of(r);
      Fp8Operand q;
      int emin = 0, emax = 0;
      const fp8_example::CastLoss l = fp8_example::mx_loss(t, dt, recipe, &q, &emin, &emax);
      const int64_t rows = t.size(0), cols = t.size(1), nb = q.block_scales.size(1);
      const uint8_t* code = q.block_scales.data_ptr<uint8_t>();
      std::printf("  %s %-11s %s  %lld blocks, 2^e from 2^%d to 2^%d  saturated %5.2f%%  flushed %5.2f%% "
                  "of the nonzero values\n",
                  c.layer.c_str(), fp8_role_name(r), format_of(dt), static_cast<long long>(rows * nb), emin, emax,
                  l.saturated_pct(), l.flushed_pct());
      // Its first block with values, as an example.
      const auto v = t.to_vector<float>();
      for (int64_t b = 0; b < rows * nb; ++b) {
        const int64_t i = b / nb, j0 = (b % nb) * q.block_size, j1 = std::min(cols, j0 + q.block_size);
        float amax = 0;
        for (int64_t j = j0; j < j1; ++j) amax = std::max(amax, std::fabs(v[static_cast<size_t>(i * cols + j)]));
        if (amax == 0) continue;
        const int e = code[b] - 127;
        std::printf("    block %lld: amax %.6e = %.6e x 2^%d (fp8_max %g)\n", static_cast<long long>(b),
                    static_cast<double>(amax), std::ldexp(static_cast<double>(amax), -e), e,
                    static_cast<double>(fp8_max(dt)));
        break;
      }
    }
  if (up)
    std::puts("Rounded up, amax / 2^e lies in (fp8_max/2, fp8_max]: no value saturates.");
  else
    std::puts("The spec's 2^(floor(log2 amax) - emax) leaves amax / 2^e in [256, 512) for E4M3: the blocks\n"
              "whose amax / 2^e exceeds 448 clip their largest values to 448 (the saturated fraction).");
}

}  // namespace

int main() {
  const std::string dir = data::default_fashion_mnist_dir();
  auto ds = data::load_mnist_format(dir, true);
  const int64_t n = 64;
  std::vector<Tensor> xs, ys;  // four batches, one per step of the delayed tour
  for (int64_t b = 0; b < 4; ++b) {
    xs.push_back((ds->data().narrow(0, b * n, n).to(DType::Float32).reshape({n, 784}) / 255.0 - 0.2860) / 0.3530);
    ys.push_back(ds->targets().narrow(0, b * n, n));
  }
  const Tensor& x = xs[0];
  const Tensor& y = ys[0];
  section("0. data and model");
  std::printf("4 batches of %lld Fashion-MNIST training images from %s, normalised;\n"
              "MLP fc1 784->64, ReLU, fc2 64->10, FP32 weights. Inside Fp8Autocast each linear runs its\n"
              "forward GEMM, its input-gradient and its weight-gradient GEMM on FP8 operands cast per\n"
              "role: input, weight, grad_output.\n",
              static_cast<long long>(n), dir.c_str());
  delayed_tour(xs, ys);
  current_tour(x, y);
  mx_tour(x, y, MxScaleRounding::Up);
  mx_tour(x, y, MxScaleRounding::Spec);
  return 0;
}
