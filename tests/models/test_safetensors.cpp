// tests/models/test_safetensors.cpp — core/safetensors: round trips of every dtype, interop
// with an independent Python implementation of the format (tests/fixtures/gen_safetensors.py)
// in both directions, one test per way a file can be corrupt, and a fuzz test: no truncation or
// byte flip of a valid file may do anything but load or throw mixtape::Error.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <mixtape/mixtape.h>

#include "core/safetensors.h"
#include "models/test_util.h"

namespace mixtape {
namespace {

namespace fs = std::filesystem;

using test::temp_path;

template <typename T>
Tensor from_values(const std::vector<T>& v, const IntList& shape) {
  Tensor t = Tensor::empty(shape, TensorOptions(dtype_v<T>));
  if (!v.empty()) std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(T));
  return t;
}
template <typename T>
Tensor from_bits(const std::vector<uint16_t>& bits, const IntList& shape) {
  Tensor t = Tensor::empty(shape, TensorOptions(dtype_v<T>));
  std::memcpy(t.data_ptr(), bits.data(), bits.size() * 2);
  return t;
}

// The same tensors as FIXTURE() in gen_safetensors.py (same formulas, same bit patterns).
StateDict fixture_tensors() {
  StateDict sd;
  std::vector<float> w;
  for (int i = 0; i < 24; ++i) w.push_back(static_cast<float>(i * 0.37 - 4.0));
  sd["layer.weight"] = from_values(w, {2, 3, 4});
  std::vector<uint32_t> special = {0x00000000, 0x80000000, 0x3FC00000, 0xC0100000, 0x7F7FFFFF,
                                   0x00000001, 0x7F800000, 0xFF800000, 0x7FC00000, 0x3EAAAAAB};
  Tensor s = Tensor::empty({10}, DType::Float32);
  std::memcpy(s.data_ptr(), special.data(), 40);
  sd["special.f32"] = s;
  std::vector<double> d;
  for (int i = 0; i < 6; ++i) d.push_back(i * 0.1 - 0.25);
  sd["weights.f64"] = from_values(d, {3, 2});
  sd["half"] = from_bits<Half>({0x0000, 0xC000, 0x7BFF, 0x0001, 0x3555}, {5});
  sd["bfloat"] = from_bits<BFloat16>({0x3F80, 0xC040, 0x7F80, 0x0001}, {2, 2});
  sd["step"] = from_values<int64_t>({123456789012345}, {});
  sd["counts"] = from_values<int32_t>({-2147483647 - 1, -1, 0, 2147483647}, {4});
  sd["bytes"] = from_values<uint8_t>({0, 128, 255}, {3});
  Tensor mask = Tensor::empty({2, 3}, DType::Bool);
  const unsigned char mask_bytes[6] = {1, 0, 1, 1, 0, 0};
  std::memcpy(mask.data_ptr(), mask_bytes, 6);
  sd["mask"] = mask;
  sd["empty"] = Tensor::empty({0, 3}, DType::Float32);
  return sd;
}

const SafetensorsMetadata kCppMetadata = {{"format", "pt"}, {"writer", "mixtape"}};

// Same names, dtypes, shapes and bytes (NaN payloads included).
void expect_identical(const StateDict& got, const StateDict& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << name;
    const Tensor& g = it->second;
    EXPECT_EQ(g.dtype(), w.dtype()) << name;
    EXPECT_EQ(g.sizes(), w.sizes()) << name;
    ASSERT_EQ(g.nbytes(), w.nbytes()) << name;
    EXPECT_TRUE(g.is_contiguous()) << name;
    Tensor wc = w.contiguous();
    if (g.nbytes()) {
      EXPECT_EQ(std::memcmp(g.data_ptr(), wc.data_ptr(), g.nbytes()), 0) << name;
    }
  }
}

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(f), {});
}

// A file from a header JSON and data bytes (header written exactly as given, no padding).
std::vector<unsigned char> make_file(const std::string& header, const std::string& data = "") {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  s += header;
  s += data;
  return std::vector<unsigned char>(s.begin(), s.end());
}

std::string load_error(const std::vector<unsigned char>& bytes, const std::string& what = "bad.safetensors") {
  try {
    parse_safetensors(bytes.data(), bytes.size(), what);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Safetensors, RoundTripEveryDtype) {
  StateDict sd = fixture_tensors();
  std::string path = temp_path("roundtrip.safetensors");
  save_safetensors(sd, path, kCppMetadata);
  SafetensorsMetadata md;
  StateDict back = load_safetensors(path, &md);
  expect_identical(back, sd);
  EXPECT_EQ(md, kCppMetadata);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(Safetensors, WritesTheReferenceLayout) {
  std::string path = temp_path("layout.safetensors");
  save_safetensors(fixture_tensors(), path, kCppMetadata);
  auto bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(bytes[i]) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u) << "header padded to 8 bytes";
  EXPECT_EQ(bytes[8], '{');
  std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n));
  EXPECT_EQ(header.substr(header.find_last_of('}') + 1).find_first_not_of(' '), std::string::npos)
      << "padding is spaces";
  // Widest dtype first: the 8-byte tensors start the data, the 1-byte ones end it.
  EXPECT_LT(header.find("\"step\""), header.find("\"layer.weight\""));
  EXPECT_LT(header.find("\"layer.weight\""), header.find("\"half\""));
  EXPECT_LT(header.find("\"half\""), header.find("\"mask\""));
  EXPECT_EQ(header.find("\"__metadata__\""), 1u) << "metadata first";
}

TEST(Safetensors, NonContiguousTensorsAreWrittenRowMajor) {
  Tensor base = arange(0, 12).to(DType::Float32).reshape({3, 4});
  Tensor t = base.t();                              // (4, 3), strides (1, 4)
  Tensor sl = base.slice(1, 1, 4, 2);               // (3, 2), columns 1 and 3
  StateDict sd{{"t", t}, {"slice", sl}};
  std::string path = temp_path("strided.safetensors");
  save_safetensors(sd, path);
  StateDict back = load_safetensors(path);
  EXPECT_EQ(back.at("t").to_vector<double>(), t.to_vector<double>());
  EXPECT_EQ(back.at("slice").to_vector<double>(), (std::vector<double>{1, 3, 5, 7, 9, 11}));
}

TEST(Safetensors, LoadsTheFilePythonWrote) {
  std::string path = test::fixture_path("interop.safetensors");
  ASSERT_TRUE(fs::exists(path)) << path << " missing: run /usr/bin/python3 tests/fixtures/gen_safetensors.py";
  SafetensorsMetadata md;
  StateDict sd = load_safetensors(path, &md);
  expect_identical(sd, fixture_tensors());
  EXPECT_EQ(md, (SafetensorsMetadata{{"format", "pt"}, {"writer", "gen_safetensors.py"}}));
  // And the values read as numbers, not only as bytes.
  EXPECT_EQ(sd.at("step").item<int64_t>(), 123456789012345);
  EXPECT_EQ(sd.at("half").to_vector<double>()[2], 65504.0);
  EXPECT_EQ(sd.at("bfloat").to_vector<double>()[1], -3.0);
  EXPECT_EQ(sd.at("mask").to_vector<double>(), (std::vector<double>{1, 0, 1, 1, 0, 0}));
}

TEST(Safetensors, PythonReadsTheFileWeWrote) {
  const std::string python = "/usr/bin/python3";
  if (!fs::exists(python)) GTEST_SKIP() << python << " not found: cannot run the independent Python reader";
  std::string path = temp_path("for_python.safetensors");
  save_safetensors(fixture_tensors(), path, kCppMetadata);
  std::string cmd = python + " " + test::fixture_path("gen_safetensors.py") + " --verify " + path + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  int status = ::pclose(p);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find(": OK"), std::string::npos) << out;
}

TEST(Safetensors, EmptyStateDictAndNoMetadata) {
  std::string path = temp_path("empty.safetensors");
  save_safetensors({}, path);
  auto bytes = read_bytes(path);
  EXPECT_EQ(bytes.size(), 16u);  // 8 + "{}" padded to 8
  SafetensorsMetadata md{{"stale", "x"}};
  EXPECT_TRUE(load_safetensors(path, &md).empty());
  EXPECT_TRUE(md.empty());
}

TEST(Safetensors, SaveRefusesWhatItCannotWrite) {
  auto err = [](const StateDict& sd, const std::string& path) {
    try {
      save_safetensors(sd, path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(err({{"x", Tensor()}}, temp_path("u.safetensors")).find("'x' is undefined"), std::string::npos);
  EXPECT_NE(err({{"__metadata__", zeros({1})}}, temp_path("m.safetensors")).find("reserved"), std::string::npos);
  EXPECT_NE(err({{"", zeros({1})}}, temp_path("e.safetensors")).find("empty name"), std::string::npos);
  EXPECT_NE(err({{"x", zeros({1})}}, "/nonexistent-dir/x.safetensors").find("cannot open"), std::string::npos);
}

// ---- corrupt files: each names the file, the tensor and the byte offset ----

TEST(Safetensors, ErrorTruncatedLength) {
  std::vector<unsigned char> f = {1, 0, 0};
  std::string e = load_error(f);
  EXPECT_NE(e.find("bad.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("too short"), std::string::npos) << e;
}

TEST(Safetensors, ErrorHeaderLengthBeyondFile) {
  auto f = make_file("{}");
  f[0] = 200;
  std::string e = load_error(f);
  EXPECT_NE(e.find("header length 200"), std::string::npos) << e;
  EXPECT_NE(e.find("runs past the end"), std::string::npos) << e;
  f[0] = 0xFF;
  std::fill(f.begin(), f.begin() + 8, 0xFF);  // 2^64 - 1: no overflow in the check
  EXPECT_NE(load_error(f).find("runs past the end"), std::string::npos);
}

TEST(Safetensors, ErrorBadJson) {
  std::string e = load_error(make_file("{\"a\": {\"dtype\": \"F32\",, }}"));
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;
  EXPECT_NE(e.find("file byte"), std::string::npos) << e;
  EXPECT_NE(load_error(make_file("[1, 2]   ")).find("does not start with '{'"), std::string::npos);
  EXPECT_NE(load_error(make_file("{\"a\": 1} trailing")).find("not valid JSON"), std::string::npos);
  std::string deep = "{\"a\": " + std::string(5000, '[') + std::string(5000, ']') + "}";
  EXPECT_NE(load_error(make_file(deep)).find("nested deeper"), std::string::npos);
}

TEST(Safetensors, ErrorUnknownDtype) {
  std::string e = load_error(make_file(R"({"w": {"dtype": "I8", "shape": [2], "data_offsets": [0, 2]}})", "ab"));
  EXPECT_NE(e.find("tensor 'w'"), std::string::npos) << e;
  EXPECT_NE(e.find("unsupported dtype \"I8\""), std::string::npos) << e;
}

TEST(Safetensors, ErrorOffsetsOutOfRange) {
  std::string e = load_error(make_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", "abcd"));
  EXPECT_NE(e.find("tensor 'w'"), std::string::npos) << e;
  EXPECT_NE(e.find("run past the end"), std::string::npos) << e;
  EXPECT_NE(e.find("file byte"), std::string::npos) << e;
  // Offsets near 2^64 must not wrap around in the arithmetic.
  std::string big = R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [18446744073709551615, 18446744073709551615]}})";
  EXPECT_NE(load_error(make_file(big, "a")).find("run past the end"), std::string::npos);
}

TEST(Safetensors, ErrorOffsetsDoNotMatchShape) {
  std::string e = load_error(make_file(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", "abcdefgh"));
  EXPECT_NE(e.find("tensor 'w'"), std::string::npos) << e;
  EXPECT_NE(e.find("hold 8 bytes but shape [3] of F32 needs 12"), std::string::npos) << e;
  EXPECT_NE(e.find("file byte"), std::string::npos) << e;
  std::string reversed = R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}})";
  EXPECT_NE(load_error(make_file(reversed, "abcd")).find("end before they begin"), std::string::npos);
}

TEST(Safetensors, ErrorOverlappingTensors) {
  std::string h = R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                      "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})";
  std::string e = load_error(make_file(h, "abcdef"));
  EXPECT_NE(e.find("tensor 'b'"), std::string::npos) << e;
  EXPECT_NE(e.find("overlaps tensor 'a'"), std::string::npos) << e;
  EXPECT_NE(e.find("file byte"), std::string::npos) << e;
}

TEST(Safetensors, ErrorGapsAndLeftoverBytes) {
  std::string gap = R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                        "b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]}})";
  std::string e = load_error(make_file(gap, "abcdef"));
  EXPECT_NE(e.find("tensor 'b'"), std::string::npos) << e;
  EXPECT_NE(e.find("gap of 2"), std::string::npos) << e;
  std::string tail = R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})";
  e = load_error(make_file(tail, "abcd"));
  EXPECT_NE(e.find("2 bytes at the end of the file"), std::string::npos) << e;
  std::string late = R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}})";
  EXPECT_NE(load_error(make_file(late, "abcd")).find("gap of 2"), std::string::npos);
}

TEST(Safetensors, ErrorMalformedEntries) {
  auto has = [](const std::string& header, const std::string& data, const std::string& text) {
    std::string e = load_error(make_file(header, data));
    EXPECT_NE(e.find(text), std::string::npos) << "header " << header << "\n error: " << e;
  };
  has(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})", "", "non-negative integers");
  has(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 0]}})", "", "non-negative integers");
  has(R"({"w": {"dtype": "F32", "shape": "2", "data_offsets": [0, 0]}})", "", "must be an array");
  has(R"({"w": {"dtype": "F32", "data_offsets": [0, 0]}})", "", "no \"shape\"");
  has(R"({"w": {"dtype": 3, "shape": [], "data_offsets": [0, 4]}})", "abcd", "\"dtype\" must be a string");
  has(R"({"w": {"dtype": "F32", "shape": [], "data_offsets": [0]}})", "", "[begin, end]");
  has(R"({"w": [1, 2]})", "", "must be an object");
  has(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 0], "data_offsets": [0, 0]}})", "",
      "more elements than int64");
  has(R"({"w": {"dtype": "F64", "shape": [4611686018427387904], "data_offsets": [0, 0]}})", "", "overflows");
  has(R"({"__metadata__": {"k": 1}})", "", "must be a string");
  has(R"({"__metadata__": [1]})", "", "object of strings");
  has(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
          "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})", "ab", "appears twice");
  has(R"({"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}})", std::string("\x01\x00\x02", 3),
      "BOOL byte 2 is neither 0 nor 1");
}

TEST(Safetensors, MissingFileNamesThePath) {
  try {
    load_safetensors("/nonexistent/model.safetensors");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.safetensors"), std::string::npos);
  }
}

// ---- fuzz: truncations and byte flips of a valid file load or throw Error, never crash ----

TEST(Safetensors, FuzzTruncationsAlwaysThrow) {
  std::string path = temp_path("fuzz.safetensors");
  save_safetensors(fixture_tensors(), path, kCppMetadata);
  auto good = read_bytes(path);
  ASSERT_NO_THROW(parse_safetensors(good.data(), good.size(), "good"));
  for (size_t len = 0; len < good.size(); ++len) {
    std::vector<unsigned char> cut(good.begin(), good.begin() + static_cast<long>(len));
    EXPECT_THROW(parse_safetensors(cut.data(), cut.size(), "cut"), Error) << "prefix of " << len << " bytes";
  }
}

TEST(Safetensors, FuzzByteFlipsLoadOrThrow) {
  std::string path = temp_path("fuzz2.safetensors");
  save_safetensors(fixture_tensors(), path, kCppMetadata);
  auto good = read_bytes(path);
  int loaded = 0, rejected = 0;
  auto attempt = [&](const std::vector<unsigned char>& f) {
    try {
      StateDict sd = parse_safetensors(f.data(), f.size(), "fuzz");
      for (auto& [n, t] : sd) (void)t.to_vector<double>();  // touch every value
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
  };
  // Every byte, with several masks.
  for (size_t i = 0; i < good.size(); ++i)
    for (unsigned char mask : {0x01, 0x02, 0x10, 0x80, 0xFF}) {
      auto f = good;
      f[i] ^= mask;
      attempt(f);
    }
  // Random multi-byte mutations, insertions and deletions (seeded: the same cases every run).
  std::mt19937 rng(12345);
  for (int k = 0; k < 3000; ++k) {
    auto f = good;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !f.empty(); ++e) {
      size_t pos = rng() % f.size();
      switch (rng() % 3) {
        case 0: f[pos] = static_cast<unsigned char>(rng()); break;
        case 1: f.insert(f.begin() + static_cast<long>(pos), static_cast<unsigned char>(rng())); break;
        default: f.erase(f.begin() + static_cast<long>(pos)); break;
      }
    }
    attempt(f);
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(loaded, 0);  // flips inside the data (or in padding) leave a valid file
}

}  // namespace
}  // namespace mixtape
