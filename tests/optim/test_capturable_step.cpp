// tests/optim/test_capturable_step.cpp — capturable optimizers (Optimizer::set_capturable): the
// update counts and lrs on the device, a skip flag and an inverse scale read there, against the
// plain optimizer that the host decides for (the step not called when skipped), bit for bit:
// parameters, masters, state buffers, counts and state_dict, over several steps with a skipped
// one, an lr change, a parameter without a gradient, 16-bit parameters and 16-bit gradients.
// The same on the device, with the GradScaler: tests/cuda_ops/test_amp_sync_free.cpp.
#include "optim_test_util.h"

namespace mixtape::testing {
namespace {

std::vector<Tensor> make_params(DType sixteen) {
  Generator g(17);
  auto p = [&](IntList shape, DType dt) {
    return (randn(shape, TensorOptions(DType::Float32), &g) * 0.5).to(dt).requires_grad_(true);
  };
  return {p({33, 7}, sixteen), p({5}, DType::Float32), p({64}, sixteen), p({1}, DType::Float64),
          p({1025}, DType::Float32), p({3}, sixteen)};
}
std::vector<optim::ParamGroup> groups(const std::vector<Tensor>& p) {
  return {optim::ParamGroup({p[0], p[1], p[2]}), optim::ParamGroup({p[3], p[4], p[5]}, {{"lr", 0.02}})};
}
// Gradients for `step`, scaled by 1024 (16-bit ones stay scaled: the step unscales them).
void set_grads(const std::vector<Tensor>& ps, int step) {
  Generator g(100 + static_cast<uint64_t>(step));
  for (size_t i = 0; i < ps.size(); ++i) {
    const Tensor& p = ps[i];
    if (i == 5 && step == 0) {
      p.set_grad(Tensor());  // no gradient in the first step
      continue;
    }
    const Tensor gr = randn(p.sizes(), TensorOptions(DType::Float32), &g);
    const bool grad16 = is_reduced_float(p.dtype()) && (i + static_cast<size_t>(step)) % 2 == 0;
    p.set_grad(grad16 ? (gr * 1024.0).to(p.dtype()) : gr.to(is_reduced_float(p.dtype()) ? DType::Float32 : p.dtype()));
  }
}

template <typename Opt, typename Options>
void expect_capturable_equals_plain(Options options, DType sixteen) {
  const std::vector<Tensor> a = make_params(sixteen), b = make_params(sixteen);
  Opt plain(groups(a), options), cap(groups(b), options);
  cap.set_capturable(true);
  const Tensor inv = full({1}, 1.0 / 1024.0, TensorOptions(DType::Float32));
  for (int step = 0; step < 5; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    set_grads(a, step);
    set_grads(b, step);
    const bool skip = step == 2;  // e.g. an inf gradient: the plain optimizer is not stepped
    if (step == 3) {              // an lr change between steps (what a schedule does)
      plain.param_groups()[1].set_lr(0.005);
      cap.param_groups()[1].set_lr(0.005);
    }
    if (!skip) {
      plain.set_inv_scale_for_next_step(1.0f / 1024.0f);
      plain.step();
    }
    cap.set_device_skip_for_next_step(full({}, skip ? 1.0 : 0.0, TensorOptions(DType::Float32)), inv);
    cap.step();
    for (size_t i = 0; i < a.size(); ++i) {
      SCOPED_TRACE("parameter " + std::to_string(i));
      EXPECT_TRUE(same_bits(b[i], a[i]));
      EXPECT_TRUE(same_bits(cap.master(b[i]), plain.master(a[i])));
      EXPECT_EQ(cap.step_count(b[i]), plain.step_count(a[i]));
    }
  }
  const StateDict sp = plain.state_dict(), sc = cap.state_dict();
  ASSERT_EQ(sc.size(), sp.size());
  for (auto& [k, t] : sp) {
    ASSERT_TRUE(sc.count(k)) << k;
    EXPECT_TRUE(same_bits(sc.at(k), t)) << k;
  }
  // Loading a state into a capturable optimizer sets its device counts.
  const std::vector<Tensor> c = make_params(sixteen);
  Opt loaded(groups(c), options);
  loaded.set_capturable(true);
  loaded.load_state_dict(sp);
  EXPECT_EQ(loaded.step_count(c[0]), plain.step_count(a[0]));
  loaded.set_capturable(false);
  EXPECT_EQ(loaded.step_count(c[5]), plain.step_count(a[5]));
}

TEST(CapturableOptimizer, SgdEqualsThePlainOptimizerWithSkipsDecidedOnTheHost) {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_capturable_equals_plain<optim::SGD>(optim::SGDOptions{.lr = 0.05}, dt);
    // dampening != 0: the momentum buffer's first update differs from the later ones, so a
    // skipped first step must leave the next one "first" (decided on the device).
    expect_capturable_equals_plain<optim::SGD>(
        optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2}, dt);
    expect_capturable_equals_plain<optim::SGD>(
        optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = true}, dt);
  }
}

TEST(CapturableOptimizer, AdamAndAdamWEqualThePlainOptimizerWithSkipsDecidedOnTheHost) {
  for (DType dt : {DType::Float16, DType::BFloat16})
    for (bool amsgrad : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (amsgrad ? " amsgrad" : ""));
      expect_capturable_equals_plain<optim::Adam>(optim::AdamOptions{.lr = 1e-2, .weight_decay = 1e-2, .amsgrad = amsgrad},
                                                  dt);
      expect_capturable_equals_plain<optim::AdamW>(optim::AdamWOptions{.lr = 1e-2, .amsgrad = amsgrad}, dt);
    }
}

// A skip on the very first step: the plain optimizer creates no state; the capturable one made
// zero buffers but counted nothing, and its state_dict says so (no step, no buffers).
TEST(CapturableOptimizer, AFirstStepSkippedOnTheDeviceLeavesNoState) {
  Tensor p = tensor({1.0, 2.0}).requires_grad_(true);
  optim::Adam opt({p}, {.lr = 0.1});
  opt.set_capturable(true);
  p.set_grad(tensor({0.5, 0.5}));
  opt.set_device_skip_for_next_step(full({}, 1.0, TensorOptions(DType::Float32)), Tensor());
  opt.step();
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(opt.step_count(p), 0);
  const StateDict sd = opt.state_dict();
  EXPECT_FALSE(sd.count("state.0.step"));
  EXPECT_FALSE(sd.count("state.0.exp_avg"));
  opt.step();  // the flag was consumed: this one steps
  EXPECT_EQ(opt.step_count(p), 1);
  EXPECT_NE(p.to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));
}

// A schedule writes a capturable optimizer's device lr as it steps (a replayed step reads it there).
TEST(CapturableOptimizer, AScheduleWritesTheDeviceLr) {
  Tensor p = tensor({1.0}).requires_grad_(true);
  optim::SGD opt({p}, {.lr = 0.1});
  opt.set_capturable(true);
  const Tensor lr = opt.device_lr(0, Device::CPU());
  optim::StepLR sched(opt, 1, 0.5);
  EXPECT_EQ(lr.item<double>(), 0.1);
  sched.step();
  EXPECT_EQ(lr.item<double>(), 0.05) << "written by the schedule, before any step()";
}

TEST(CapturableOptimizer, BadDeviceScalarsAreRefused) {
  Tensor p = tensor({1.0}).requires_grad_(true);
  optim::SGD opt({p}, {.lr = 0.1});
  expect_error([&] { opt.set_device_skip_for_next_step(zeros({}), Tensor()); },
               {"SGD.set_device_skip_for_next_step", "not capturable"});
  opt.set_capturable(true);
  expect_error([&] { opt.set_device_skip_for_next_step(zeros({}, TensorOptions(DType::Float64)), Tensor()); },
               {"found_inf must be a 1-element Float32 tensor, got f64[]"});
  // The op itself: a capturable call without its step tensor.
  Tensor w = tensor({1.0}), g = tensor({1.0});
  expect_error([&] {
    dispatch(*find_op("sgd_step_"), {w, g, Tensor(), Tensor(), Tensor(), full({}, 0.1, TensorOptions(DType::Float64))},
             {{"lr", 0.1}, {"momentum", 0.0}, {"dampening", 0.0}, {"weight_decay", 0.0}, {"nesterov", false},
              {"first", true}, {"inv_scale", 1.0}, {"capturable", true}});
  }, {"sgd_step_", "capturable"});
}

}  // namespace
}  // namespace mixtape::testing
