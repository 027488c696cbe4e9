// core/rng.h — seeded, counter-based random numbers (Philox4x32-10).
// Element i of a draw depends only on (seed, offset, i), never on thread count or device, so
// CPU kernels can split work freely and a CUDA kernel can reproduce the CPU stream exactly.
// Same seed -> bit-identical results, on any number of threads.
#pragma once
#include <cmath>
#include <cstdint>
#include <mutex>

#include "core/macros.h"

namespace mixtape {

struct Philox4x32 {
  uint32_t v[4];
};

// One Philox4x32-10 block: 128 random bits for counter (c0..c3) under key (k0, k1).
MIXTAPE_HD inline Philox4x32 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                           uint32_t k1) {
  const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(M0) * c0, p1 = uint64_t(M1) * c2;
    uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0), hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += W0;
    k1 += W1;
  }
  return {{c0, c1, c2, c3}};
}

// The j-th 32-bit word of the stream (seed, offset), offset counted in 128-bit blocks.
MIXTAPE_HD inline uint32_t philox_word(uint64_t seed, uint64_t offset, uint64_t j) {
  uint64_t block = offset + j / 4;
  Philox4x32 r = philox4x32_10(uint32_t(block), uint32_t(block >> 32), 0, 0, uint32_t(seed), uint32_t(seed >> 32));
  return r.v[j % 4];
}

// Uniform in [0, 1): the top 24 bits, so every value is exactly representable in float.
MIXTAPE_HD inline float uniform_from_bits(uint32_t x) { return float(x >> 8) * (1.0f / 16777216.0f); }
// Uniform in (0, 1], safe for log().
MIXTAPE_HD inline float uniform_open_from_bits(uint32_t x) { return (float(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }

// Standard normal for element i from words 2i and 2i+1 (Box–Muller, computed in double so the
// result is the same on every device up to libm's last-ulp differences).
MIXTAPE_HD inline double normal_from_words(uint32_t a, uint32_t b) {
  double u1 = (double(a >> 8) + 1.0) * (1.0 / 16777216.0);
  double u2 = double(b >> 8) * (1.0 / 16777216.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// A seeded stream. Draws reserve a range of blocks; the generator only remembers the offset.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  uint64_t offset() const;
  void set_state(uint64_t seed, uint64_t offset);
  // Reserves enough blocks for `words` 32-bit words; returns (seed, first block offset).
  struct Range {
    uint64_t seed, offset;
  };
  Range reserve(uint64_t words);

 private:
  mutable std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide default generator (used by rand/randn/dropout/init when none is passed).
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace mixtape
