// tests/models/test_checkpoint.cpp — training checkpoints (models/checkpoint.h): a run stopped,
// saved and resumed continues bit-identically (dropout's RNG stream, momentum, the LR schedule,
// FP32 masters of a 16-bit model); an interrupted save leaves the previous checkpoint loadable;
// a checkpoint that does not fit names the first mismatched tensor and changes nothing; FP8
// delayed scaling's metadata (the fp8. section) comes back bit for bit, or is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mixtape/mixtape.h>

#include "models/nn.h"
#include "common/bit_equal.h"
#include "models/test_util.h"

namespace mixtape {
namespace {

using test::error_of;
using test::temp_path;

using testing::bit_equal;

bool same_state(const StateDict& a, const StateDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, t] : a)
    if (!b.count(k) || !bit_equal(t, b.at(k))) return false;
  return true;
}

// A model whose training consumes the default generator (Dropout) between optimizer steps.
std::shared_ptr<nn::Sequential> dropout_mlp() {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Dropout>(0.5), std::make_shared<nn::Linear>(16, 3));
}

// Deterministic inputs (4, 8) and targets (4) for step `i`, independent of any generator.
std::pair<Tensor, Tensor> batch(int i, DType dtype) {
  std::vector<float> x(32);
  for (int k = 0; k < 32; ++k) x[k] = std::sin(0.37f * static_cast<float>(k + 11 * i));
  std::vector<int64_t> y = {i % 3, (i + 1) % 3, (i + 2) % 3, i % 2};
  return {to_dtype(tensor_from(x, {4, 8}, TensorOptions(DType::Float32)), dtype),
          tensor_from(y, {4}, TensorOptions(DType::Int64))};
}

// One training run's live objects.
struct TrainingRun {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::LRScheduler> sched;
  DType dtype;

  TrainingRun(uint64_t init_seed, DType dtype_, bool adam) : dtype(dtype_) {
    manual_seed(init_seed);
    model = dropout_mlp();
    if (dtype != DType::Float32) model->to(dtype);
    if (adam)
      opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 0.01});
    else
      opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    sched = std::make_unique<optim::StepLR>(*opt, 2, 0.5);
  }
  nn::TrainingState state() { return {*model, *opt, sched.get()}; }
  // Steps [from, to); returns the losses.
  std::vector<double> train(int from, int to) {
    std::vector<double> losses;
    for (int i = from; i < to; ++i) {
      auto [x, y] = batch(i, dtype);
      Tensor loss = cross_entropy(to_dtype((*model)(x), DType::Float32), y);
      opt->zero_grad();
      loss.backward();
      opt->step();
      sched->step();
      losses.push_back(loss.item<double>());
    }
    return losses;
  }
};

void expect_resume_is_exact(DType dtype, bool adam) {
  const std::string path = temp_path("resume.safetensors");
  TrainingRun whole(7, dtype, adam);
  std::vector<double> expected = whole.train(0, 3);
  std::vector<double> tail = whole.train(3, 6);
  expected.insert(expected.end(), tail.begin(), tail.end());

  TrainingRun first(7, dtype, adam);
  std::vector<double> losses = first.train(0, 3);
  nn::save_checkpoint(path, first.state(), {.model_name = "dropout_mlp", .epoch = 1, .step = 3, .data_seed = 42});

  TrainingRun resumed(12345, dtype, adam);  // other initial weights and RNG position: all must come back
  nn::TrainingProgress p = nn::load_checkpoint(path, resumed.state());
  EXPECT_EQ(p.model_name, "dropout_mlp");
  EXPECT_EQ(p.epoch, 1);
  EXPECT_EQ(p.step, 3);
  EXPECT_EQ(p.data_seed, 42u);
  tail = resumed.train(3, 6);
  losses.insert(losses.end(), tail.begin(), tail.end());

  ASSERT_EQ(losses.size(), expected.size());
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_EQ(losses[i], expected[i]) << "step " << i;
  EXPECT_TRUE(same_state(resumed.model->state_dict(), whole.model->state_dict()));
  EXPECT_TRUE(same_state(resumed.opt->state_dict(), whole.opt->state_dict()));
  EXPECT_TRUE(same_state(resumed.sched->state_dict(), whole.sched->state_dict()));
  const uint64_t resumed_offset = default_generator().offset();
  TrainingRun again(7, dtype, adam);
  again.train(0, 6);
  EXPECT_EQ(resumed_offset, default_generator().offset());  // the dropout stream came back too
}

TEST(Checkpoint, ResumeContinuesBitIdenticallySgdMomentumDropoutStepLR) {
  expect_resume_is_exact(DType::Float32, false);
}

TEST(Checkpoint, ResumeContinuesBitIdenticallyBf16ModelWithFp32MastersAdam) {
  expect_resume_is_exact(DType::BFloat16, true);
}

TEST(Checkpoint, FileHasSectionsAndFormatMetadata) {
  const std::string path = temp_path("sections.safetensors");
  TrainingRun run(1, DType::Float32, false);
  run.train(0, 1);
  nn::save_checkpoint(path, run.state(), {.model_name = "m", .epoch = 1, .step = 1, .extra = {{"note", "hi"}}});
  SafetensorsMetadata meta;
  StateDict all = load_safetensors(path, &meta);
  EXPECT_EQ(meta.at("format"), nn::kCheckpointFormat);
  EXPECT_EQ(meta.at("version"), "1");
  EXPECT_EQ(meta.at("model"), "m");
  EXPECT_EQ(meta.at("note"), "hi");
  for (const char* k : {"model.0.weight", "optim.state.0.momentum_buffer", "optim.param_groups.0.lr",
                        "sched.last_epoch", "rng.global.seed", "rng.global.offset", "meta.epoch", "meta.step"})
    EXPECT_TRUE(all.count(k)) << k;
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  // A model-only file is not a training checkpoint, and says where it belongs.
  run.model->save(temp_path("model_only.safetensors"));
  EXPECT_NE(error_of([&] { nn::read_checkpoint(temp_path("model_only.safetensors")); })
                .find("is not a mixtape training checkpoint"),
            std::string::npos);
}

// ---- an interrupted save ----

TEST(Checkpoint, SaveInterruptedMidwayLeavesThePreviousCheckpointLoadable) {
  const std::string path = temp_path("atomic.safetensors");
  TrainingRun run(3, DType::Float32, false);
  run.train(0, 2);
  nn::save_checkpoint(path, run.state(), {.model_name = "m", .epoch = 1, .step = 2});
  const StateDict saved_model = run.model->state_dict();
  StateDict saved_copy;
  for (auto& [k, t] : saved_model) saved_copy.emplace(k, t.clone());

  run.train(2, 4);
  // The process "dies" halfway through writing the new checkpoint: the temp file is cut short
  // and the save aborts before the rename.
  std::string err = error_of([&] {
    nn::save_checkpoint(path, run.state(), {.model_name = "m", .epoch = 2, .step = 4}, [](const std::string& tmp) {
      std::filesystem::resize_file(tmp, std::filesystem::file_size(tmp) / 2);
      throw Error("simulated crash while saving");
    });
  });
  EXPECT_EQ(err, "simulated crash while saving");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  TrainingRun fresh(99, DType::Float32, false);
  nn::TrainingProgress p = nn::load_checkpoint(path, fresh.state());
  EXPECT_EQ(p.epoch, 1);
  EXPECT_EQ(p.step, 2);
  EXPECT_TRUE(same_state(fresh.model->state_dict(), saved_copy));

  // A stale half-written temp file from a killed process does not get in the way either.
  std::ofstream(path + ".tmp") << "garbage";
  EXPECT_EQ(nn::load_checkpoint(path, fresh.state()).epoch, 1);
  nn::save_checkpoint(path, run.state(), {.model_name = "m", .epoch = 2, .step = 4});
  EXPECT_EQ(nn::read_checkpoint(path).progress.epoch, 2);
}

// A save killed while it writes (here by the file-size limit's SIGXFSZ, mid-write, in a child
// process) leaves the previous checkpoint and one temporary, `path.tmp`, never a second name
// such as `path.tmp.tmp`; the next save replaces it and leaves no temporary behind.
TEST(Checkpoint, SaveKilledWhileWritingLeavesOnlyPathTmpWhichTheNextSaveReplaces) {
  const std::string path = temp_path("killed.safetensors");
  TrainingRun run(4, DType::Float32, false);
  run.train(0, 2);
  nn::save_checkpoint(path, run.state(), {.model_name = "m", .epoch = 1, .step = 2});
  const auto size = std::filesystem::file_size(path);
  run.train(2, 4);
  std::cout.flush();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The limit cuts the new file off halfway; the write past it raises SIGXFSZ (default: die).
    struct rlimit lim{size / 2, size / 2};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      nn::save_checkpoint(path, run.state(), {.model_name = "m", .epoch = 2, .step = 4});
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(3);  // the save was not killed: the test is not testing anything
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ) << "child status " << status;
  std::set<std::string> left;
  const std::string base = std::filesystem::path(path).filename().string();
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    if (e.path().filename().string().rfind(base, 0) == 0) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{base, base + ".tmp"}));
  EXPECT_EQ(nn::read_checkpoint(path).progress.epoch, 1);  // the previous checkpoint, intact

  nn::save_checkpoint(path, run.state(), {.model_name = "m", .epoch = 2, .step = 4});
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp.tmp"));
  EXPECT_EQ(nn::read_checkpoint(path).progress.epoch, 2);
}

// ---- checkpoints that do not fit ----

TEST(Checkpoint, AnotherModelNamesTheFirstMismatchedTensorAndChangesNothing) {
  const std::string path = temp_path("smallcnn.safetensors");
  manual_seed(0);
  models::SmallCNN cnn(10);
  optim::SGD cnn_opt(cnn.parameters(), {.lr = 0.05, .momentum = 0.9});
  nn::save_checkpoint(path, {cnn, cnn_opt}, {.model_name = "smallcnn", .epoch = 2});

  models::LeNet5 lenet(10);
  optim::SGD lenet_opt(lenet.parameters(), {.lr = 0.01, .momentum = 0.5});
  StateDict model_before;
  for (auto& [k, t] : lenet.state_dict()) model_before.emplace(k, t.clone());
  StateDict opt_before = lenet_opt.state_dict();
  manual_seed(5);

  std::string err = error_of([&] { nn::load_checkpoint(path, {lenet, lenet_opt}); });
  EXPECT_NE(err.find("checkpoint '" + path + "' (model 'smallcnn') does not fit this run's model (LeNet5): first "
                     "mismatch 'model.conv1.weight': expected f32[6, 1, 5, 5], the checkpoint has f32[32, 1, 3, 3]"),
            std::string::npos)
      << err;
  EXPECT_TRUE(same_state(lenet.state_dict(), model_before));
  EXPECT_TRUE(same_state(lenet_opt.state_dict(), opt_before));
  EXPECT_EQ(default_generator().seed(), 5u);
  EXPECT_EQ(default_generator().offset(), 0u);
}

TEST(Checkpoint, WrongDtypeMissingAndUnexpectedTensorsAreNamed) {
  const std::string path = temp_path("f32.safetensors");
  TrainingRun saved(1, DType::Float32, false);
  nn::save_checkpoint(path, saved.state(), {.model_name = "mlp"});

  TrainingRun f64(1, DType::Float64, false);
  EXPECT_NE(error_of([&] { nn::load_checkpoint(path, f64.state()); })
                .find("first mismatch 'model.0.weight': expected f64[16, 8], the checkpoint has f32[16, 8]"),
            std::string::npos);

  nn::Checkpoint ck = nn::read_checkpoint(path);
  ck.tensors.erase("model.3.bias");
  EXPECT_NE(error_of([&] { nn::restore_checkpoint(ck, saved.state()); })
                .find("first mismatch 'model.3.bias': expected f32[3], the checkpoint has no such tensor"),
            std::string::npos);
  ck = nn::read_checkpoint(path);
  ck.tensors["model.4.weight"] = zeros({2});
  EXPECT_NE(error_of([&] { nn::restore_checkpoint(ck, saved.state()); })
                .find("first mismatch 'model.4.weight': the checkpoint has f32[2], this model (Sequential) has no "
                      "such tensor"),
            std::string::npos);

  // An optimizer of another kind: its own check names the key; the model stays as it was.
  TrainingRun adam(2, DType::Float32, true);
  adam.train(0, 1);
  StateDict before;
  for (auto& [k, t] : adam.model->state_dict()) before.emplace(k, t.clone());
  std::string err = error_of([&] { nn::load_checkpoint(path, adam.state()); });
  EXPECT_NE(err.find("does not fit this run's optimizer"), std::string::npos) << err;
  EXPECT_TRUE(same_state(adam.model->state_dict(), before));
}

TEST(Checkpoint, AFailureWhileApplyingPutsThePreviousStateBack) {
  const std::string path = temp_path("rollback.safetensors");
  TrainingRun saved(1, DType::Float32, false);
  saved.train(0, 3);
  nn::save_checkpoint(path, saved.state(), {.model_name = "mlp"});

  TrainingRun live(2, DType::Float32, false);
  live.train(0, 1);
  StateDict model_before, opt_before = live.opt->state_dict(), sched_before = live.sched->state_dict();
  for (auto& [k, t] : live.model->state_dict()) model_before.emplace(k, t.clone());
  // Shapes and dtypes fit, so the failure comes late: the scheduler refuses the value after the
  // optimizer and the model were loaded.
  nn::Checkpoint ck = nn::read_checkpoint(path);
  ck.tensors["sched.step_size"] = full({}, 0, TensorOptions(DType::Int64));
  EXPECT_NE(error_of([&] { nn::restore_checkpoint(ck, live.state()); }).find("step_size must be >= 1"),
            std::string::npos);
  EXPECT_TRUE(same_state(live.model->state_dict(), model_before));
  EXPECT_TRUE(same_state(live.opt->state_dict(), opt_before));
  EXPECT_TRUE(same_state(live.sched->state_dict(), sched_before));

  // No scheduler in this run, one in the checkpoint.
  TrainingRun none(1, DType::Float32, false);
  EXPECT_NE(error_of([&] { nn::load_checkpoint(path, {*none.model, *none.opt}); })
                .find("holds an LR schedule ('sched."),
            std::string::npos);
}

// The fp8. section: amp::Fp8Metas' histories and scales come back bit for bit; metadata of
// another shape is refused naming the tensor, with everything else put back; a checkpoint with
// FP8 metadata into a run without it (and the reverse) is refused.
TEST(Checkpoint, Fp8MetadataResumesBitForBitAndAMismatchIsNamed) {
  const std::string path = temp_path("fp8.safetensors");
  manual_seed(0);
  models::LeNet5 net(10);
  optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::Fp8Metas metas(amp::DelayedScaling{.amax_history_len = 4}, net.named_parameters());
  float amax = 3.0f;  // a step's amaxes, rolled into the history: scales other than 1
  for (const auto& [name, p] : net.named_parameters())
    if (amp::Fp8Meta* m = metas.find(p)) {
      m->record_amax(amp::Fp8Role::Input, amax += 1.0f);
      m->record_amax(amp::Fp8Role::GradOutput, 1e-3f / amax);
    }
  metas.update_scales();
  auto with_metas = [](nn::TrainingState st, amp::Fp8Metas& m) {
    st.fp8_state = [&m] { return m.state_dict(); };
    st.load_fp8_state = [&m](const StateDict& sd) { m.load_state_dict(sd); };
    return st;
  };
  nn::save_checkpoint(path, with_metas({net, opt}, metas), {.model_name = "lenet5", .epoch = 1});

  amp::Fp8Metas fresh(amp::DelayedScaling{.amax_history_len = 4}, net.named_parameters());
  nn::load_checkpoint(path, with_metas({net, opt}, fresh));
  EXPECT_TRUE(same_state(fresh.state_dict(), metas.state_dict()));

  // Another history length: named, and the model, optimizer and metadata stay as they were.
  models::LeNet5 other(10);
  optim::SGD other_opt(other.parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::Fp8Metas longer(amp::DelayedScaling{.amax_history_len = 8}, other.named_parameters());
  StateDict model_before, metas_before = longer.state_dict();
  for (auto& [k, t] : other.state_dict()) model_before.emplace(k, t.clone());
  std::string err = error_of([&] { nn::load_checkpoint(path, with_metas({other, other_opt}, longer)); });
  EXPECT_NE(err.find("its FP8 scaling metadata (tensors 'fp8.<key>') does not load"), std::string::npos) << err;
  EXPECT_NE(err.find("conv1.amax_history: expected f32[8, 3], the checkpoint holds f32[4, 3]"), std::string::npos)
      << err;
  EXPECT_TRUE(same_state(other.state_dict(), model_before));
  EXPECT_TRUE(same_state(longer.state_dict(), metas_before));

  EXPECT_NE(error_of([&] { nn::load_checkpoint(path, {other, other_opt}); })
                .find("holds FP8 scaling metadata ('fp8.conv1.amax_history'), but this run has none"),
            std::string::npos);
  const std::string plain = temp_path("no_fp8.safetensors");
  nn::save_checkpoint(plain, {net, opt}, {.model_name = "lenet5"});
  EXPECT_NE(error_of([&] { nn::load_checkpoint(plain, with_metas({net, opt}, fresh)); })
                .find("holds no FP8 scaling metadata (no 'fp8.' tensors), but this run keeps it"),
            std::string::npos);
}

}  // namespace
}  // namespace mixtape
