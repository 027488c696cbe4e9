// bench/exhaustive_convert.cpp — checks float -> Half and float -> BFloat16 for all 2^32 fp32
// bit patterns, on the scalar functions and on the bulk converter, against a reference; then
// all 2^16 patterns of each 16-bit type through 16 -> 32 -> 16.
// Invariant it proves: core/half.h, core/bfloat16.h and core/convert.h agree with IEEE
// round-to-nearest-even (and with mixtape's NaN policy) on every input there is.
//
// Why the reference is independent: core/half.h works on the biased exponent field (rebias by
// subtraction, round with an add-and-carry trick, a separate shift path for subnormals) and
// core/bfloat16.h uses the 0x7FFF bias trick. The reference below does neither. It decodes the
// input into an exact integer pair value = M * 2^E, finds the binade from the bit width of M,
// derives the spacing 2^q of the target format at that binade (clamped at the subnormal
// range), and rounds M * 2^(E-q) to an integer with an explicit guard (halfway) and sticky
// (remainder) comparison, then encodes — one generic routine for any (ebits, mbits), the same
// construction as tests/fixtures/gen_fp16_vectors.py's Fraction code. No floating-point
// arithmetic is involved, so FPU modes cannot make both sides agree by accident.
//
// Usage: exhaustive_convert [threads]   (default: all hardware threads). Exit 0 iff no mismatch.
#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/bfloat16.h"
#include "core/convert.h"
#include "core/half.h"

namespace {

struct Format {
  const char* name;
  int ebits;
  int mbits;
  bool quiet_nan_on_widen;  // fp16 -> fp32 sets the quiet bit (vcvtph2ps); bf16 -> fp32 does not
};
constexpr Format kFp16{"fp16", 5, 10, true};
constexpr Format kBf16{"bf16", 8, 7, false};

// Exact RNE of fp32 `x` into `fmt`, by the integer construction described at the top.
uint32_t reference_narrow(uint32_t x, const Format& fmt) {
  const uint32_t sign = (x >> 31) << (fmt.ebits + fmt.mbits);
  const uint32_t exp_field = (x >> 23) & 0xFF;
  const uint32_t frac = x & 0x7FFFFF;
  const uint32_t exp_ones = ((1u << fmt.ebits) - 1u) << fmt.mbits;

  if (exp_field == 0xFF) {
    if (frac == 0) return sign | exp_ones;
    // mixtape's NaN policy: sign, quiet bit, top payload bits.
    return sign | exp_ones | (1u << (fmt.mbits - 1)) | (frac >> (23 - fmt.mbits));
  }
  const uint64_t M = exp_field ? (frac | 0x800000u) : frac;
  const int E = exp_field ? static_cast<int>(exp_field) - 150 : -149;
  if (M == 0) return sign;

  const int bias = (1 << (fmt.ebits - 1)) - 1;
  const int emin = 1 - bias;
  const int binade = E + static_cast<int>(std::bit_width(M)) - 1;  // 2^binade <= value
  int q = std::max(binade, emin) - fmt.mbits;                       // spacing of the result
  uint64_t n;
  const int shift = q - E;  // value / 2^q = M / 2^shift
  if (shift <= 0) {
    n = M << -shift;  // value is a multiple of the spacing: exact
  } else if (shift > 40) {
    n = 0;  // M < 2^24, so value < 2^-16 * spacing: far below the halfway point
  } else {
    n = M >> shift;
    const uint64_t remainder = M & ((uint64_t{1} << shift) - 1);
    const uint64_t halfway = uint64_t{1} << (shift - 1);
    const bool round_up = remainder > halfway || (remainder == halfway && (n & 1));
    n += round_up;
  }
  if (n == (uint64_t{1} << (fmt.mbits + 1))) {  // carried into the next binade
    n >>= 1;
    ++q;
  }
  if (n < (uint64_t{1} << fmt.mbits)) return sign | static_cast<uint32_t>(n);  // subnormal/zero
  const int biased = q + fmt.mbits + bias;
  if (biased >= (1 << fmt.ebits) - 1) return sign | exp_ones;  // overflow after rounding
  return sign | (static_cast<uint32_t>(biased) << fmt.mbits) |
         static_cast<uint32_t>(n - (uint64_t{1} << fmt.mbits));
}

// 16-bit pattern -> fp32 bits: value = n * 2^q built with ldexp (exact: every fp16/bf16 value is
// an fp32 value), NaNs by the stated policy.
uint32_t reference_widen(uint32_t h, const Format& fmt) {
  const int bias = (1 << (fmt.ebits - 1)) - 1;
  const uint32_t s = (h >> (fmt.ebits + fmt.mbits)) & 1u;
  const uint32_t e = (h >> fmt.mbits) & ((1u << fmt.ebits) - 1u);
  const uint32_t m = h & ((1u << fmt.mbits) - 1u);
  if (e == (1u << fmt.ebits) - 1u) {
    const uint32_t quiet = (m && fmt.quiet_nan_on_widen) ? 0x400000u : 0u;
    return (s << 31) | 0x7F800000u | quiet | (m << (23 - fmt.mbits));
  }
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), 1 - bias - fmt.mbits)
                           : std::ldexp(static_cast<float>(m | (1u << fmt.mbits)),
                                        static_cast<int>(e) - bias - fmt.mbits);
  uint32_t u;
  std::memcpy(&u, &mag, sizeof u);
  return (s << 31) | u;
}

// One counter and the smallest failing input per check, merged from every thread.
struct Check {
  explicit Check(const char* w) : what(w) {}
  const char* what;
  std::atomic<uint64_t> mismatches{0};
  std::atomic<uint64_t> first{UINT64_MAX};
  uint32_t first_got = 0, first_want = 0;
  std::mutex mu;

  void fail(uint64_t input, uint32_t got, uint32_t want, uint64_t count) {
    mismatches += count;
    std::lock_guard<std::mutex> lock(mu);
    if (input < first.load()) {
      first = input;
      first_got = got;
      first_want = want;
    }
  }
  bool report() const {
    if (mismatches == 0) {
      std::printf("  %-34s ok\n", what);
      return true;
    }
    std::printf("  %-34s %llu mismatches, first input 0x%08llx: got 0x%08x want 0x%08x\n", what,
                static_cast<unsigned long long>(mismatches.load()),
                static_cast<unsigned long long>(first.load()), first_got, first_want);
    return false;
  }
};

Check half_scalar{"fp32->fp16 scalar vs reference"};
Check half_bulk{"fp32->fp16 bulk vs reference"};
Check bf16_scalar{"fp32->bf16 scalar vs reference"};
Check bf16_bulk{"fp32->bf16 bulk vs reference"};

constexpr uint64_t kChunk = 1u << 16;
constexpr uint64_t kChunks = (uint64_t{1} << 32) / kChunk;

void sweep(std::atomic<uint64_t>& next_chunk) {
  std::vector<float> src(kChunk);
  std::vector<mixtape::Half> hb(kChunk);
  std::vector<mixtape::BFloat16> bb(kChunk);
  for (uint64_t c; (c = next_chunk.fetch_add(1)) < kChunks;) {
    const uint32_t base = static_cast<uint32_t>(c * kChunk);
    for (uint32_t i = 0; i < kChunk; ++i) {
      const uint32_t bits = base + i;
      std::memcpy(&src[i], &bits, sizeof bits);
    }
    // An odd length leaves a scalar tail in every chunk, as real tensors do.
    mixtape::convert_float_to_half(src.data(), hb.data(), kChunk - 3);
    mixtape::convert_float_to_half(src.data() + kChunk - 3, hb.data() + kChunk - 3, 3);
    mixtape::convert_float_to_bfloat16(src.data(), bb.data(), kChunk - 5);
    mixtape::convert_float_to_bfloat16(src.data() + kChunk - 5, bb.data() + kChunk - 5, 5);

    for (uint32_t i = 0; i < kChunk; ++i) {
      const uint32_t bits = base + i;
      const uint32_t want_h = reference_narrow(bits, kFp16);
      const uint32_t want_b = reference_narrow(bits, kBf16);
      const uint32_t got_hs = mixtape::float_to_half_bits(src[i]);
      const uint32_t got_bs = mixtape::float_to_bfloat16_bits(src[i]);
      if (got_hs != want_h) half_scalar.fail(bits, got_hs, want_h, 1);
      if (hb[i].bits != want_h) half_bulk.fail(bits, hb[i].bits, want_h, 1);
      if (got_bs != want_b) bf16_scalar.fail(bits, got_bs, want_b, 1);
      if (bb[i].bits != want_b) bf16_bulk.fail(bits, bb[i].bits, want_b, 1);
    }
  }
}

// Every 16-bit pattern: widening (scalar, bulk) against the reference, then 16 -> 32 -> 16 is
// the identity for numbers and gives the quieted NaN for NaNs.
template <typename T>
bool check_16_bit(const Format& fmt, float (*widen)(uint16_t), uint16_t (*narrow)(float),
                  void (*bulk_widen)(const T*, float*, size_t),
                  void (*bulk_narrow)(const float*, T*, size_t)) {
  std::vector<T> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = T::from_bits(static_cast<uint16_t>(i));
  std::vector<float> wide(65536);
  std::vector<T> back(65536);
  bulk_widen(all.data(), wide.data(), wide.size());
  bulk_narrow(wide.data(), back.data(), back.size());

  const uint32_t quiet16 = 1u << (fmt.mbits - 1);
  uint64_t bad_widen = 0, bad_trip = 0, identities = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t want_wide = reference_widen(h, fmt);
    uint32_t got_scalar, got_bulk;
    const float ws = widen(static_cast<uint16_t>(h));
    std::memcpy(&got_scalar, &ws, 4);
    std::memcpy(&got_bulk, &wide[h], 4);
    if (got_scalar != want_wide || got_bulk != want_wide) {
      if (bad_widen++ == 0)
        std::printf("  %s 0x%04x widens to 0x%08x (scalar) / 0x%08x (bulk), want 0x%08x\n",
                    fmt.name, h, got_scalar, got_bulk, want_wide);
    }
    const bool is_nan = std::isnan(ws);
    const uint32_t want_back = is_nan ? (h | quiet16) : h;
    const uint32_t got_back_scalar = narrow(ws);
    if (got_back_scalar != want_back || back[h].bits != want_back) {
      if (bad_trip++ == 0)
        std::printf("  %s 0x%04x -> 32 -> 0x%04x (scalar) / 0x%04x (bulk), want 0x%04x\n",
                    fmt.name, h, got_back_scalar, back[h].bits, want_back);
    }
    identities += !is_nan && got_back_scalar == h;
  }
  std::printf("  %s: 16->32 mismatches %llu, 16->32->16 mismatches %llu, identities %llu\n",
              fmt.name, static_cast<unsigned long long>(bad_widen),
              static_cast<unsigned long long>(bad_trip),
              static_cast<unsigned long long>(identities));
  return bad_widen == 0 && bad_trip == 0;
}

float half_widen(uint16_t h) { return mixtape::half_bits_to_float(h); }
uint16_t half_narrow(float f) { return mixtape::float_to_half_bits(f); }
float bf16_widen(uint16_t h) { return mixtape::bfloat16_bits_to_float(h); }
uint16_t bf16_narrow(float f) { return mixtape::float_to_bfloat16_bits(f); }

}  // namespace

int main(int argc, char** argv) {
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  if (argc > 1) threads = static_cast<unsigned>(std::max(1, std::atoi(argv[1])));
  std::printf("exhaustive_convert: bulk backend %s, %u threads, 2^32 fp32 patterns\n",
              mixtape::convert_backend(), threads);

  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<uint64_t> next_chunk{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(sweep, std::ref(next_chunk));
  for (std::thread& th : pool) th.join();
  const double sweep_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  bool ok = true;
  for (const Check* c : {&half_scalar, &half_bulk, &bf16_scalar, &bf16_bulk}) ok &= c->report();
  ok &= check_16_bit<mixtape::Half>(kFp16, half_widen, half_narrow, mixtape::convert_half_to_float,
                                    mixtape::convert_float_to_half);
  ok &= check_16_bit<mixtape::BFloat16>(kBf16, bf16_widen, bf16_narrow,
                                        mixtape::convert_bfloat16_to_float,
                                        mixtape::convert_float_to_bfloat16);
  std::printf("%s in %.1f s (2^32 sweep %.1f s)\n", ok ? "PASS" : "FAIL",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              sweep_s);
  return ok ? 0 : 1;
}
