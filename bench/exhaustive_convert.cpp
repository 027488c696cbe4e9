// bench/exhaustive_convert.cpp — checks float -> Half and float -> BFloat16 for all 2^32 fp32
// bit patterns, on the scalar functions and on the bulk converter, against a reference; then
// all 2^16 patterns of each 16-bit type through 16 -> 32 -> 16. With "fp8", the same for
// float -> Float8_e4m3fn / Float8_e5m2 in both saturation modes, and all 256 patterns widened.
// Invariant it proves: core/half.h, core/bfloat16.h, core/float8.h and core/convert.h agree with
// IEEE round-to-nearest-even (and with mixtape's NaN and overflow policies) on every input.
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
// The FP8 reference is independent in another way: it never looks at bit fields of the input.
// It enumerates the format's finite values from the bit-field formula (ldexp), sorted, and for
// each input magnitude (taken exactly as a double) finds the two neighbouring values by walking
// the sorted list, compares against their midpoint exactly, and breaks ties to the even
// pattern; beyond the largest finite value the "next" value is max + its ulp (480, 65536), so
// overflow falls out of the same comparison. The sweep visits magnitudes in increasing order,
// so the walk costs O(1) per input.
//
// Usage: exhaustive_convert [fp16-bf16|fp8] [threads]   (default: both sets, all hardware
// threads). Exit 0 iff no mismatch.
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
#include "core/float8.h"
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


// ---- FP8 ----

struct Fp8Format {
  const char* name;
  int ebits, mbits;
  uint32_t max_code;       // largest finite magnitude's pattern
  uint32_t overflow_code;  // what to() gives past it: NaN (e4m3fn) or inf (e5m2)
  bool has_inf;
  uint8_t (*scalar)(float, mixtape::Fp8Saturation);
};
constexpr Fp8Format kE4m3{"e4m3fn", 4, 3, 0x7E, 0x7F, false, mixtape::float_to_e4m3fn_bits};
constexpr Fp8Format kE5m2{"e5m2", 5, 2, 0x7B, 0x7C, true, mixtape::float_to_e5m2_bits};

// The value of a positive pattern from its bit fields.
double fp8_value(uint32_t code, const Fp8Format& f) {
  const int bias = (1 << (f.ebits - 1)) - 1;
  const uint32_t e = code >> f.mbits, m = code & ((1u << f.mbits) - 1u);
  return e == 0 ? std::ldexp(static_cast<double>(m), 1 - bias - f.mbits)
                : std::ldexp(static_cast<double>(m | (1u << f.mbits)), static_cast<int>(e) - bias - f.mbits);
}

struct Fp8Reference {
  const Fp8Format& fmt;
  std::vector<double> v;      // the finite magnitudes, ascending
  std::vector<uint32_t> code;
  double beyond;              // the value one ulp past the largest finite

  explicit Fp8Reference(const Fp8Format& f) : fmt(f) {
    std::vector<std::pair<double, uint32_t>> all;
    for (uint32_t c = 0; c <= f.max_code; ++c) all.emplace_back(fp8_value(c, f), c);
    std::sort(all.begin(), all.end());
    for (auto& [val, c] : all) {
      v.push_back(val);
      code.push_back(c);
    }
    beyond = v.back() + (v.back() - v[v.size() - 2]);
  }
  size_t start(double a) const {  // the walk's index for magnitude a: last v[k] <= a
    return static_cast<size_t>(std::upper_bound(v.begin(), v.end(), a) - v.begin()) - 1;
  }
  // RNE of a finite magnitude a >= v[k]; returns max_code + 1 for "overflowed".
  uint32_t round(double a, size_t& k) const {
    while (k + 1 < v.size() && v[k + 1] <= a) ++k;
    if (a == v[k]) return code[k];
    const bool top = k + 1 == v.size();
    const double hi = top ? beyond : v[k + 1];
    const uint32_t hi_code = top ? fmt.max_code + 1 : code[k + 1];
    const double mid = (v[k] + hi) / 2;  // exact: both have a few significant bits
    if (a < mid) return code[k];
    if (a > mid) return hi_code;
    return (code[k] & 1u) == 0 ? code[k] : hi_code;
  }
  // The expected pattern of a float with magnitude bits `mag` (NaN, inf or finite), both modes.
  void expect(uint32_t mag, size_t& k, uint32_t& plain, uint32_t& sat) const {
    if (mag > 0x7F800000u) {
      plain = sat = 0x7F;
      return;
    }
    const uint32_t r = mag == 0x7F800000u ? fmt.max_code + 1 : round(static_cast<double>(std::bit_cast<float>(mag)), k);
    plain = r > fmt.max_code ? fmt.overflow_code : r;
    sat = r > fmt.max_code ? fmt.max_code : r;
  }
};

using Fp8Bulk = void (*)(const float*, uint8_t*, size_t, mixtape::Fp8Saturation);
void bulk_e4m3(const float* s, uint8_t* d, size_t n, mixtape::Fp8Saturation sat) {
  mixtape::convert_float_to_e4m3fn(s, reinterpret_cast<mixtape::Float8_e4m3fn*>(d), n, {1.0f, sat});
}
void bulk_e5m2(const float* s, uint8_t* d, size_t n, mixtape::Fp8Saturation sat) {
  mixtape::convert_float_to_e5m2(s, reinterpret_cast<mixtape::Float8_e5m2*>(d), n, {1.0f, sat});
}

// checks[format][mode][scalar/bulk]
Check fp8_checks[2][2][2] = {
    {{Check{"fp32->e4m3fn scalar vs reference"}, Check{"fp32->e4m3fn bulk vs reference"}},
     {Check{"fp32->e4m3fn satfinite scalar"}, Check{"fp32->e4m3fn satfinite bulk"}}},
    {{Check{"fp32->e5m2 scalar vs reference"}, Check{"fp32->e5m2 bulk vs reference"}},
     {Check{"fp32->e5m2 satfinite scalar"}, Check{"fp32->e5m2 satfinite bulk"}}},
};

// Magnitudes [0, 2^31) in chunks, each with both signs.
void sweep_fp8(std::atomic<uint64_t>& next_chunk, const Fp8Reference* refs) {
  const Fp8Format* fmts[2] = {&kE4m3, &kE5m2};
  const Fp8Bulk bulks[2] = {bulk_e4m3, bulk_e5m2};
  const mixtape::Fp8Saturation modes[2] = {mixtape::Fp8Saturation::None, mixtape::Fp8Saturation::Finite};
  std::vector<float> src[2] = {std::vector<float>(kChunk), std::vector<float>(kChunk)};  // +, -
  std::vector<uint8_t> out[2][2][2];  // [format][mode][sign]
  for (auto& a : out)
    for (auto& b : a)
      for (auto& c : b) c.resize(kChunk);
  for (uint64_t c; (c = next_chunk.fetch_add(1)) < kChunks / 2;) {
    const uint32_t base = static_cast<uint32_t>(c * kChunk);
    for (uint32_t i = 0; i < kChunk; ++i) {
      src[0][i] = std::bit_cast<float>(base + i);
      src[1][i] = std::bit_cast<float>((base + i) | 0x80000000u);
    }
    for (int f = 0; f < 2; ++f)
      for (int m = 0; m < 2; ++m)
        for (int s = 0; s < 2; ++s) bulks[f](src[s].data(), out[f][m][s].data(), kChunk, modes[m]);
    size_t k[2] = {0, 0};
    if (base < 0x7F800000u)
      for (int f = 0; f < 2; ++f) k[f] = refs[f].start(static_cast<double>(src[0][0]));
    for (uint32_t i = 0; i < kChunk; ++i) {
      const uint32_t mag = base + i;
      for (int f = 0; f < 2; ++f) {
        uint32_t want[2];
        refs[f].expect(mag, k[f], want[0], want[1]);
        for (int m = 0; m < 2; ++m)
          for (int s = 0; s < 2; ++s) {
            const uint32_t w = want[m] | (s ? 0x80u : 0u);
            const uint32_t got_scalar = fmts[f]->scalar(src[s][i], modes[m]);
            const uint32_t got_bulk = out[f][m][s][i];
            const uint64_t input = s ? (mag | 0x80000000u) : mag;
            if (got_scalar != w) fp8_checks[f][m][0].fail(input, got_scalar, w, 1);
            if (got_bulk != w) fp8_checks[f][m][1].fail(input, got_bulk, w, 1);
          }
      }
    }
  }
}

// All 256 patterns widen (scalar, bulk) to the formula's value; NaNs to a NaN of the same sign.
bool check_fp8_widen(const Fp8Format& f, float (*widen)(uint8_t), bool e4m3) {
  std::vector<uint8_t> all(256);
  std::vector<float> wide(256);
  for (uint32_t i = 0; i < 256; ++i) all[i] = static_cast<uint8_t>(i);
  if (e4m3)
    mixtape::convert_e4m3fn_to_float(reinterpret_cast<const mixtape::Float8_e4m3fn*>(all.data()), wide.data(), 256);
  else
    mixtape::convert_e5m2_to_float(reinterpret_cast<const mixtape::Float8_e5m2*>(all.data()), wide.data(), 256);
  uint64_t bad = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const uint32_t mag = b & 0x7Fu;
    const float ws = widen(static_cast<uint8_t>(b));
    bool ok;
    if (mag > f.max_code && !(f.has_inf && mag == f.overflow_code)) {  // NaN
      ok = std::isnan(ws) && std::isnan(wide[b]) && std::signbit(ws) == (b >= 0x80) &&
           std::bit_cast<uint32_t>(ws) == std::bit_cast<uint32_t>(wide[b]);
    } else {
      const double want = mag > f.max_code ? HUGE_VAL : fp8_value(mag, f);  // e5m2's inf
      const double sw = b >= 0x80 ? -want : want;
      ok = static_cast<double>(ws) == sw && static_cast<double>(wide[b]) == sw && std::signbit(ws) == (b >= 0x80);
    }
    if (!ok && bad++ == 0) std::printf("  %s 0x%02x widens to %g (scalar) / %g (bulk)\n", f.name, b, ws, wide[b]);
  }
  std::printf("  %s: 8->32 mismatches %llu\n", f.name, static_cast<unsigned long long>(bad));
  return bad == 0;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  bool run16 = true, run8 = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "fp16-bf16") == 0) {
      run8 = false;
    } else if (std::strcmp(argv[i], "fp8") == 0) {
      run16 = false;
    } else if (std::atoi(argv[i]) > 0) {
      threads = static_cast<unsigned>(std::atoi(argv[i]));
    } else {
      std::fprintf(stderr, "usage: exhaustive_convert [fp16-bf16|fp8] [threads]; got '%s'\n", argv[i]);
      return 2;
    }
  }
  std::printf("exhaustive_convert: bulk backend %s, %u threads, 2^32 fp32 patterns\n",
              mixtape::convert_backend(), threads);

  const auto t0 = std::chrono::steady_clock::now();
  bool ok = true;
  if (run16) {
    std::atomic<uint64_t> next_chunk{0};
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back(sweep, std::ref(next_chunk));
    for (std::thread& th : pool) th.join();
    for (const Check* c : {&half_scalar, &half_bulk, &bf16_scalar, &bf16_bulk}) ok &= c->report();
    ok &= check_16_bit<mixtape::Half>(kFp16, half_widen, half_narrow, mixtape::convert_half_to_float,
                                      mixtape::convert_float_to_half);
    ok &= check_16_bit<mixtape::BFloat16>(kBf16, bf16_widen, bf16_narrow,
                                          mixtape::convert_bfloat16_to_float,
                                          mixtape::convert_float_to_bfloat16);
  }
  if (run8) {
    const Fp8Reference refs[2] = {Fp8Reference(kE4m3), Fp8Reference(kE5m2)};
    std::atomic<uint64_t> next_chunk{0};
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back(sweep_fp8, std::ref(next_chunk), refs);
    for (std::thread& th : pool) th.join();
    for (auto& per_format : fp8_checks)
      for (auto& per_mode : per_format)
        for (const Check& c : per_mode) ok &= c.report();
    ok &= check_fp8_widen(kE4m3, mixtape::e4m3fn_bits_to_float, true);
    ok &= check_fp8_widen(kE5m2, mixtape::e5m2_bits_to_float, false);
  }
  std::printf("%s in %.1f s\n", ok ? "PASS" : "FAIL",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return ok ? 0 : 1;
}
