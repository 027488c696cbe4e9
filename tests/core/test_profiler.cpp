// tests/core/test_profiler.cpp — the per-op profiler on the CPU: rows per (op, device, dtype),
// calls, self time with nested kernels counted once, steps, the table, and that off means off.
#include <gtest/gtest.h>

#include <chrono>
#include <mixtape/mixtape.h>
#include <thread>

#include "core/profiler.h"

namespace mixtape {
namespace {

const profiler::OpRecord* find_row(const profiler::Report& r, const std::string& op, const std::string& dtype) {
  for (const auto& row : r.ops)
    if (row.op == op && row.dtype == dtype) return &row;
  return nullptr;
}

void busy_for(std::chrono::milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Two test ops: the outer kernel works 5 ms itself and dispatches the inner one, which works
// 40 ms. Self time must give the outer about 5 ms, not 45.
TensorList inner_kernel(const OpCall& call) {
  busy_for(std::chrono::milliseconds(40));
  return {call.inputs[0]};
}
TensorList outer_kernel(const OpCall& call) {
  busy_for(std::chrono::milliseconds(5));
  return dispatch(*find_op("test_profiler_inner"), {call.inputs[0]});
}
const OpSchema& inner_op() {
  static OpSchema& op = define_op("test_profiler_inner").kernel(DeviceType::CPU, inner_kernel).cpu_only("a test op");
  return op;
}
const OpSchema& outer_op() {
  (void)inner_op();
  static OpSchema& op = define_op("test_profiler_outer").kernel(DeviceType::CPU, outer_kernel).cpu_only("a test op");
  return op;
}

TEST(Profiler, OffRecordsNothing) {
  profiler::set_enabled(false);
  profiler::reset();
  Tensor a = ones({4, 4});
  (void)relu(matmul(a, a));
  profiler::step();
  const profiler::Report r = profiler::report();
  EXPECT_TRUE(r.ops.empty());
  EXPECT_EQ(r.steps, 0);
}

TEST(Profiler, CountsCallsPerOpDeviceAndDtype) {
  profiler::Profile on;
  Tensor a = ones({8, 8}), h = a.to(DType::BFloat16);
  for (int i = 0; i < 3; ++i) (void)relu(matmul(a, a));
  (void)relu(h);
  profiler::step();
  profiler::step();
  const profiler::Report r = profiler::report();
  const auto* mm = find_row(r, "matmul", "f32");
  const auto* relu32 = find_row(r, "relu", "f32");
  const auto* relu16 = find_row(r, "relu", "bf16");
  ASSERT_NE(mm, nullptr) << r.table();
  ASSERT_NE(relu32, nullptr) << r.table();
  ASSERT_NE(relu16, nullptr) << r.table();
  EXPECT_EQ(mm->calls, 3);
  EXPECT_EQ(relu32->calls, 3);
  EXPECT_EQ(relu16->calls, 1);
  EXPECT_EQ(mm->device, DeviceType::CPU);
  EXPECT_GE(mm->self_ms, 0.0);
  EXPECT_EQ(mm->launches, 0);  // CPU kernels launch nothing
  EXPECT_EQ(r.steps, 2);
  EXPECT_GT(r.wall_ms, 0.0);
  // Rows come largest self time first.
  for (size_t i = 1; i < r.ops.size(); ++i) EXPECT_GE(r.ops[i - 1].self_ms, r.ops[i].self_ms);
  const std::string t = r.table();
  EXPECT_NE(t.find("mixtape profile: 2 step(s)"), std::string::npos) << t;
  EXPECT_NE(t.find("matmul"), std::string::npos) << t;
  EXPECT_NE(t.find("per step: "), std::string::npos) << t;
  EXPECT_EQ(t.find("launches"), std::string::npos) << t;  // no device work: no launch columns
}

TEST(Profiler, NestedKernelsAreCountedOnce) {
  const OpSchema& outer = outer_op();
  profiler::Profile on;
  const auto t0 = std::chrono::steady_clock::now();
  (void)dispatch(outer, {ones({2})});
  const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const profiler::Report r = profiler::report();
  const auto* o = find_row(r, "test_profiler_outer", "f32");
  const auto* i = find_row(r, "test_profiler_inner", "f32");
  ASSERT_NE(o, nullptr) << r.table();
  ASSERT_NE(i, nullptr) << r.table();
  EXPECT_GE(i->self_ms, 40.0);
  EXPECT_GE(o->self_ms, 5.0);
  EXPECT_LT(o->self_ms, 40.0) << "the inner kernel's time was counted in the outer's self time";
  EXPECT_LE(o->self_ms + i->self_ms, wall + 1e-6);  // the rows' sum is not more than the wall time
}

TEST(Profiler, ResetForgetsAndGuardRestoresTheSwitch) {
  profiler::set_enabled(false);
  {
    profiler::Profile on;
    EXPECT_TRUE(profiler::enabled());
    (void)relu(ones({3}));
    EXPECT_FALSE(profiler::report().ops.empty());
    profiler::reset();
    EXPECT_TRUE(profiler::report().ops.empty());
  }
  EXPECT_FALSE(profiler::enabled());
}

TEST(Profiler, ProfilesTheBackwardPassToo) {
  profiler::Profile on;
  Tensor w = ones({4, 4}).requires_grad_();
  Tensor y = relu(matmul(ones({2, 4}), w)).sum();
  y.backward();
  const profiler::Report r = profiler::report();
  // The backward pass runs relu's gradient (its own op) and matmul's two gradient products.
  const auto* rg = find_row(r, "relu_mask_grad", "f32");
  const auto* mm = find_row(r, "matmul", "f32");
  ASSERT_NE(rg, nullptr) << r.table();
  ASSERT_NE(mm, nullptr) << r.table();
  EXPECT_EQ(rg->calls, 1);
  EXPECT_GE(mm->calls, 2) << r.table();  // forward + the weight's gradient
}

}  // namespace
}  // namespace mixtape
