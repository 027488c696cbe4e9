// bench/convert.cpp — throughput of core/convert.h's bulk fp32 <-> fp16 / bf16 converters,
// on the SIMD backend and on the forced-scalar loop, beside a memcpy of the same byte count.
// Bytes reported = bytes read + bytes written (n*4 + n*2 per call), so the memcpy row (which
// copies n*3 bytes, counted as read + write) is the memory-bandwidth ceiling for the same
// traffic. Two sizes: the fp32 side 256 KiB (cache-resident) and 64 MiB (DRAM-bound).
// Invariant: each benchmark leaves set_convert_force_scalar(false), the process default.
//
// Target from the issue (context, not a test): conversion at memory bandwidth.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/convert.h"

namespace {

using mixtape::BFloat16;
using mixtape::Half;

// Finite, normal-range floats of mixed sign and magnitude (a fixed LCG: same data every run).
std::vector<float> make_floats(size_t n) {
  std::vector<float> v(n);
  uint32_t s = 12345;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = (static_cast<float>(s >> 8) / 16777216.f - 0.5f) * 1000.f;
  }
  return v;
}

// Restores the process default even if a benchmark is skipped or aborts its loop.
struct ForceScalar {
  explicit ForceScalar(bool on) { mixtape::set_convert_force_scalar(on); }
  ~ForceScalar() { mixtape::set_convert_force_scalar(false); }
};

void set_counters(benchmark::State& state, size_t n) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n * 6));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}

void float_to_half(benchmark::State& state, size_t n, bool scalar) {
  std::vector<float> src = make_floats(n);
  std::vector<Half> dst(n);
  ForceScalar force(scalar);
  state.SetLabel(mixtape::convert_backend());
  for (auto _ : state) {
    mixtape::convert_float_to_half(src.data(), dst.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, n);
}

void half_to_float(benchmark::State& state, size_t n, bool scalar) {
  std::vector<float> f = make_floats(n);
  std::vector<Half> src(n);
  mixtape::convert_float_to_half(f.data(), src.data(), n);
  std::vector<float> dst(n);
  ForceScalar force(scalar);
  state.SetLabel(mixtape::convert_backend());
  for (auto _ : state) {
    mixtape::convert_half_to_float(src.data(), dst.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, n);
}

void float_to_bf16(benchmark::State& state, size_t n, bool scalar) {
  std::vector<float> src = make_floats(n);
  std::vector<BFloat16> dst(n);
  ForceScalar force(scalar);
  state.SetLabel(mixtape::convert_backend());
  for (auto _ : state) {
    mixtape::convert_float_to_bfloat16(src.data(), dst.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, n);
}

void bf16_to_float(benchmark::State& state, size_t n, bool scalar) {
  std::vector<float> f = make_floats(n);
  std::vector<BFloat16> src(n);
  mixtape::convert_float_to_bfloat16(f.data(), src.data(), n);
  std::vector<float> dst(n);
  ForceScalar force(scalar);
  state.SetLabel(mixtape::convert_backend());
  for (auto _ : state) {
    mixtape::convert_bfloat16_to_float(src.data(), dst.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, n);
}

// The ceiling: memcpy of n*3 bytes reads and writes n*6 bytes in all, as a conversion does.
void memcpy_baseline(benchmark::State& state, size_t n) {
  const size_t bytes = n * 3;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, n);
}

struct Size {
  const char* name;
  size_t n;  // elements; the fp32 side is n*4 bytes
};
constexpr Size kSizes[] = {{"256KiB", 256 * 1024 / 4}, {"64MiB", 64 * 1024 * 1024 / 4}};

using ConvertFn = void (*)(benchmark::State&, size_t, bool);
struct Kind {
  const char* name;
  ConvertFn fn;
};
constexpr Kind kKinds[] = {{"float_to_half", float_to_half},
                           {"half_to_float", half_to_float},
                           {"float_to_bf16", float_to_bf16},
                           {"bf16_to_float", bf16_to_float}};

// Names read "<kind>/<backend>/<fp32 size>", e.g. float_to_half/simd/64MiB.
const bool registered = [] {
  for (const Size& size : kSizes) {
    const size_t n = size.n;
    for (const Kind& kind : kKinds) {
      for (const bool scalar : {false, true}) {
        const std::string name = std::string(kind.name) + (scalar ? "/scalar/" : "/simd/") + size.name;
        benchmark::RegisterBenchmark(name.c_str(), kind.fn, n, scalar)->UseRealTime();
      }
    }
    benchmark::RegisterBenchmark((std::string("memcpy/") + size.name).c_str(), memcpy_baseline, n)->UseRealTime();
  }
  return true;
}();

}  // namespace
