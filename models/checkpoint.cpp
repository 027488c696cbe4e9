// models/checkpoint.cpp — training checkpoints: sections in one safetensors file, the atomic
// replace, and the all-or-nothing restore.
#include "models/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "autograd/grad_mode.h"
#include "ops/cast.h"

namespace mixtape::nn {

namespace {

const char* const kSections[] = {"model.", "optim.", "sched.", "amp.", "fp8.", "rng.", "meta."};
const char* const kScalars[] = {"rng.global.seed", "rng.global.offset", "meta.epoch", "meta.step", "meta.data_seed"};
const char* const kReservedMetadata[] = {"format", "version", "model"};

Tensor i64_scalar(int64_t v) {
  Tensor t = Tensor::empty({}, TensorOptions(DType::Int64));
  *t.data_ptr<int64_t>() = v;
  return t;
}

std::string describe(const Tensor& t) { return t.defined() ? t.describe() : std::string("an undefined tensor"); }

// fsync a file or folder by path: what makes the rename durable, not just atomic.
void sync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  MT_CHECK(fd >= 0, "save_checkpoint: cannot open '", path, "' to sync it: ", std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  MT_CHECK(rc == 0, "save_checkpoint: fsync of '", path, "' failed: ", std::strerror(err));
}

// `section` + every tensor of `sd`, into `out`.
void put_section(StateDict& out, const std::string& section, const StateDict& sd) {
  for (const auto& [name, t] : sd) out.emplace(section + name, to_device(t, Device::CPU()));
}

// The tensors of `all` under `section`, without the prefix.
StateDict take_section(const StateDict& all, const std::string& section) {
  StateDict out;
  for (auto it = all.lower_bound(section); it != all.end() && it->first.rfind(section, 0) == 0; ++it)
    out.emplace(it->first.substr(section.size()), it->second);
  return out;
}

// The model's state_dict names in registration order (module by module, parameters then
// buffers), so "the first mismatch" is the first layer that differs, not the first in name order.
std::vector<std::string> names_in_model_order(Module& model, const StateDict& sd) {
  std::vector<std::string> order;
  std::set<std::string> listed;
  for (auto& [prefix, m] : model.named_modules()) {
    auto add = [&](const std::vector<std::pair<std::string, Tensor>>& named) {
      for (const auto& [n, t] : named) {
        std::string full = prefix.empty() ? n : prefix + "." + n;
        if (sd.count(full) && listed.insert(full).second) order.push_back(full);
      }
    };
    add(m->named_parameters(false));
    add(m->named_buffers(false));
  }
  for (const auto& [n, t] : sd)  // anything the walk missed (a module shared under two names)
    if (listed.insert(n).second) order.push_back(n);
  return order;
}

// Throws, naming the first tensor whose presence, dtype or shape differs between what this run
// expects and what the checkpoint holds under `section`.
void check_section_matches(const Checkpoint& ck, const std::string& section, const std::vector<std::string>& order,
                           const StateDict& expected, const StateDict& found, const std::string& what) {
  auto fail = [&](const std::string& detail) {
    MT_ERROR("checkpoint '", ck.path, "' (model '", ck.progress.model_name, "') does not fit this run's ", what,
             ": first mismatch ", detail);
  };
  for (const std::string& name : order) {
    const Tensor& want = expected.at(name);
    auto it = found.find(name);
    if (it == found.end())
      fail(detail::str_cat("'", section, name, "': expected ", describe(want), ", the checkpoint has no such tensor"));
    const Tensor& got = it->second;
    if (!got.defined() || got.dtype() != want.dtype() || got.sizes() != want.sizes())
      fail(detail::str_cat("'", section, name, "': expected ", describe(want), ", the checkpoint has ", describe(got)));
  }
  for (const auto& [name, got] : found)
    if (!expected.count(name))
      fail(detail::str_cat("'", section, name, "': the checkpoint has ", describe(got), ", this ", what,
                           " has no such tensor"));
}

uint64_t scalar_u64(const StateDict& all, const std::string& key) {
  return static_cast<uint64_t>(*all.at(key).data_ptr<int64_t>());
}

}  // namespace

StateDict state_tensors(const TrainingState& state) {
  StateDict all;
  put_section(all, "model.", state.model.state_dict());
  put_section(all, "optim.", state.optimizer_state ? state.optimizer_state() : state.optimizer.state_dict());
  if (state.scheduler) put_section(all, "sched.", state.scheduler->state_dict());
  if (state.amp_state) put_section(all, "amp.", state.amp_state());
  if (state.fp8_state) put_section(all, "fp8.", state.fp8_state());
  const Generator& gen = default_generator();
  all["rng.global.seed"] = i64_scalar(static_cast<int64_t>(gen.seed()));
  all["rng.global.offset"] = i64_scalar(static_cast<int64_t>(gen.offset()));
  return all;
}

void save_checkpoint(const std::string& path, const TrainingState& state, const TrainingProgress& progress,
                     const std::function<void(const std::string& tmp_path)>& before_rename) {
  StateDict all = state_tensors(state);
  all["meta.epoch"] = i64_scalar(progress.epoch);
  all["meta.step"] = i64_scalar(progress.step);
  all["meta.data_seed"] = i64_scalar(static_cast<int64_t>(progress.data_seed));

  SafetensorsMetadata metadata;
  for (const auto& [k, v] : progress.extra) {
    for (const char* reserved : kReservedMetadata)
      MT_CHECK(k != reserved, "save_checkpoint: extra key '", k, "' is reserved for the checkpoint format");
    metadata[k] = v;
  }
  metadata["format"] = kCheckpointFormat;
  metadata["version"] = std::to_string(kCheckpointVersion);
  metadata["model"] = progress.model_name;

  // One temporary name, always the same: a save killed midway leaves at most `path.tmp`, which
  // the next save truncates and replaces (save_safetensors would add a second, `path.tmp.tmp`).
  const std::string tmp = path + ".tmp";
  try {
    write_safetensors_file(all, tmp, metadata);
    sync_path(tmp, false);
    if (before_rename) before_rename(tmp);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    MT_ERROR("save_checkpoint: cannot rename '", tmp, "' to '", path, "': ", std::strerror(err));
  }
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  sync_path(dir.empty() ? "." : dir.string(), true);
}

Checkpoint read_checkpoint(const std::string& path) {
  Checkpoint ck;
  ck.path = path;
  SafetensorsMetadata metadata;
  ck.tensors = load_safetensors(path, &metadata);
  auto meta = [&](const char* k) {
    auto it = metadata.find(k);
    return it == metadata.end() ? std::string() : it->second;
  };
  MT_CHECK(meta("format") == kCheckpointFormat, "read_checkpoint: '", path, "' is not a mixtape training checkpoint "
           "(its metadata \"format\" is '", meta("format"), "', expected '", kCheckpointFormat,
           "'); a model-only file from Module::save() loads with Module::load()");
  MT_CHECK(meta("version") == std::to_string(kCheckpointVersion), "read_checkpoint: '", path, "' has format version '",
           meta("version"), "'; this build reads version ", kCheckpointVersion);
  for (const auto& [name, t] : ck.tensors) {
    bool known = false;
    for (const char* s : kSections) known = known || name.rfind(s, 0) == 0;
    MT_CHECK(known, "read_checkpoint: '", path, "': unexpected tensor '", name,
             "' (keys start with model., optim., sched., amp., fp8., rng. or meta.)");
  }
  for (const char* k : kScalars) {
    auto it = ck.tensors.find(k);
    MT_CHECK(it != ck.tensors.end(), "read_checkpoint: '", path, "' has no tensor '", k, "'");
    MT_CHECK(it->second.dtype() == DType::Int64 && it->second.dim() == 0, "read_checkpoint: '", path, "': '", k,
             "' must be a 0-d i64 tensor, got ", it->second.describe());
  }
  ck.progress.model_name = meta("model");
  ck.progress.epoch = static_cast<int64_t>(scalar_u64(ck.tensors, "meta.epoch"));
  ck.progress.step = static_cast<int64_t>(scalar_u64(ck.tensors, "meta.step"));
  ck.progress.data_seed = scalar_u64(ck.tensors, "meta.data_seed");
  MT_CHECK(ck.progress.epoch >= 0 && ck.progress.step >= 0, "read_checkpoint: '", path, "': meta.epoch (",
           ck.progress.epoch, ") and meta.step (", ck.progress.step, ") must be >= 0");
  ck.rng_seed = scalar_u64(ck.tensors, "rng.global.seed");
  ck.rng_offset = scalar_u64(ck.tensors, "rng.global.offset");
  for (const auto& [k, v] : metadata) {
    bool reserved = false;
    for (const char* r : kReservedMetadata) reserved = reserved || k == r;
    if (!reserved) ck.progress.extra[k] = v;
  }
  return ck;
}

void restore_checkpoint(const Checkpoint& ck, const TrainingState& state) {
  // ---- check everything that can be checked before anything changes ----
  const StateDict model_sd = take_section(ck.tensors, "model.");
  const StateDict live_model = state.model.state_dict();
  check_section_matches(ck, "model.", names_in_model_order(state.model, live_model), live_model, model_sd,
                        "model (" + state.model.type_name() + ")");
  const StateDict sched_sd = take_section(ck.tensors, "sched.");
  if (state.scheduler) {
    const StateDict live_sched = state.scheduler->state_dict();
    std::vector<std::string> order;
    for (const auto& [n, t] : live_sched) order.push_back(n);
    check_section_matches(ck, "sched.", order, live_sched, sched_sd, "LR scheduler");
  } else {
    MT_CHECK(sched_sd.empty(), "checkpoint '", ck.path, "' holds an LR schedule ('sched.", sched_sd.begin()->first,
             "'), but this run has none; resume with the same schedule");
  }
  const StateDict amp_sd = take_section(ck.tensors, "amp.");
  MT_CHECK(state.load_amp_state || amp_sd.empty(), "checkpoint '", ck.path, "' holds loss-scaler state ('amp.",
           amp_sd.empty() ? std::string() : amp_sd.begin()->first, "'), but this run has no scaler; resume with the "
           "same precision options (--amp)");
  MT_CHECK(!state.load_amp_state || !amp_sd.empty(), "checkpoint '", ck.path,
           "' holds no loss-scaler state (no 'amp.' tensors), but this run scales its loss; resume with the same "
           "precision options (--amp)");
  const StateDict fp8_sd = take_section(ck.tensors, "fp8.");
  MT_CHECK(state.load_fp8_state || fp8_sd.empty(), "checkpoint '", ck.path, "' holds FP8 scaling metadata ('fp8.",
           fp8_sd.empty() ? std::string() : fp8_sd.begin()->first, "'), but this run has none; resume with the same "
           "precision options (--amp)");
  MT_CHECK(!state.load_fp8_state || !fp8_sd.empty(), "checkpoint '", ck.path,
           "' holds no FP8 scaling metadata (no 'fp8.' tensors), but this run keeps it; resume with the same "
           "precision options (--amp)");
  // The optimizer, the scaler and the FP8 metadata check their own sections completely before they
  // change anything.

  // ---- apply; on any failure put the previous state back ----
  autograd::NoGradGuard no_grad;
  StateDict model_before;
  for (const auto& [n, t] : live_model) model_before.emplace(n, clone(t));
  auto optim_state = [&] { return state.optimizer_state ? state.optimizer_state() : state.optimizer.state_dict(); };
  auto load_optim = [&](const StateDict& sd) {
    state.load_optimizer_state ? state.load_optimizer_state(sd) : state.optimizer.load_state_dict(sd);
  };
  const StateDict optim_before = optim_state();
  const StateDict fp8_before = state.fp8_state ? state.fp8_state() : StateDict{};
  const StateDict sched_before = state.scheduler ? state.scheduler->state_dict() : StateDict{};
  try {
    try {
      load_optim(take_section(ck.tensors, "optim."));
    } catch (const Error& e) {
      MT_ERROR("checkpoint '", ck.path, "' (model '", ck.progress.model_name,
               "') does not fit this run's optimizer (its tensors are 'optim.<key>'): ", e.what());
    }
    state.model.load_state_dict(model_sd);
    if (state.scheduler) state.scheduler->load_state_dict(sched_sd);
    if (state.load_amp_state) {
      try {
        state.load_amp_state(amp_sd);
      } catch (const Error& e) {
        MT_ERROR("checkpoint '", ck.path, "': its loss-scaler state (tensors 'amp.<key>') does not load: ", e.what());
      }
    }
    if (state.load_fp8_state) {
      try {
        state.load_fp8_state(fp8_sd);
      } catch (const Error& e) {
        MT_ERROR("checkpoint '", ck.path, "': its FP8 scaling metadata (tensors 'fp8.<key>') does not load: ", e.what());
      }
    }
  } catch (...) {
    state.model.load_state_dict(model_before);
    load_optim(optim_before);
    if (state.load_fp8_state) state.load_fp8_state(fp8_before);
    if (state.scheduler) state.scheduler->load_state_dict(sched_before);
    throw;
  }
  default_generator().set_state(ck.rng_seed, ck.rng_offset);
}

TrainingProgress load_checkpoint(const std::string& path, const TrainingState& state) {
  Checkpoint ck = read_checkpoint(path);
  restore_checkpoint(ck, state);
  return ck.progress;
}

}  // namespace mixtape::nn
