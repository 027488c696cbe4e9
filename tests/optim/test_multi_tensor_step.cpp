// tests/optim/test_multi_tensor_step.cpp — the multi-tensor step ops (sgd_step_multi_,
// adam_step_multi_) on the CPU and the optimizers' use of them:
//   - the op gives, tensor by tensor, the single-tensor op's bits, for every optimizer variant and
//     parameter dtype (multi_step_cases.h), tensors of sizes 0 and 1 included;
//   - an optimizer whose groups mix dtypes (one multi-tensor call per dtype combination, a lone
//     parameter through the single op) gives the per-parameter path's bits over several steps,
//     with masters, stochastic rounding, the inverse scale, a parameter without a gradient and a
//     non-contiguous one;
//   - bad calls are refused with the op's name, what was expected and what came.
// The same comparisons on the device: tests/cuda_ops/test_optim_multi_tensor.cpp.
#include "multi_step_cases.h"
#include "optim_test_util.h"

namespace mixtape::testing {
namespace {

namespace ms = multi_step;

class MultiStepOp : public ::testing::TestWithParam<ms::Case> {};

TEST_P(MultiStepOp, EqualsTheSingleTensorOpOnEachTensor) {
  const ms::Case& c = GetParam();
  const ms::Operands init = ms::make(c, ms::sizes(40), 1234);
  const ms::Operands single = ms::copy_to(init, Device::CPU()), multi = ms::copy_to(init, Device::CPU());
  ms::run_single(c, single);
  ms::run_multi(c, multi);
  EXPECT_TRUE(ms::same_written(multi, single));
  // One tensor alone is a valid call too.
  const ms::Operands one = ms::make(c, {3001}, 99);
  const ms::Operands s1 = ms::copy_to(one, Device::CPU()), m1 = ms::copy_to(one, Device::CPU());
  ms::run_single(c, s1);
  ms::run_multi(c, m1);
  EXPECT_TRUE(ms::same_written(m1, s1));
}
INSTANTIATE_TEST_SUITE_P(Cases, MultiStepOp, ::testing::ValuesIn(ms::cases()),
                         [](const ::testing::TestParamInfo<ms::Case>& i) { return i.param.name; });

TEST(MultiStepOp, RegisteredInPlaceWithCpuKernels) {
  for (const char* name : {"sgd_step_multi_", "adam_step_multi_"}) {
    const OpSchema* op = find_op(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_TRUE(op->inplace) << name;
    EXPECT_TRUE(op->has_kernel(DeviceType::CPU)) << name;
    EXPECT_FALSE(op->samples.empty()) << name;
  }
}

// ---- the optimizers ----

// The per-parameter path: update() for every parameter (what the optimizers did before the
// multi-tensor ops, and still do for a parameter alone in its dtype combination).
template <typename Base>
struct PerParameter : Base {
  using Base::Base;
  void update_many(const std::vector<const optim::Optimizer::ParamUpdate*>& us, const optim::HyperParams& g) override {
    optim::Optimizer::update_many(us, g);
  }
};

// Parameters of several dtypes in two groups: f16 and bf16 ones (masters), f32 ones (one of them
// non-contiguous), an f64 one alone in its combination, sizes 0 and 1, one without a gradient.
struct Model {
  std::vector<Tensor> params;
  std::vector<optim::ParamGroup> groups() const {
    return {optim::ParamGroup({params[0], params[1], params[2], params[3], params[4], params[5]}),
            optim::ParamGroup({params[6], params[7], params[8], params[9]}, {{"lr", 0.02}})};
  }
};
Model make_model(uint64_t seed, DType sixteen) {
  Generator g(seed);
  auto p = [&](IntList shape, DType dt) {
    return (randn(shape, TensorOptions(DType::Float32), &g) * 0.5).to(dt).requires_grad_(true);
  };
  Model m;
  m.params = {p({33, 7}, sixteen), p({5}, DType::Float32), p({0}, sixteen), p({1}, sixteen),
              p({2049}, DType::Float32), p({64}, sixteen),
              p({3, 4}, DType::Float32), p({1}, DType::Float64), p({1025}, DType::Float32), p({17}, sixteen)};
  // A transposed (non-contiguous) f32 parameter in place of params[6].
  m.params[6] = (randn({4, 3}, TensorOptions(DType::Float32), &g) * 0.5).detach().t().requires_grad_(true);
  return m;
}
void set_grads(const Model& m, uint64_t seed, int step, float scale) {
  Generator g(seed + 1000 * static_cast<uint64_t>(step));
  for (size_t i = 0; i < m.params.size(); ++i) {
    const Tensor& p = m.params[i];
    if (i == 9 && step == 0) {
      p.set_grad(Tensor());  // no gradient in the first step: its state starts a step later
      continue;
    }
    Tensor gr = randn(p.sizes(), TensorOptions(DType::Float32), &g);
    // A 16-bit parameter gets, in turn, a 16-bit gradient still carrying the loss scale (unscaled
    // by the step) or an FP32 one (accumulated in FP32, unscaled); f32/f64 ones arrive unscaled.
    const bool grad16 = is_reduced_float(p.dtype()) && (i + static_cast<size_t>(step)) % 2 == 0;
    p.set_grad(grad16 ? (gr * scale).to(p.dtype()) : gr.to(is_reduced_float(p.dtype()) ? DType::Float32 : p.dtype()));
  }
}

template <typename Opt, typename Options>
void expect_same_as_per_parameter(Options options, bool stochastic, DType sixteen) {
  Model a = make_model(5, sixteen), b = make_model(5, sixteen);
  Opt multi(a.groups(), options);
  PerParameter<Opt> reference(b.groups(), options);
  if (stochastic) {
    multi.set_stochastic_rounding(true, 42);
    reference.set_stochastic_rounding(true, 42);
  }
  for (int step = 0; step < 3; ++step) {
    set_grads(a, 9, step, 1024.0f);
    set_grads(b, 9, step, 1024.0f);
    multi.set_inv_scale_for_next_step(1.0f / 1024.0f);
    reference.set_inv_scale_for_next_step(1.0f / 1024.0f);
    multi.step();
    reference.step();
    for (size_t i = 0; i < a.params.size(); ++i) {
      SCOPED_TRACE("step " + std::to_string(step) + ", parameter " + std::to_string(i));
      EXPECT_TRUE(same_bits(a.params[i], b.params[i]));
      EXPECT_TRUE(same_bits(multi.master(a.params[i]), reference.master(b.params[i])));
      EXPECT_EQ(multi.step_count(a.params[i]), reference.step_count(b.params[i]));
      for (const char* s : {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
        const Tensor x = multi.state(a.params[i], s), y = reference.state(b.params[i], s);
        ASSERT_EQ(x.defined(), y.defined()) << s;
        if (x.defined()) {
          EXPECT_TRUE(same_bits(x, y)) << s;
        }
      }
    }
  }
  // The stream of stochastic rounding advanced the same way.
  const StateDict sa = multi.state_dict(), sb = reference.state_dict();
  EXPECT_TRUE(same_bits(sa.at("rounding.offset"), sb.at("rounding.offset")));
}

TEST(MultiStepOptimizer, SgdEqualsThePerParameterPath) {
  for (DType dt : {DType::Float16, DType::BFloat16})
    for (bool sr : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (sr ? " stochastic" : ""));
      expect_same_as_per_parameter<optim::SGD>(optim::SGDOptions{.lr = 0.05}, sr, dt);
      expect_same_as_per_parameter<optim::SGD>(
          optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2}, sr, dt);
      expect_same_as_per_parameter<optim::SGD>(
          optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = true}, sr, dt);
    }
}

TEST(MultiStepOptimizer, AdamAndAdamWEqualThePerParameterPath) {
  for (DType dt : {DType::Float16, DType::BFloat16})
    for (bool sr : {false, true})
      for (bool amsgrad : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + (sr ? " stochastic" : "") + (amsgrad ? " amsgrad" : ""));
        expect_same_as_per_parameter<optim::Adam>(optim::AdamOptions{.lr = 1e-2, .weight_decay = 1e-2, .amsgrad = amsgrad},
                                                  sr, dt);
        expect_same_as_per_parameter<optim::AdamW>(optim::AdamWOptions{.lr = 1e-2, .amsgrad = amsgrad}, sr, dt);
      }
}

// What step() hands to the multi-tensor op: one call per group and dtype combination with two or
// more parameters, the single op for a parameter alone in its combination.
TEST(MultiStepOptimizer, OneCallPerGroupAndDtypeCombination) {
  Model m = make_model(3, DType::Float16);
  optim::SGD opt(m.groups(), {.lr = 0.05, .momentum = 0.9});
  set_grads(m, 4, 1, 1.0f);  // step 1: f16 grads for the 16-bit params 3, 5, 9; f32 for 0, 2
  static std::map<std::string, int> calls;
  calls.clear();
  set_kernel_observer([](const OpSchema& op, DeviceType) { ++calls[op.name]; });
  opt.step();
  set_kernel_observer(nullptr);
  // Group 0: f16 params with f32 grads 0, 2; with f16 grads 3, 5; f32 params 1, 4: three calls.
  // Group 1: f32 params 6 (through a contiguous copy) and 8: one call; the f64 param 7 and the
  // f16 param 9 are alone in their combinations: the single op, twice.
  EXPECT_EQ(calls["sgd_step_multi_"], 4);
  EXPECT_EQ(calls["sgd_step_"], 2);
}

// ---- bad calls ----

TEST(MultiStepOp, BadCallsNameTheOpWhatWasExpectedAndWhatCame) {
  const ms::Case sgd = ms::cases()[1];  // momentum, f32
  ASSERT_EQ(sgd.momentum, 0.9);
  const ms::Operands o = ms::make(sgd, {3, 4, 5}, 1);
  auto call = [&](auto&& edit) {
    auto [in, a] = ms::multi_call(sgd, ms::copy_to(o, Device::CPU()));
    edit(in, a);
    dispatch(*find_op("sgd_step_multi_"), in, a);
  };
  // A list one tensor short (the last momentum buffer missing).
  expect_error([&] { call([](TensorList& in, Attrs&) { in.pop_back(); }); },
               {"sgd_step_multi_", "expected 4 lists of 3 tensors", "= 12 inputs, got 11"});
  expect_error([&] { call([](TensorList&, Attrs& a) { a.erase("count"); }); }, {"sgd_step_multi_", "missing attr 'count'"});
  expect_error([&] { call([](TensorList&, Attrs& a) { a.set("count", int64_t(0)); }); },
               {"sgd_step_multi_", "'count'", "must be >= 1, got 0"});
  expect_error([&] { call([](TensorList&, Attrs& a) { a.set("offset", IntList{1, 2}); }); },
               {"sgd_step_multi_", "attr 'offset' has 2 entries, expected one per tensor (3)"});
  expect_error([&] { call([](TensorList&, Attrs& a) { a.set("first", true); }); },
               {"sgd_step_multi_", "attr 'first' must be a list", "got a single value"});
  expect_error([&] { call([](TensorList& in, Attrs&) { in[4] = in[4].to(DType::Float64); }); },
               {"sgd_step_multi_", "tensor 1: grad dtype Float64 does not fit a Float32 master"});
  expect_error([&] { call([](TensorList& in, Attrs&) { in[5] = zeros({6}); }); },
               {"sgd_step_multi_", "tensor 2: grad must be a contiguous [5] tensor, got f32[6]"});
  expect_error([&] { call([](TensorList& in, Attrs&) { in[11] = Tensor(); }); },
               {"sgd_step_multi_", "tensor 2: state buffer 0 must be a contiguous f32[5] tensor, got undefined"});
  // Mixed dtypes in one call: one kernel runs them all.
  expect_error(
      [&] {
        call([](TensorList& in, Attrs&) {
          in[1] = in[1].to(DType::Float64);
          in[4] = in[4].to(DType::Float64);
          in[10] = in[10].to(DType::Float64);
        });
      },
      {"sgd_step_multi_", "the same dtypes", "expected w f32, grad f32, model none (tensor 0), got w f64, grad f64, "
       "model none (tensor 1)"});
  expect_error([&] { call([](TensorList& in, Attrs&) { in[7] = in[1].to(DType::Float16); }); },
               {"sgd_step_multi_", "expected w f32, grad f32, model none (tensor 0)", "model f16 (tensor 1)"});
  // Nothing was written by a refused call.
  const ms::Operands kept = ms::copy_to(o, Device::CPU());
  try {
    auto [in, a] = ms::multi_call(sgd, kept);
    in[11] = zeros({7});
    dispatch(*find_op("sgd_step_multi_"), in, a);
  } catch (const Error&) {
  }
  EXPECT_TRUE(ms::same_written(kept, o));
  // Adam: the per-tensor step list.
  const ms::Case adam = ms::cases()[3];
  ASSERT_TRUE(adam.adam);
  const ms::Operands ao = ms::make(adam, {3, 4}, 1);
  auto [ain, aa] = ms::multi_call(adam, ms::copy_to(ao, Device::CPU()));
  aa.set("step", IntList{1, 0});
  expect_error([&] { dispatch(*find_op("adam_step_multi_"), ain, aa); },
               {"adam_step_multi_", "step must be >= 1, got 0 (tensor 1)"});
  aa.set("step", IntList{1});
  expect_error([&] { dispatch(*find_op("adam_step_multi_"), ain, aa); },
               {"adam_step_multi_", "attr 'step' has 1 entries, expected one per tensor (2)"});
}

}  // namespace
}  // namespace mixtape::testing
