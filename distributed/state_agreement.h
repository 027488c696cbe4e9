// distributed/state_agreement.h — checks that every rank holds the same state before a job
// relies on it (a checkpoint each rank restored from its own copy, a dataset each rank loaded
// itself): short per-item values are gathered from all ranks and compared with rank 0's.
//
// Invariant: check_same_on_all_ranks is one collective, issued by every rank; it returns on
// every rank or throws the same error on every rank, naming the first rank and the first item
// (in the caller's order) that differ from rank 0's.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group.h"

namespace mixtape::distributed {

// (label, value) pairs; values are compared as strings. Neither may contain a newline.
using AgreementItems = std::vector<std::pair<std::string, std::string>>;

// A tensor's layout and a 64-bit digest of its values (a CPU copy, row-major):
// "f32[2, 3] #0123456789abcdef". Equal tensors give equal digests on every rank; a differing
// value changes it (barring a 2^-64 collision).
std::string tensor_digest(const Tensor& t);

// Throws, on every rank, "rank R's <what> differs from rank 0's at <label>: rank R has <value>,
// rank 0 has <value>" (or lacks / has an extra item), then "; <advice>" when advice is given.
// A world of one returns at once.
void check_same_on_all_ranks(ProcessGroup& pg, const AgreementItems& items, const std::string& what,
                             const std::string& advice = "");

}  // namespace mixtape::distributed
