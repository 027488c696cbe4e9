// amp/fp8_meta.h — the delayed-scaling recipe's state (Transformer Engine's fp8_meta): per module
// that runs an FP8 GEMM, an amax history and a scale for each of its three roles (input, weight,
// output gradient). Fp8Autocast casts with these scales and records each cast's amax; one
// update_scales() per step rolls the histories and computes the next scales (docs/FP8.md).
// Invariants: every scale is finite and > 0 and scale_inv == 1 / scale (f32); the histories
// keep their shape (amax_history_len, 3); a meta is only ever returned for the weight tensor it
// was made for (a weak reference guards a recycled address).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "amp/fp8_recipe.h"
#include "core/state_dict.h"
#include "core/tensor.h"

namespace mixtape::amp {

struct Fp8Meta {
  std::string name;     // the module's path, "fc1" (the weight's name without ".weight")
  Tensor amax_history;  // f32 (amax_history_len, 3): row 0 collects this step's amaxes (max of
                        // every cast since the last update); rows len-1, len-2, ... 1 hold the
                        // previous steps, newest first (TE's layout)
  Tensor scale;         // f32 (3): what each role is multiplied by before the cast to FP8
  Tensor scale_inv;     // f32 (3): 1 / scale, the dequantising factor

  // Host reads and writes: a meta on the CPU only (refused on a GPU, where the casts record
  // into row 0 and read the scales on the device).
  float scale_of(Fp8Role r) const;
  float scale_inv_of(Fp8Role r) const;
  // Row 0 of the role's column becomes max(row 0, amax) (NaN ignored, inf kept).
  void record_amax(Fp8Role r, float amax);
};

// Reduces, in place and elementwise, a 1-D f32 tensor of amaxes with max across data-parallel
// ranks (TE all-reduces them before every scale update, so all ranks use the same scales). The
// tensor holds row 0 of every history, meta by meta in order, three roles each.
using AmaxReducer = std::function<void(Tensor& amaxes)>;

class Fp8Metas {
 public:
  // One meta per 2-D or 4-D parameter named "weight" or "<path>.weight" (the weights of linear
  // and conv2d layers; pass model.named_parameters()), in that order, on that weight's device
  // (cpu or cuda). Histories start at zero, scales at 1.
  Fp8Metas(const DelayedScaling& recipe, const std::vector<std::pair<std::string, Tensor>>& named_parameters);

  const DelayedScaling& recipe() const { return recipe_; }
  const std::vector<Fp8Meta>& metas() const { return metas_; }
  size_t size() const { return metas_.size(); }
  // The meta made for `weight`, or nullptr.
  Fp8Meta* find(const Tensor& weight);
  const Fp8Meta& at(const std::string& name) const;  // throws, listing the names, if absent

  // The delayed-scaling update (TE's amax_and_scale_update), once per step: the reducer (if any)
  // all-reduces every row 0 with max; then, per meta and role, amax = max over the whole
  // history (Max) or row 0 (MostRecent), the history rolls (row 0 moves to the end, the oldest
  // row is dropped, row 0 starts again at 0), and scale = fp8_max * 2^-margin / amax, keeping the
  // previous scale when amax is 0 or not finite (amp/fp8_scaling.h, scale_from_amax). Metas on
  // a GPU update there with the same bits (the reducer then gets a device tensor), no host sync.
  void update_scales(const AmaxReducer& reducer = {});

  // "<name>.amax_history", "<name>.scale", "<name>.scale_inv" (copies).
  StateDict state_dict() const;
  // Copies a state_dict() back bit for bit. Everything is checked first: a missing or unexpected
  // key, a dtype or shape that differs (another history length, another model), or a scale that
  // is not finite and > 0 throws, naming every such tensor.
  void load_state_dict(const StateDict& state);

 private:
  void update_on_device(const AmaxReducer& reducer);
  DelayedScaling recipe_;
  std::vector<Fp8Meta> metas_;
  struct Key {
    std::weak_ptr<TensorImpl> weight;
    size_t index;
  };
  std::map<const TensorImpl*, Key> index_;
};

}  // namespace mixtape::amp
