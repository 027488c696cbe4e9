// ops/cpu/loops.h — the CPU elementwise machinery every pointwise op shares.
//
// strided_loop walks N operands over a common shape: dimensions that are contiguous in every
// operand are merged, the innermost one becomes a tight loop, and rows are split over OpenMP
// threads when the work is large enough to pay for them. Element type conversion follows the
// rule of the project: load 16-bit values as float, compute in acc_t<T>, round once on store.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <omp.h>

#include "core/convert.h"
#include "core/tensor.h"

namespace mixtape::cpu {

// Below this many elements an op runs on one thread: thread start-up costs more than it saves.
inline constexpr int64_t kParallelGrain = 32768;

template <size_t N>
struct StridedOperands {
  std::array<char*, N> base;
  std::array<IntList, N> strides;  // bytes
};

// Merges dimensions that are contiguous in every operand; drops size-1 dims.
template <size_t N>
void coalesce(IntList& sizes, std::array<IntList, N>& strides) {
  IntList s;
  std::array<IntList, N> st;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (!s.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < N; ++k)
        if (st[k].back() != strides[k][d] * sizes[d]) mergeable = false;
      if (mergeable) {
        s.back() *= sizes[d];
        for (size_t k = 0; k < N; ++k) st[k].back() = strides[k][d];
        continue;
      }
    }
    s.push_back(sizes[d]);
    for (size_t k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
  }
  if (s.empty()) {
    s.push_back(1);
    for (size_t k = 0; k < N; ++k) st[k].push_back(0);
  }
  sizes = s;
  strides = st;
}

// Calls row(ptrs, inner_strides_in_bytes, count) for every innermost row of `sizes`.
// If every operand walks `sizes` as one run of equally spaced elements (dense, or a broadcast
// scalar), returns true and that run's length and per-operand stride. Allocation-free: the
// common case of a tiny op skips coalesce's bookkeeping.
template <size_t N>
bool single_run(const IntList& sizes, const std::array<IntList, N>& strides, int64_t& total,
                std::array<int64_t, N>& step) {
  total = 1;
  bool first = true;
  std::array<int64_t, N> expected{};
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    for (size_t k = 0; k < N; ++k) {
      if (first) {
        step[k] = strides[k][d];
        expected[k] = strides[k][d];
      }
      if (strides[k][d] != expected[k]) return false;
      expected[k] *= sizes[d];
    }
    first = false;
    total *= sizes[d];
  }
  if (first) step.fill(0);
  return true;
}

// The byte strides strided_loop(sizes, ops, row) hands to every call of row (one value per
// operand: the run's step, or the coalesced innermost dimension's stride), so that a caller can
// choose its row kernel once, before the loop.
template <size_t N>
std::array<int64_t, N> row_strides(const IntList& sizes, const StridedOperands<N>& ops) {
  int64_t total;
  std::array<int64_t, N> step;
  if (single_run<N>(sizes, ops.strides, total, step)) return step;
  IntList s = sizes;
  std::array<IntList, N> st = ops.strides;
  coalesce<N>(s, st);
  for (size_t k = 0; k < N; ++k) step[k] = st[k][s.size() - 1];
  return step;
}

template <size_t N, typename Row>
void strided_loop(IntList sizes, StridedOperands<N> ops, Row&& row) {
  {
    int64_t total;
    std::array<int64_t, N> step;
    if (single_run<N>(sizes, ops.strides, total, step)) {
      const int nthreads = total >= kParallelGrain ? omp_get_max_threads() : 1;
      if (nthreads <= 1) {
        if (total > 0) row(ops.base, step, total);
        return;
      }
#pragma omp parallel num_threads(nthreads)
      {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t b = total * t / nt, e = total * (t + 1) / nt;
        std::array<char*, N> p = ops.base;
        for (size_t k = 0; k < N; ++k) p[k] += b * step[k];
        if (e > b) row(p, step, e - b);
      }
      return;
    }
  }
  coalesce<N>(sizes, ops.strides);
  const size_t nd = sizes.size();
  const int64_t inner = sizes[nd - 1];
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < nd; ++d) rows *= sizes[d];
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = ops.strides[k][nd - 1];
  if (rows == 0 || inner == 0) return;  // an empty shape that single_run did not take (broadcast)

  auto run_rows = [&](int64_t r0, int64_t r1) {
    // Multi-index of row r0 over the outer dims, then an odometer.
    IntList idx(nd > 1 ? nd - 1 : 1, 0);
    std::array<char*, N> p = ops.base;
    int64_t rem = r0;
    for (size_t d = nd - 1; d-- > 0;) {
      idx[d] = rem % sizes[d];
      rem /= sizes[d];
      for (size_t k = 0; k < N; ++k) p[k] += idx[d] * ops.strides[k][d];
    }
    for (int64_t r = r0; r < r1; ++r) {
      row(p, inner_strides, inner);
      for (size_t d = nd - 1; d-- > 0;) {
        ++idx[d];
        for (size_t k = 0; k < N; ++k) p[k] += ops.strides[k][d];
        if (idx[d] < sizes[d]) break;
        for (size_t k = 0; k < N; ++k) p[k] -= idx[d] * ops.strides[k][d];
        idx[d] = 0;
      }
    }
  };

  int64_t total = rows * inner;
  int nthreads = total >= kParallelGrain ? omp_get_max_threads() : 1;
  if (nthreads <= 1 || rows == 1) {
    if (rows == 1 && nthreads > 1 && inner >= kParallelGrain) {
      // One long row: split it.
#pragma omp parallel num_threads(nthreads)
      {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t b = inner * t / nt, e = inner * (t + 1) / nt;
        std::array<char*, N> p = ops.base;
        for (size_t k = 0; k < N; ++k) p[k] += b * inner_strides[k];
        if (e > b) row(p, inner_strides, e - b);
      }
      return;
    }
    run_rows(0, rows);
    return;
  }
#pragma omp parallel num_threads(nthreads)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t b = rows * t / nt, e = rows * (t + 1) / nt;
    if (e > b) run_rows(b, e);
  }
}

template <typename T>
inline acc_t<T> load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return static_cast<acc_t<T>>(v);
}
template <typename T>
inline void store(char* p, acc_t<T> v) {
  T t = static_cast<T>(v);
  std::memcpy(p, &t, sizeof(T));
}

// 16-bit rows run in blocks: widened to float with the bulk (F16C) converters, computed in
// float, narrowed once. The bits equal element-by-element conversion (core/convert.h's
// invariant); the time is a fraction, since a scalar binary16 conversion is a dozen branches.
inline constexpr int64_t kBlock = 256;
template <typename T>
inline constexpr bool is_16bit_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// dst[i] = value of the T at p + i * stride, for i < n (n <= kBlock).
template <typename T>
inline void load_block(const char* p, int64_t stride, int64_t n, acc_t<T>* dst) {
  if (stride == static_cast<int64_t>(sizeof(T))) {
    if constexpr (std::is_same_v<T, Half>)
      return convert_half_to_float(reinterpret_cast<const Half*>(p), dst, static_cast<size_t>(n));
    if constexpr (std::is_same_v<T, BFloat16>)
      return convert_bfloat16_to_float(reinterpret_cast<const BFloat16*>(p), dst, static_cast<size_t>(n));
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = load<T>(p + i * stride);
}
// The T at p + i * stride = src[i] rounded once, for i < n.
template <typename T>
inline void store_block(char* p, int64_t stride, int64_t n, const acc_t<T>* src) {
  if (stride == static_cast<int64_t>(sizeof(T))) {
    if constexpr (std::is_same_v<T, Half>)
      return convert_float_to_half(src, reinterpret_cast<Half*>(p), static_cast<size_t>(n));
    if constexpr (std::is_same_v<T, BFloat16>)
      return convert_float_to_bfloat16(src, reinterpret_cast<BFloat16*>(p), static_cast<size_t>(n));
  }
  for (int64_t i = 0; i < n; ++i) store<T>(p + i * stride, src[i]);
}

// Calls f(v, m) on consecutive pieces of the n values p[0], p[st], p[2 st], ... read as acc_t<T>:
// for f32/f64 with st == 1 one piece, the values themselves; for 16-bit storage blocks of at most
// kBlock values widened by load_block (F16C when contiguous). Each piece but the last has kBlock
// values, so a piece never splits a group of four (ops/cpu/lane_sum.h's lanes stay aligned).
template <typename T, typename F>
inline void for_each_widened(const T* p, int64_t st, int64_t n, F&& f) {
  if constexpr (!is_16bit_v<T>) {
    if (st == 1) return f(p, n);
  }
  acc_t<T> buf[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    load_block<T>(reinterpret_cast<const char*>(p + i * st), st * static_cast<int64_t>(sizeof(T)), m, buf);
    f(buf, m);
  }
}
// out[0, n) = fn(0), ..., fn(n - 1), computed in acc_t<T> and rounded once on store (in blocks
// through store_block for 16-bit storage).
template <typename T, typename Fn>
inline void store_each(T* out, int64_t n, Fn&& fn) {
  if constexpr (is_16bit_v<T>) {
    float buf[kBlock];
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t m = std::min(kBlock, n - i);
      for (int64_t j = 0; j < m; ++j) buf[j] = fn(i + j);
      store_block<T>(reinterpret_cast<char*>(out + i), sizeof(T), m, buf);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(fn(i));
  }
}

// Byte strides of `t` broadcast to `shape` (0 where t is broadcast).
IntList broadcast_byte_strides(const Tensor& t, const IntList& shape);

}  // namespace mixtape::cpu
