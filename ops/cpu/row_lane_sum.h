// ops/cpu/row_lane_sum.h — a sum over rows in 32 lanes: batch norm's per-channel statistics order.
//
// A channel's values come as rows (one per image: N rows of S = H W values). The value at
// position s of a row goes to lane s % 32; a row is cut into chunks of 32 positions (its last
// chunk may be shorter). Each lane adds its values in a partial of type Part (float for f32 and
// 16-bit data, double for f64), and after every 32 chunks, counted across rows, and at the end,
// the partials are added into f64 lanes and restart from zero: a float partial holds at most 32
// terms, so it carries at most 31 roundings of 2^-24, and everything past it is f64. The f64 lanes
// are combined by a halving tree (lane i += lane i + w for w = 16, 8, 4, 2, 1). The order depends
// on (row, s) alone, so every layout, thread count and kernel gives the same bits: the AVX-512
// kernels (ops/cpu/batch_norm_avx512.h) keep the 32 float lanes in two registers and must equal
// this generic loop bit for bit (tests/ops/test_batch_norm_avx512.cpp). Float partials rather
// than f64 all the way: a BF16 or f32 value is added as it is, 16 to an instruction, without
// converting each one to f64 (batch norm's statistics cost 1.4-1.7x less; docs/CPU.md).
#pragma once
#include <cstdint>

namespace mixtape::cpu {

template <typename Part>
struct RowLaneSum {
  static constexpr int kLanes = 32;
  static constexpr int kChunksPerFlush = 32;
  Part part[kLanes] = {};
  double lane[kLanes] = {};
  int64_t s = 0;   // position in the current row of the next value
  int chunks = 0;  // chunks added to the partials since they were last flushed

  // Adds g(0), ..., g(n - 1), the next n values of the current row (g returns Part).
  template <typename G>
  void add(int64_t n, G&& g) {
    int64_t j = 0;
    while (j < n) {
      if (s % kLanes == 0 && j + kLanes <= n) {  // a whole chunk: a loop the compiler vectorizes
        for (int l = 0; l < kLanes; ++l) part[l] += g(j + l);
        j += kLanes;
        s += kLanes;
        end_chunk();
        continue;
      }
      part[s % kLanes] += g(j);
      ++j;
      if (++s % kLanes == 0) end_chunk();
    }
  }
  void end_row() {
    if (s % kLanes != 0) end_chunk();
    s = 0;
  }
  // Partials into the f64 lanes, and back to zero.
  void flush() {
    for (int l = 0; l < kLanes; ++l) {
      lane[l] += static_cast<double>(part[l]);
      part[l] = Part(0);
    }
    chunks = 0;
  }
  // Flushes (a no-op on the lanes when nothing is pending: a lane is never -0, so + 0 keeps its bits).
  double total() {
    flush();
    double t[kLanes];
    for (int i = 0; i < kLanes; ++i) t[i] = lane[i];
    for (int w = kLanes / 2; w >= 1; w /= 2)
      for (int i = 0; i < w; ++i) t[i] = t[i] + t[i + w];
    return t[0];
  }

 private:
  void end_chunk() {
    if (++chunks == kChunksPerFlush) flush();
  }
};

}  // namespace mixtape::cpu
