// ops/cpu/lane_sum.h — a sum in four interleaved lanes, the CPU reductions' accumulator.
//
// The value at logical position k of a reduction goes to lane k % 4, whatever pieces the caller
// feeds it in (runs of a strided layout, 16-bit blocks, rows of a channel), and the lanes are
// combined as (l0 + l1) + (l2 + l3): one fixed order for a given reduction length, so results
// are the same on every run and for every layout of the input. Four independent add chains run
// about 4x faster than the one latency-bound chain of a plain loop (conv2d's bias gradient, a
// sum over N, H, W, was 6% of a SmallCNN training step). Batch norm's statistics use
// ops/cpu/row_lane_sum.h's 32 lanes instead, which AVX-512 registers hold.
#pragma once
#include <cstdint>

namespace mixtape::cpu {

template <typename Acc>
struct LaneSum {
  Acc lane[4] = {0, 0, 0, 0};
  int64_t k = 0;  // logical position of the next value

  // Adds g(0), ..., g(n - 1), the next n values of the reduction.
  template <typename G>
  void add(int64_t n, G&& g) {
    int64_t j = 0;
    for (; j < n && (k & 3) != 0; ++j, ++k) lane[k & 3] += g(j);
    Acc l0 = lane[0], l1 = lane[1], l2 = lane[2], l3 = lane[3];  // in registers, not memory
    for (; j + 4 <= n; j += 4, k += 4) {
      l0 += g(j);
      l1 += g(j + 1);
      l2 += g(j + 2);
      l3 += g(j + 3);
    }
    lane[0] = l0, lane[1] = l1, lane[2] = l2, lane[3] = l3;
    for (; j < n; ++j, ++k) lane[k & 3] += g(j);
  }
  Acc total() const { return (lane[0] + lane[1]) + (lane[2] + lane[3]); }
};

}  // namespace mixtape::cpu
