// ops/cpu/steering.cpp — the override slots of ops/cpu/steering.h. Each constructor lives with
// its switch (cpu_features.cpp, blas.cpp, conv_implicit_gemm.cpp, kernel_table.cpp), which knows
// how to check and encode its value.
#include "ops/cpu/steering.h"

namespace mixtape::cpu {

std::atomic<intptr_t>& override_slot(Switch s) {
  static std::atomic<intptr_t> slots[static_cast<int>(Switch::Count)] = {};
  return slots[static_cast<int>(s)];
}

Override::~Override() {
  override_slot(which_).store(previous_);
  if (release_) release_(mine_);
}

}  // namespace mixtape::cpu
