// ops/pool_planes.h — what the CPU pooling kernels (ops/max_pool.cpp, ops/avg_pool.cpp) share:
// the plane loop, the 16-bit widening and narrowing of a plane, the f32 gradient planes, the
// argument checks of a kernel, and the public wrappers' handling of unbatched (C, H, W) inputs.
// Layout: x (N, C, H, W) is N C independent planes of H x W, contiguous (other layouts are
// copied once); every kernel runs plane by plane, planes split over OpenMP threads above
// cpu::kParallelGrain.
// Invariant: 16-bit values go through these helpers widened to f32 exactly and are rounded once
// on store, so a 16-bit pooling equals the f32 pooling of the widened input, rounded, bit for bit.
// Internal: not part of the public API.
#pragma once
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/tensor.h"
#include "ops/cpu/elementwise.h"
#include "ops/pool_geometry.h"

namespace mixtape::pool_impl {

inline void check_floating(const char* op, const char* what, const Tensor& t) {
  MT_CHECK(is_floating(t.dtype()), op, ": expected a floating ", what, ", got ", t.describe());
}

// A gradient op's grad must have the forward output's shape.
inline void check_grad_shape(const char* op, const PoolGeom& g, const Tensor& grad) {
  MT_CHECK(grad.sizes() == g.out_sizes(), op, ": expected grad of shape ", shape_str(g.out_sizes()),
           " (the pooled shape of input_size), got ", grad.describe());
}

inline Tensor dense(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.sizes(), TensorOptions(t.dtype()));
  cpu::copy_into(out, t);
  return out;
}

// fn(plane, thread) for every plane; threads when the work pays for them.
template <typename F>
inline void for_each_plane(int64_t planes, int64_t work_per_plane, F&& fn) {
  const bool par = planes > 1 && planes * work_per_plane >= cpu::kParallelGrain && !omp_in_parallel();
#pragma omp parallel for if (par) schedule(static)
  for (int64_t p = 0; p < planes; ++p) fn(p, omp_get_thread_num());
}

// 16-bit planes are widened to float with the bulk (F16C) converters before the window loops
// and narrowed once after, which gives the bits of per-element conversion in a fraction of the
// time. widen returns src itself when T is already the compute type.
template <typename T>
const acc_t<T>* widen(const T* src, int64_t n, std::vector<acc_t<T>>& buf) {
  if constexpr (std::is_same_v<T, acc_t<T>>) {
    return src;
  } else {
    buf.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i += cpu::kBlock)
      cpu::load_block<T>(reinterpret_cast<const char*>(src + i), sizeof(T), std::min(cpu::kBlock, n - i), buf.data() + i);
    return buf.data();
  }
}
template <typename T>
inline void narrow_into(const acc_t<T>* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += cpu::kBlock)
    cpu::store_block<T>(reinterpret_cast<char*>(dst + i), sizeof(T), std::min(cpu::kBlock, n - i), src + i);
}

// A gradient plane (H, W) is accumulated in the compute type A: directly in the output when
// T == A, else in a per-thread scratch plane rounded once into the output.
template <typename T>
struct GradPlanes {
  using A = acc_t<T>;
  static constexpr bool direct = std::is_same_v<T, A>;
  std::vector<A> scratch;
  int64_t size;
  explicit GradPlanes(int64_t plane) : scratch(direct ? 0 : static_cast<size_t>(omp_get_max_threads() * plane)), size(plane) {}
  // zero = false: the caller writes every element itself.
  A* begin(T* out, int thread, bool zero = true) {
    A* acc;
    if constexpr (direct)
      acc = out;
    else
      acc = scratch.data() + static_cast<int64_t>(thread) * size;
    if (zero) std::fill(acc, acc + size, A(0));
    return acc;
  }
  void finish(const A* acc, T* out) {
    if constexpr (!direct) narrow_into(acc, out, size);
  }
};

// ---- public wrappers: (C, H, W) inputs run as a batch of one ----
inline void check_rank(const char* op, const Tensor& x) {
  MT_CHECK(x.defined(), op, ": input must be defined");
  MT_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got ",
           x.describe());
}
inline Tensor batched(const Tensor& x) { return x.dim() == 3 ? x.unsqueeze(0) : x; }
inline IntList batched_size(const char* op, const IntList& s) {
  MT_CHECK(s.size() == 3 || s.size() == 4, op, ": input_size must be (C, H, W) or (N, C, H, W), got ", shape_str(s));
  if (s.size() == 4) return s;
  return {1, s[0], s[1], s[2]};
}

}  // namespace mixtape::pool_impl
