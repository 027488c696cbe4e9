// models/checkpoint.h — a training checkpoint: everything a stopped run needs to continue
// bit-identically (model, optimizer with its FP32 masters, LR schedule, RNG streams, progress),
// in one .safetensors file that is replaced atomically.
//
// File layout (one safetensors file; the key prefix is the section):
//   model.<name>                         the model's state_dict (parameters and buffers)
//   optim.<key>                          the optimizer's state_dict (optim/optimizer.h)
//   sched.<key>                          the LR scheduler's state_dict (absent without one)
//   amp.<key>                            the loss scaler's state_dict (amp::GradScaler; absent without one)
//   fp8.<key>                            FP8 delayed scaling's metadata (amp::Fp8Metas::state_dict: amax
//                                        histories and scales; absent without it)
//   rng.global.seed, rng.global.offset   i64 0-d: the default generator (init, dropout)
//   meta.epoch, meta.step, meta.data_seed  i64 0-d: epochs done, optimizer steps done, and the
//                                        DataLoader seed (its shuffle and augmentation streams
//                                        are functions of (seed, epoch), so these two restore them)
//   __metadata__   format "mixtape.training_checkpoint", version "1", model "<name>", and the
//                  caller's extra strings (the training example keeps its config there)
// u64 values (seeds, offsets) are stored bit-for-bit in i64 tensors.
//
// Invariants: save_checkpoint never leaves a partly written file at `path` — it writes
// `path.tmp` (the only temporary name it uses; a stale one from a killed save is truncated and
// replaced by the next), fsyncs it, renames it over `path` and fsyncs the folder, so an
// interrupted save leaves the previous checkpoint as it was. restore_checkpoint is all or nothing: every tensor is
// checked against the live model/optimizer/scheduler first (the error names the first
// mismatched tensor, expected vs found shape and dtype), and if anything fails while loading,
// the previous state is put back.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/safetensors.h"
#include "models/module.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace mixtape::nn {

inline constexpr const char* kCheckpointFormat = "mixtape.training_checkpoint";
inline constexpr int kCheckpointVersion = 1;

// Where training stands, saved next to the state.
struct TrainingProgress {
  std::string model_name;                    // as the caller names it ("smallcnn")
  int64_t epoch = 0;                         // epochs completed: the next one to run
  int64_t step = 0;                          // optimizer steps completed
  uint64_t data_seed = 0;                    // the DataLoader's seed
  std::map<std::string, std::string> extra;  // free-form strings (no key "format", "version", "model")
};

// The live objects a checkpoint is taken from and restored into.
struct TrainingState {
  Module& model;
  optim::Optimizer& optimizer;
  optim::LRScheduler* scheduler = nullptr;  // null: no schedule
  // A loss scaler's state (amp::GradScaler::state_dict / load_state_dict; models/ does not depend
  // on amp/, hence the functions). Both null: no scaler.
  std::function<StateDict()> amp_state;
  std::function<void(const StateDict&)> load_amp_state;
  // FP8 delayed scaling's metadata (amp::Fp8Metas::state_dict / load_state_dict, which checks
  // every tensor before it changes any). Both null: none.
  std::function<StateDict()> fp8_state;
  std::function<void(const StateDict&)> load_fp8_state;
  // The optimizer's state_dict and its loading, when they are not state.optimizer's own (a
  // sharded optimizer saves and loads the unsharded dict: distributed::ZeroRedundancyOptimizer).
  // Both null: state.optimizer's.
  std::function<StateDict()> optimizer_state;
  std::function<void(const StateDict&)> load_optimizer_state;
};

// A checkpoint file read and format-checked, not yet applied.
struct Checkpoint {
  std::string path;
  StateDict tensors;  // every key, with its section prefix
  TrainingProgress progress;
  uint64_t rng_seed = 0, rng_offset = 0;
};

// Writes state and progress to `path` atomically (see the header comment). `before_rename` is a
// test hook: it runs once `path.tmp` is complete and synced, and throwing from it aborts the
// save (the temp file is removed, `path` is untouched).
void save_checkpoint(const std::string& path, const TrainingState& state, const TrainingProgress& progress,
                     const std::function<void(const std::string& tmp_path)>& before_rename = {});

// The tensors save_checkpoint writes for `state`, every section but meta.* (model., optim.,
// sched., amp., fp8., rng.), on the CPU: what a run holds, for comparing it (e.g. across ranks).
StateDict state_tensors(const TrainingState& state);

// Reads `path`: a safetensors file with this format and version, the rng.* and meta.* scalars,
// and no key outside the sections above. Errors name the file and the key.
Checkpoint read_checkpoint(const std::string& path);

// Loads `checkpoint` into `state` and the default generator (all or nothing; see above).
void restore_checkpoint(const Checkpoint& checkpoint, const TrainingState& state);

// read_checkpoint + restore_checkpoint; returns the progress.
TrainingProgress load_checkpoint(const std::string& path, const TrainingState& state);

}  // namespace mixtape::nn
