// ops/cpu/row_lane_sum.h — a sum over rows in 32 lanes: batch norm's per-channel statistics order.
//
// A channel's values come as rows (one per image: N rows of S = H W values). The value at
// position s of a row goes to lane s % 32, rows are added in order, and the lanes are combined by
// a halving tree (lane i += lane i + w for w = 16, 8, 4, 2, 1). The order depends on (row, s)
// alone, so every layout, thread count and kernel gives the same bits: the AVX-512 kernels
// (ops/cpu/batch_norm_avx512.h) keep the 32 lanes in four registers of 8 doubles and must equal
// this generic loop bit for bit (tests/ops/test_batch_norm_avx512.cpp). 32 lanes rather than
// ops/cpu/lane_sum.h's 4: eight add chains per register, so the vector kernel runs at the adds'
// throughput rather than their latency (batch norm was a quarter of a ResNet-8 BF16 step with
// four scalar chains).
#pragma once
#include <cstdint>

namespace mixtape::cpu {

template <typename Acc>
struct RowLaneSum {
  static constexpr int kLanes = 32;
  Acc lane[kLanes] = {};
  int64_t s = 0;  // position in the current row of the next value

  // Adds g(0), ..., g(n - 1), the next n values of the current row.
  template <typename G>
  void add(int64_t n, G&& g) {
    int64_t j = 0;
    for (; j < n && s % kLanes != 0; ++j, ++s) lane[s % kLanes] += g(j);
    for (; j + kLanes <= n; j += kLanes, s += kLanes)  // whole lane rows: a loop the compiler vectorizes
      for (int l = 0; l < kLanes; ++l) lane[l] += g(j + l);
    for (; j < n; ++j, ++s) lane[s % kLanes] += g(j);
  }
  void end_row() { s = 0; }
  Acc total() const {
    Acc t[kLanes];
    for (int i = 0; i < kLanes; ++i) t[i] = lane[i];
    for (int w = kLanes / 2; w >= 1; w /= 2)
      for (int i = 0; i < w; ++i) t[i] = t[i] + t[i + w];
    return t[0];
  }
};

}  // namespace mixtape::cpu
