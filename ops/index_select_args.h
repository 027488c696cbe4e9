// ops/index_select_args.h — the argument checks of index_select and index_select_backward,
// shared by the CPU kernels (ops/shape_ops.cpp, where they are defined) and the CUDA glue
// (ops/cuda/indexing_ops.cpp), so both backends fail with the same messages. The CPU checks index
// values at once, CUDA on the device with the same message at the next synchronisation
// (core/cuda/deferred_check.h); gather's message lives here too for that reason. Internal: not
// part of the public API.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace mixtape {

// index_select(x, dim, index): x has a dim; returns dim wrapped.
int64_t index_select_dim(const char* op, const Tensor& x, int64_t dim);
// index_select_backward(g, index; sizes, dim): sizes has a dim; returns dim wrapped.
int64_t index_select_backward_dim(const char* op, const IntList& sizes, int64_t dim);

// index is defined, Int64 and 1-D (or 0-d).
void check_index_select_index(const Tensor& index, const char* op);
// Every one of the count host values v is in [0, n), n the size of dimension dim.
void check_index_select_bounds(const int64_t* v, int64_t count, int64_t dim, int64_t n, const char* op);

// The out-of-range index messages (after "<op>: "): index_select's index[position] = value, and
// gather's / scatter_add's, whose position is the flat one in the index tensor.
std::string index_select_bound_message(int64_t value, int64_t position, int64_t dim, int64_t n);
std::string gather_bound_message(int64_t value, int64_t position, int64_t dim, int64_t n);

// index_select_backward's gradient: sizes with k at dim, and floating.
void check_index_select_backward_grad(const Tensor& g, const IntList& sizes, int64_t dim, int64_t k,
                                      const char* op);

}  // namespace mixtape
