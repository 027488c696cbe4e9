// tests/optim/optim_test_util.h — what the optim tests share: the torch fixture
// (tests/fixtures/optim_reference.json, written by tests/fixtures/gen_optim.py), exact decoding of
// its values, and bit-level tensor comparisons.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mixtape/mixtape.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"

namespace mixtape::testing {

using nlohmann::json;

inline std::string optim_fixture_path() {
  std::string here = __FILE__;
  return here.substr(0, here.find_last_of("/\\")) + "/../fixtures/optim_reference.json";
}

// The parsed fixture; an empty document (and `error` set) when it cannot be read.
struct OptimFixture {
  json doc;
  std::string error;
};
inline const OptimFixture& optim_fixture() {
  static const OptimFixture f = [] {
    OptimFixture r;
    std::ifstream in(optim_fixture_path());
    if (!in) {
      r.error = "cannot open " + optim_fixture_path() + " (run /usr/bin/python3 tests/fixtures/gen_optim.py)";
      return r;
    }
    try {
      r.doc = json::parse(in);
    } catch (const std::exception& e) {
      r.error = "cannot parse " + optim_fixture_path() + ": " + e.what();
    }
    return r;
  }();
  return f;
}

inline DType dtype_of_name(const std::string& s) {
  if (s == "f64") return DType::Float64;
  if (s == "f32") return DType::Float32;
  if (s == "f16") return DType::Float16;
  if (s == "bf16") return DType::BFloat16;
  ADD_FAILURE() << "unknown dtype " << s;
  return DType::Float32;
}

inline double hex_to_double(const json& v) { return std::strtod(v.get<std::string>().c_str(), nullptr); }

// A tensor from the fixture's exact encoding (hex floats, or 16-bit patterns).
inline Tensor decode(const json& e) {
  const DType dt = dtype_of_name(e["dtype"].get<std::string>());
  IntList shape;
  for (auto& s : e["shape"]) shape.push_back(s.get<int64_t>());
  Tensor t = Tensor::empty(shape, TensorOptions(dt));
  const json& data = e["data"];
  for (size_t i = 0; i < data.size(); ++i) {
    if (dt == DType::Float64) {
      t.data_ptr<double>()[i] = hex_to_double(data[i]);
    } else if (dt == DType::Float32) {
      t.data_ptr<float>()[i] = static_cast<float>(hex_to_double(data[i]));
    } else {
      uint16_t b = static_cast<uint16_t>(data[i].get<int>());
      std::memcpy(static_cast<char*>(t.data_ptr()) + 2 * i, &b, 2);
    }
  }
  return t;
}

// The raw bit patterns of a contiguous CPU tensor's elements, widened to 64 bits.
inline std::vector<uint64_t> bits_of(const Tensor& t0) {
  Tensor t = t0.contiguous();
  std::vector<uint64_t> out(static_cast<size_t>(t.numel()));
  const size_t es = t.element_size();
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t b = 0;
    std::memcpy(&b, static_cast<const char*>(t.data_ptr()) + i * es, es);
    out[i] = b;
  }
  return out;
}

// Bit-exact equality, with the first mismatches named.
inline ::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.sizes() != want.sizes())
    return ::testing::AssertionFailure() << "got " << got.describe() << ", want " << want.describe();
  auto g = bits_of(got), w = bits_of(want);
  int shown = 0;
  size_t bad = 0;
  auto r = ::testing::AssertionFailure();
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i]) continue;
    ++bad;
    if (shown++ < 4)
      r << "\n  element " << i << ": got " << get_element(got, static_cast<int64_t>(i)) << " (0x" << std::hex << g[i]
        << "), want " << get_element(want, static_cast<int64_t>(i)) << " (0x" << w[i] << std::dec << ")";
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return r << "\n  " << bad << " of " << g.size() << " elements differ";
}

inline uint16_t half_bits(const Tensor& t, int64_t i = 0) {
  uint16_t b;
  std::memcpy(&b, static_cast<const char*>(t.contiguous().data_ptr()) + 2 * i, 2);
  return b;
}
inline uint32_t float_bits(const Tensor& t, int64_t i = 0) {
  uint32_t b;
  std::memcpy(&b, static_cast<const char*>(t.contiguous().data_ptr()) + 4 * i, 4);
  return b;
}

// A leaf parameter holding `values`.
inline Tensor param_from(const std::vector<double>& values, const IntList& shape, DType dt) {
  Tensor t = tensor(values, shape, TensorOptions(dt));
  t.requires_grad_(true);
  return t;
}

// Expects `fn` to throw mixtape::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<const char*> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << *parts.begin() << "'";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nmissing: " << p;
  }
}

}  // namespace mixtape::testing
