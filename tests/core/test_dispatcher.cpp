// tests/core/test_dispatcher.cpp — the order of the dispatch layers (Autocast -> Autograd ->
// Backend), their self-exclusion, tracing, and the device check every op gets.
#include <gtest/gtest.h>

#include <mixtape/mixtape.h>

namespace mixtape {
namespace {

std::vector<std::string> g_seen;

// A stand-in Autocast layer (amp/ installs the real one): records that it ran, casts f32
// inputs to f16 like a lower-precision policy, and calls the op again with itself excluded.
TensorList fake_autocast(const OpSchema& op, OpCall& call) {
  g_seen.push_back("autocast:" + op.name);
  ExcludeLayerGuard no_autocast(DispatchLayer::Autocast);
  TensorList cast;
  for (auto& t : call.inputs) cast.push_back(t.dtype() == DType::Float32 ? t.to(DType::Float16) : t);
  return dispatch(op, cast, call.attrs);
}

struct FakeAutocast {
  FakeAutocast() {
    set_layer_handler(DispatchLayer::Autocast, fake_autocast);
    set_autocast_included(DeviceType::CPU, true);
  }
  ~FakeAutocast() {
    set_autocast_included(DeviceType::CPU, false);
    set_layer_handler(DispatchLayer::Autocast, nullptr);
  }
};

TEST(Dispatcher, LayersRunAutocastThenAutogradThenBackend) {
  Tensor a = ones({2, 2}).requires_grad_(), b = ones({2, 2});
  std::string trace;
  Tensor y;
  {
    FakeAutocast fake;
    ScopedTrace capture(uint32_t(TraceKind::Dispatch), &trace);
    g_seen.clear();
    y = mul(a, b);
  }
  // The mul line order proves the layering; the casts it made were themselves dispatched
  // (below Autocast, through Autograd) and so are recorded on the tape.
  auto pos = [&](const std::string& s) { return trace.find(s); };
  size_t ac = pos("[dispatch] mul  Autocast  f32[2, 2], f32[2, 2]");
  size_t ag = pos("[dispatch] mul  Autograd  f16[2, 2], f16[2, 2]");
  size_t be = pos("[dispatch] mul  Backend(cpu)  f16[2, 2], f16[2, 2]");
  ASSERT_NE(ac, std::string::npos) << trace;
  ASSERT_NE(ag, std::string::npos) << trace;
  ASSERT_NE(be, std::string::npos) << trace;
  EXPECT_LT(ac, ag);
  EXPECT_LT(ag, be);
  EXPECT_NE(pos("[dispatch] to_dtype  Autograd  f32[2, 2]"), std::string::npos) << trace;
  EXPECT_EQ(g_seen, (std::vector<std::string>{"autocast:mul"}));  // casts were not autocast again
  // Autograd recorded the op on its 16-bit inputs, and the gradient returns in f32.
  EXPECT_EQ(y.dtype(), DType::Float16);
  EXPECT_EQ(y.grad_fn()->name(), "MulBackward");
  y.sum().backward();
  EXPECT_EQ(a.grad().dtype(), DType::Float32);
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
}

TEST(Dispatcher, ExcludeGuardSkipsLayerAndRestores) {
  Tensor a = ones({2}).requires_grad_();
  {
    ExcludeLayerGuard below(DispatchLayer::Autograd);
    EXPECT_TRUE(layer_excluded(DispatchLayer::Autograd));
    EXPECT_FALSE((a * 2.0).requires_grad());
  }
  EXPECT_FALSE(layer_excluded(DispatchLayer::Autograd));
  EXPECT_TRUE((a * 2.0).requires_grad());
}

TEST(Dispatcher, AutocastSlotIsInertWithoutAmp) {
  set_autocast_included(DeviceType::CPU, true);  // enabled, but no handler installed in core tests
  Tensor y = mul(ones({2}), ones({2}));
  set_autocast_included(DeviceType::CPU, false);
  EXPECT_EQ(y.dtype(), DType::Float32);
}

TEST(Dispatcher, MixedDevicesAreRejectedWithBothDevicesNamed) {
  float host[2] = {1, 2};
  Tensor fake_cuda = from_blob(host, {2}, DType::Float32, {}, Device::CUDA(0));  // metadata only
  try {
    add(ones({2}), fake_cuda);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "add: expected all tensors on the same device, got cpu (input 0) and cuda:0 (input 1)");
  }
}

TEST(Dispatcher, RegistryListsOpsInNameOrder) {
  auto ops = all_ops();
  ASSERT_GT(ops.size(), 20u);
  for (size_t i = 1; i < ops.size(); ++i) EXPECT_LT(ops[i - 1]->name, ops[i]->name);
  EXPECT_EQ(find_op("matmul")->amp_policy, AmpPolicy::LowerPrecision);
  EXPECT_EQ(find_op("nonexistent"), nullptr);
}

}  // namespace
}  // namespace mixtape

namespace mixtape {
namespace {

[[maybe_unused]] bool mentions(const std::vector<std::string>& problems, const std::string& op) {
  for (const std::string& p : problems)
    if (p.rfind(op + ":", 0) == 0) return true;
  return false;
}

// Forgetting a CUDA kernel is a start-up error of every CUDA build (not a failure on a GPU later):
// the registry check names the op, dispatch refuses to run while the problem stands, and declaring
// the op cpu_only(why) is the way out. A CPU-only build has nothing to check.
TEST(Dispatcher, CpuKernelWithoutCudaKernelIsAnErrorUnlessDeclaredCpuOnly) {
  EXPECT_TRUE(kernel_registry_problems().empty());
  KernelFn noop = +[](const OpCall& c) -> TensorList { return {c.inputs[0]}; };
  OpSchema& forgot = define_op("test_forgot_its_cuda_kernel").kernel(DeviceType::CPU, noop);
  OpSchema& typo = define_op("test_cuda_kernel_of_no_op").kernel(DeviceType::CUDA, noop);
#if MIXTAPE_WITH_CUDA
  const std::vector<std::string> problems = kernel_registry_problems();
  EXPECT_TRUE(mentions(problems, "test_forgot_its_cuda_kernel"));
  EXPECT_TRUE(mentions(problems, "test_cuda_kernel_of_no_op"));
  try {
    add(ones({2}), ones({2}));
    ADD_FAILURE() << "dispatch ran with an incomplete registry";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test_forgot_its_cuda_kernel: a CPU kernel and no CUDA kernel"),
              std::string::npos)
        << e.what();
  }
#endif
  forgot.cpu_only("a test op");
  typo.kernel(DeviceType::CPU, noop);
  EXPECT_TRUE(kernel_registry_problems().empty());
  EXPECT_EQ(add(ones({2}), ones({2})).sum().item<float>(), 4.0f);  // dispatch runs again

  // A kernel added after the registry was last found complete is checked too (the review found
  // that only define_op marked the registry as changed).
  OpSchema& late = define_op("test_kernel_added_later");
  EXPECT_EQ(add(ones({2}), ones({2})).sum().item<float>(), 4.0f);  // no kernels yet: nothing to miss
  late.kernel(DeviceType::CPU, noop);
#if MIXTAPE_WITH_CUDA
  EXPECT_THROW(add(ones({2}), ones({2})), Error);
#endif
  late.cpu_only("a test op");
  EXPECT_EQ(add(ones({2}), ones({2})).sum().item<float>(), 4.0f);
}

}  // namespace
}  // namespace mixtape
