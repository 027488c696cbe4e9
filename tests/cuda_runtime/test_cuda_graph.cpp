// tests/cuda_runtime/test_cuda_graph.cpp — cuda::Graph (core/cuda/graph.h): a captured training
// step of a small conv + linear model (forward, MSE loss, backward, SGD) replayed N times gives
// the eager steps' losses and parameters bit for bit, with each batch copied into static buffers
// before its replay, also with momentum and with FP16 parameters over FP32 masters (after a warm-up
// step); the graph's private pool is kept across replays and given back by reset();
// cross_entropy's device-side target check is captured and checks every replay; captured dropout
// draws the eager run's masks in order (the graph's device Philox slot); each call that
// cannot be captured is a clear error naming the op, after which capture_end()
// refuses the graph and eager work goes on normally. Labelled gpu: runs on a GPU and on the CUDA
// emulator, skips elsewhere.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda_api.h"
#include "core/error.h"
#include "core/tensor.h"
#include "models/nn.h"
#include "ops/creation.h"
#include "ops/dropout.h"
#include "ops/loss.h"
#include "ops/pointwise.h"
#include "optim/sgd.h"
#include "common/error_of.h"
#include "require_gpu.h"

#if defined(MIXTAPE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda/check.h"
#include "core/cuda/deferred_check.h"
#include "core/cuda/graph.h"
#include "core/cuda/handles.h"
#include "core/cuda/stream.h"
#endif

namespace mixtape {
namespace {

#if defined(MIXTAPE_WITH_CUDA)

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.to(Device::CPU()).contiguous(), y = b.to(Device::CPU()).contiguous();
  return x.sizes() == y.sizes() && x.dtype() == y.dtype() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// conv 1->4 3x3 pad 1, ReLU, flatten, linear 4*6*6 -> 3: cuDNN, elementwise kernels and cuBLAS.
std::shared_ptr<nn::Sequential> make_model(uint64_t seed) {
  Generator gen(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = {1}}, &gen));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Flatten>());
  m->push_back(std::make_shared<nn::Linear>(4 * 6 * 6, 3, true, &gen));
  m->to(Device::CUDA(0));
  return m;
}

struct Batch {
  Tensor x, y;  // on the CPU
};
std::vector<Batch> batches(int n) {
  Generator gen(42);
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) out.push_back({randn({2, 1, 6, 6}, {}, &gen), randn({2, 3}, {}, &gen)});
  return out;
}

// One training step: returns the loss (on the device).
Tensor step(nn::Module& model, optim::SGD& opt, const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  Tensor loss = mse_loss(model.forward(x), y);
  loss.backward();
  opt.step();
  return loss;
}

TEST(CudaGraph, ACapturedTrainingStepReplaysTheEagerStepsBitForBit) {
  REQUIRE_GPU();
  const int kSteps = 4;
  const std::vector<Batch> data = batches(kSteps);

  // Eager reference.
  auto eager = make_model(7);
  optim::SGD eager_opt(eager->parameters(), optim::SGDOptions{.lr = 0.1});
  std::vector<Tensor> eager_losses;
  std::vector<std::vector<Tensor>> eager_params;
  for (const Batch& b : data) {
    eager_losses.push_back(step(*eager, eager_opt, b.x.to(Device::CUDA(0)), b.y.to(Device::CUDA(0))).to(Device::CPU()));
    std::vector<Tensor> ps;
    for (const Tensor& p : eager->parameters()) ps.push_back(p.to(Device::CPU()));
    eager_params.push_back(ps);
  }

  // The same step captured once, on static input buffers.
  auto model = make_model(7);
  optim::SGD opt(model->parameters(), optim::SGDOptions{.lr = 0.1});
  Tensor static_x = zeros({2, 1, 6, 6}, TensorOptions().with_device(Device::CUDA(0)));
  Tensor static_y = zeros({2, 3}, TensorOptions().with_device(Device::CUDA(0)));
  {
    // Warm-up without the optimizer step (it would move the parameters): handles, cuDNN choices.
    Tensor loss = mse_loss(model->forward(static_x), static_y);
    loss.backward();
    opt.zero_grad();
  }
  cuda::synchronize();
  const int64_t reserved_before = cuda::memory_stats(0).reserved_bytes;
  cuda::Graph graph;
  cudaStream_t before = cuda::current_stream();
  graph.capture_begin();
  EXPECT_TRUE(cuda::is_capturing());
  EXPECT_NE(cuda::current_stream(), before) << "capture must run on a side stream";
  Tensor static_loss = step(*model, opt, static_x, static_y);
  graph.capture_end();
  EXPECT_FALSE(cuda::is_capturing());
  EXPECT_EQ(cuda::current_stream(), before);
  ASSERT_TRUE(graph.captured());
  const int64_t pool = graph.pool_reserved_bytes();
  EXPECT_GT(pool, 0);

  // Nothing ran during capture: the parameters are still the initial ones.
  auto fresh = make_model(7);
  for (size_t i = 0; i < fresh->parameters().size(); ++i)
    EXPECT_TRUE(same_bits(model->parameters()[i], fresh->parameters()[i])) << "parameter " << i << " moved";

  for (int s = 0; s < kSteps; ++s) {
    SCOPED_TRACE("replay " + std::to_string(s));
    // The next batch into the static buffers (an async host-to-device copy), then one launch.
    static_x.copy_(data[s].x);
    static_y.copy_(data[s].y);
    graph.replay();
    EXPECT_TRUE(same_bits(static_loss, eager_losses[s]));
    for (size_t i = 0; i < eager_params[s].size(); ++i)
      EXPECT_TRUE(same_bits(model->parameters()[i], eager_params[s][i])) << "parameter " << i;
    EXPECT_EQ(graph.pool_reserved_bytes(), pool) << "a replay must reuse the pool, not grow it";
  }
  const int64_t reserved_with_graph = cuda::memory_stats(0).reserved_bytes;
  EXPECT_GE(reserved_with_graph, reserved_before + pool);
  graph.reset();
  EXPECT_FALSE(graph.captured());
  EXPECT_EQ(graph.pool_reserved_bytes(), 0);
}

// After a warm-up step (which makes the momentum buffers), a captured step replays the eager
// steps that follow it, bit for bit: momentum, and FP32 masters of FP16 parameters, are state the
// graph updates in place.
void expect_replays_equal_eager(DType dtype, optim::SGDOptions options) {
  const int kSteps = 4;
  const std::vector<Batch> data = batches(kSteps);
  auto on_device = [dtype](const Tensor& t) { return t.to(Device::CUDA(0)).to(dtype); };
  auto make = [dtype] {
    Generator gen(11);
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(std::make_shared<nn::Flatten>());
    m->push_back(std::make_shared<nn::Linear>(36, 8, true, &gen));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(8, 3, true, &gen));
    m->to(Device::CUDA(0));
    m->to(dtype);
    return m;
  };
  auto eager = make();
  optim::SGD eager_opt(eager->parameters(), options);
  std::vector<std::vector<Tensor>> eager_params;
  for (const Batch& b : data) {
    step(*eager, eager_opt, on_device(b.x), on_device(b.y));
    std::vector<Tensor> ps;
    for (const Tensor& p : eager->parameters()) ps.push_back(p.to(Device::CPU()));
    eager_params.push_back(ps);
  }
  auto model = make();
  optim::SGD opt(model->parameters(), options);
  Tensor static_x = on_device(data[0].x), static_y = on_device(data[0].y);
  step(*model, opt, static_x, static_y);  // the warm-up is eager step 0
  cuda::Graph graph;
  graph.capture_begin();
  step(*model, opt, static_x, static_y);
  graph.capture_end();
  for (int s = 1; s < kSteps; ++s) {
    SCOPED_TRACE("replay for step " + std::to_string(s));
    static_x.copy_(on_device(data[s].x));
    static_y.copy_(on_device(data[s].y));
    graph.replay();
    for (size_t i = 0; i < eager_params[s].size(); ++i)
      EXPECT_TRUE(same_bits(model->parameters()[i], eager_params[s][i])) << "parameter " << i;
  }
  // The FP32 masters (the parameters themselves in FP32) after the last step.
  for (size_t i = 0; i < eager->parameters().size(); ++i)
    EXPECT_TRUE(same_bits(opt.master(model->parameters()[i]), eager_opt.master(eager->parameters()[i])))
        << "master " << i;
}

TEST(CudaGraph, SgdWithMomentumReplaysTheEagerStepsBitForBit) {
  REQUIRE_GPU();
  expect_replays_equal_eager(DType::Float32, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
}

TEST(CudaGraph, Fp16ParametersWithFp32MastersReplayTheEagerStepsBitForBit) {
  REQUIRE_GPU();
  expect_replays_equal_eager(DType::Float16, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
}

// Each refused call: its own message, capture_end() then refuses the graph, and the thread is
// back to eager work on the stream it had.
void expect_refused(const std::function<void()>& illegal, const std::string& expected) {
  SCOPED_TRACE(expected);
  Tensor a = ones({1}, TensorOptions().with_device(Device::CUDA(0)));
  cudaStream_t before = cuda::current_stream();
  {
    cuda::Graph graph;
    graph.capture_begin();
    Tensor b = a * 2.0;  // something captured first
    const std::string msg = message_of(illegal);
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
    EXPECT_NE(msg.find("during CUDA graph capture"), std::string::npos) << msg;
    const std::string end = message_of([&] { graph.capture_end(); });
    EXPECT_NE(end.find("cuda::Graph::capture_end: the capture was abandoned after a call that cannot be captured"),
              std::string::npos)
        << end;
    EXPECT_FALSE(graph.captured());
    EXPECT_FALSE(cuda::is_capturing());
    EXPECT_EQ(cuda::current_stream(), before);
  }
  EXPECT_EQ((a * 3.0).to(Device::CPU()).item<float>(), 3.0f) << "eager work after the failed capture";
}

TEST(CudaGraph, AHostReadDuringCaptureNamesTheOp) {
  REQUIRE_GPU();
  Tensor t = ones({1}, TensorOptions().with_device(Device::CUDA(0)));
  expect_refused([&] { (void)t.item<float>(); }, "to_device: reads a CUDA tensor on the host");
  expect_refused([&] { (void)t.to(Device::CPU()); }, "to_device: reads a CUDA tensor on the host");
  Tensor host = ones({4});
  expect_refused([&] { (void)host.to(Device::CUDA(0)); }, "to_device: copies host memory to a CUDA tensor");
}

TEST(CudaGraph, ASynchronizeDuringCaptureIsRefused) {
  REQUIRE_GPU();
  expect_refused([] { cuda::synchronize(); }, "cuda::synchronize: waits for the device");
  cuda::Event e;
  e.record();
  expect_refused([&] { e.synchronize(); }, "cuda::Event::synchronize: waits for an event");
  expect_refused([&] { (void)e.query(); }, "cuda::Event::query: asks whether an event has happened");
}

TEST(CudaGraph, AnAllocationOutsideThePoolIsRefused) {
  REQUIRE_GPU();
  cuda::OwnedStream other;
  expect_refused(
      [&] {
        cuda::StreamGuard guard(other.get());
        (void)Tensor::empty({16}, TensorOptions().with_device(Device::CUDA(0)));
      },
      "cuda allocator: allocation of 64 bytes on cuda:0 on a stream other than the capture's");
  if (cuda::device_count() > 1)
    expect_refused(
        [] {
          cuda::DeviceGuard guard(1);
          (void)Tensor::empty({16}, TensorOptions().with_device(Device::CUDA(1)));
        },
        "cuda allocator: allocation of 64 bytes on cuda:1 during CUDA graph capture on cuda:0");
}

TEST(CudaGraph, CreatingAnEventOrAHandleDuringCaptureIsRefused) {
  REQUIRE_GPU();
  expect_refused([] { cuda::Event e; }, "cuda::Event: creates an event");
  expect_refused([] { cuda::record_stream(ones({2}, TensorOptions().with_device(Device::CUDA(0))), nullptr); },
                 "cuda::record_stream: declares another stream's use of a tensor");
  if (cuda::device_count() < 2) return;
  // A fresh thread holds no handles: capture on device 0 (its handles are made by the warm-up in
  // capture_begin), then ask for device 1's.
  std::string cublas, cudnn;
  std::thread([&] {
    cuda::set_device(0);
    for (auto* out : {&cublas, &cudnn}) {
      cuda::Graph graph;
      graph.capture_begin();
      cuda::DeviceGuard guard(1);
      *out = message_of([&] {
        if (out == &cublas)
          (void)cuda::cublas_handle();
        else
          (void)cuda::cudnn_handle();
      });
    }
  }).join();
  EXPECT_NE(cublas.find("cuda::cublas_handle: creates this thread's cuBLAS handle during CUDA graph capture"),
            std::string::npos)
      << cublas;
  EXPECT_NE(cudnn.find("cuda::cudnn_handle: creates this thread's cuDNN handle during CUDA graph capture"),
            std::string::npos)
      << cudnn;
}

// A classification step: cross_entropy's target check (a deferred device-side check) is captured.
TEST(CudaGraph, AStepWithCrossEntropyReplaysTheEagerStepsBitForBit) {
  REQUIRE_GPU();
  const int kSteps = 3;
  Generator gen(5);
  std::vector<Tensor> xs, ts;
  for (int i = 0; i < kSteps; ++i) {
    xs.push_back(randn({4, 6}, {}, &gen));
    ts.push_back(tensor(std::vector<double>{double(i % 3), 2, 0, double((i + 1) % 3)}, {4}, TensorOptions(DType::Int64)));
  }
  auto make = [] {
    Generator g(9);
    auto m = std::make_shared<nn::Linear>(6, 3, true, &g);
    m->to(Device::CUDA(0));
    return m;
  };
  auto ce_step = [](nn::Module& m, optim::SGD& o, const Tensor& x, const Tensor& t) {
    o.zero_grad();
    Tensor loss = cross_entropy(m.forward(x), t);
    loss.backward();
    o.step();
    return loss;
  };
  auto eager = make();
  optim::SGD eager_opt(eager->parameters(), optim::SGDOptions{.lr = 0.5});
  std::vector<Tensor> eager_losses, eager_weights;
  for (int i = 0; i < kSteps; ++i) {
    eager_losses.push_back(ce_step(*eager, eager_opt, xs[i].to(Device::CUDA(0)), ts[i].to(Device::CUDA(0))).to(Device::CPU()));
    eager_weights.push_back(eager->parameters()[0].to(Device::CPU()));
  }
  auto model = make();
  optim::SGD opt(model->parameters(), optim::SGDOptions{.lr = 0.5});
  Tensor static_x = zeros({4, 6}, TensorOptions().with_device(Device::CUDA(0)));
  Tensor static_t = zeros({4}, TensorOptions(DType::Int64).with_device(Device::CUDA(0)));
  (void)cross_entropy(model->forward(static_x), static_t);  // warm-up, no step
  cuda::Graph graph;
  graph.capture_begin();
  Tensor static_loss = ce_step(*model, opt, static_x, static_t);
  graph.capture_end();
  for (int i = 0; i < kSteps; ++i) {
    SCOPED_TRACE("replay " + std::to_string(i));
    static_x.copy_(xs[i]);
    static_t.copy_(ts[i]);
    graph.replay();
    EXPECT_TRUE(same_bits(static_loss, eager_losses[i]));
    EXPECT_TRUE(same_bits(model->parameters()[0], eager_weights[i]));
  }
}

// Every replay's targets are checked, and a bad one is reported at the next synchronisation
// after its replay even when a later replay was clean (each replay snapshots the slot).
TEST(CudaGraph, EachReplaysCapturedInputCheckIsReportedAtTheNextSynchronisation) {
  REQUIRE_GPU();
  Tensor logits = zeros({2, 3}, TensorOptions().with_device(Device::CUDA(0)));
  Tensor target = zeros({2}, TensorOptions(DType::Int64).with_device(Device::CUDA(0)));
  (void)cross_entropy(logits, target).item<float>();  // warm-up
  cuda::Graph graph;
  graph.capture_begin();
  Tensor loss = cross_entropy(logits, target);
  graph.capture_end();
  auto targets = [&](double a, double b) { target.copy_(tensor({a, b}, TensorOptions(DType::Int64))); };
  targets(0, 1);
  graph.replay();
  EXPECT_NO_THROW((void)loss.item<float>());
  targets(1, 5);  // class 5 of 3, at position 1
  graph.replay();
  targets(2, 2);
  graph.replay();  // clean, and it rewrites the graph's slot
  const std::string msg = message_of([&] { (void)loss.item<float>(); });
  EXPECT_NE(msg.find("nll_loss: target 5 at position "), std::string::npos) << msg;
  EXPECT_NE(msg.find("is out of bounds: expected a class in [0, 3)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(found on the device, reported at the next synchronisation)"), std::string::npos) << msg;
  EXPECT_NO_THROW((void)loss.item<float>()) << "reported once";
  graph.replay();
  EXPECT_NO_THROW(cuda::synchronize());
}

// Benchmark mode's timing of a new convolution shape waits for the device: it belongs in the warm-up.
TEST(CudaGraph, ANewConvolutionShapeInBenchmarkModeIsRefused) {
  REQUIRE_GPU();
  struct Restore {
    ~Restore() { cuda::set_cudnn_benchmark(false); }
  } restore;
  cuda::set_cudnn_benchmark(true);
  Generator gen(1);
  nn::Conv2d conv(1, 2, 3, {}, &gen);
  conv.to(Device::CUDA(0));
  Tensor x = ones({1, 1, 7, 5}, TensorOptions().with_device(Device::CUDA(0)));  // a shape no other test uses
  expect_refused([&] { (void)conv.forward(x); }, "times cuDNN's convolution algorithms (benchmark mode");
  (void)conv.forward(x);  // eagerly: timed and cached
  cuda::Graph graph;
  graph.capture_begin();
  Tensor y = conv.forward(x);  // the cached choice: captured
  graph.capture_end();
  EXPECT_TRUE(graph.captured());
}

// Random numbers other than dropout's from the default generator: the seed and offset would be
// fixed in the graph (every replay the same numbers).
TEST(CudaGraph, DrawingRandomNumbersDuringCaptureIsRefused) {
  REQUIRE_GPU();
  Tensor x = ones({16}, TensorOptions().with_device(Device::CUDA(0)));
  Generator own(99);
  expect_refused([&] { (void)dropout(x, 0.5, true, &own); }, "dropout: draws random numbers from a Generator of its own");
  expect_refused([] { (void)randn({4}, TensorOptions().with_device(Device::CUDA(0))); }, ": draws random numbers");
}

// Dropout is captured: the masks of N replays are the eager run's next N masks, in order (two
// draws per step, one ending in a partial Philox block), the generator ends where the eager run's
// does, and capture itself draws nothing.
TEST(CudaGraph, CapturedDropoutDrawsTheEagerMasksInOrder) {
  REQUIRE_GPU();
  const int kSteps = 4;
  Tensor x = ones({2, 33}, TensorOptions().with_device(Device::CUDA(0)));
  Tensor z = ones({5}, TensorOptions().with_device(Device::CUDA(0)).with_dtype(DType::Float16));
  manual_seed(77);
  std::vector<Tensor> eager_a, eager_b;
  for (int s = 0; s < kSteps; ++s) {
    eager_a.push_back(dropout(x, 0.5, true).to(Device::CPU()));
    eager_b.push_back(dropout(z, 0.3, true).to(Device::CPU()));
  }
  const uint64_t eager_offset = default_generator().offset();

  manual_seed(77);
  Tensor a = dropout(x, 0.5, true), b = dropout(z, 0.3, true);  // step 0, eager (the warm-up)
  EXPECT_TRUE(same_bits(a, eager_a[0]));
  EXPECT_TRUE(same_bits(b, eager_b[0]));
  const uint64_t before_capture = default_generator().offset();
  cuda::Graph graph;
  graph.capture_begin();
  a = dropout(x, 0.5, true);
  b = dropout(z, 0.3, true);
  graph.capture_end();
  EXPECT_EQ(default_generator().offset(), before_capture) << "nothing ran during the capture";
  for (int s = 1; s < kSteps; ++s) {
    SCOPED_TRACE("replay for step " + std::to_string(s));
    graph.replay();
    EXPECT_TRUE(same_bits(a, eager_a[s]));
    EXPECT_TRUE(same_bits(b, eager_b[s]));
  }
  EXPECT_EQ(default_generator().offset(), eager_offset);
  EXPECT_FALSE(same_bits(eager_a[1], eager_a[2])) << "the masks must differ from step to step";
}

// What CUDA itself refuses (here a raw cudaMalloc, which the allocator never makes in a capture's
// strict mode) names the op and the call, and invalidates the capture.
TEST(CudaGraph, ACallCudaRefusesInvalidatesTheCapture) {
  REQUIRE_GPU();
  cuda::Graph graph;
  graph.capture_begin();
  const std::string msg = message_of([] {
    void* p = nullptr;
    MT_CUDA_CHECK(cudaMalloc(&p, 64), "my_op");
  });
  EXPECT_NE(msg.find("my_op: CUDA call cudaMalloc(&p, 64) failed: cudaErrorStreamCaptureUnsupported"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("cannot be made during CUDA graph capture, which it invalidated"), std::string::npos) << msg;
  const std::string end = message_of([&] { graph.capture_end(); });
  EXPECT_NE(end.find("cuda::Graph::capture_end: the capture was invalidated"), std::string::npos) << end;
  EXPECT_FALSE(cuda::is_capturing());
}

TEST(CudaGraph, MisuseIsNamed) {
  REQUIRE_GPU();
  cuda::Graph graph;
  EXPECT_NE(message_of([&] { graph.replay(); }).find("cuda::Graph::replay: nothing captured"), std::string::npos);
  EXPECT_NE(message_of([&] { graph.capture_end(); }).find("cuda::Graph::capture_end: capture_begin() was not called"),
            std::string::npos);
  graph.capture_begin();
  EXPECT_NE(message_of([&] { graph.capture_begin(); }).find("this graph is capturing already"), std::string::npos);
  cuda::Graph other;
  EXPECT_NE(message_of([&] { other.capture_begin(); }).find("nested captures are not supported"),
            std::string::npos);
  graph.capture_end();  // the nested attempt was refused before it began: this capture is intact
  EXPECT_NE(message_of([&] { graph.capture_begin(); }).find("holds a capture already (reset() it first)"),
            std::string::npos);
}

#else
// The CPU-only build has none of this suite's cases: this one proves CUDA is refused there, with
// the reason, and reports the suite as skipped.
TEST(CudaGraph, NeedsACudaBuild) {
  EXPECT_FALSE(cuda::is_available());
  EXPECT_EQ(cuda::unavailable_reason(), "built without CUDA");
  const std::string refused = testing::error_of([] { cuda::check_available("CudaGraph"); });
  EXPECT_NE(refused.find("CUDA is not available: built without CUDA"), std::string::npos) << refused;
  GTEST_SKIP() << "built without CUDA";
}
#endif

}  // namespace
}  // namespace mixtape
