// tests/core/test_safetensors_hardening.cpp — the safetensors reader's located errors: the
// checks on a header entry (which the JSON DOM cannot place exactly) name the header's byte
// range, so every refusal says where in the file to look. The per-check behaviour is in
// tests/models/test_safetensors.cpp; this file pins the location part the fuzzer enforces.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "common/error_of.h"
#include "core/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

namespace mixtape {
namespace {

using mixtape::testing::error_of;

// A file with `header` (space-padded to a multiple of 8) and `data`.
std::string file(std::string header, const std::string& data = "") {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((uint64_t(header.size()) >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string parse_error(const std::string& bytes) {
  return error_of([&] { parse_safetensors(bytes.data(), bytes.size(), "st"); });
}

TEST(SafetensorsHardening, EveryEntryErrorNamesTheHeaderBytes) {
  const char* bad_entries[] = {
      R"({"w": 1})",
      R"({"w": {"shape": [1], "data_offsets": [0, 4]}})",
      R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
      R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})",
      R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 400]}})",
      R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})",
      R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})",
      R"({"__metadata__": {"k": 1}})",
      R"({"__metadata__": [1]})",
  };
  for (const char* h : bad_entries) {
    std::string bytes = file(h, "abcd");
    std::string e = parse_error(bytes);
    EXPECT_TRUE(fuzz::names_location(e, "st")) << h << "\n  " << e;
    EXPECT_NE(e.find("bytes 8-"), std::string::npos) << e;
  }
}

TEST(SafetensorsHardening, NumberOverflowInTheHeaderIsAnError) {
  // nlohmann throws out_of_range (not parse_error) for a number past a double's range: it used
  // to escape as a foreign exception type (the first fuzz_safetensors crasher).
  std::string e = parse_error(file(R"({"w": {"dtype": "F32", "shape": [5e9223], "data_offsets": [0, 4]}})", "abcd"));
  EXPECT_NE(e.find("header JSON cannot be read (bytes 8-"), std::string::npos) << e;
  EXPECT_NE(e.find("number overflow"), std::string::npos) << e;
}

TEST(SafetensorsHardening, NamesWithControlCharactersKeepTheLocation) {
  // A tensor name, metadata key or dtype may hold any character JSON can escape; a NUL copied
  // into the message ended what() there, before the location (a fuzz_safetensors finding).
  // They are shown with JSON's escapes instead.
  const char* headers[] = {
      R"({"a\u0000b": 1})",
      R"({"a\u0000b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a\u0000b": 2})",
      R"({"w": {"dtype": "F\u000032", "shape": [1], "data_offsets": [0, 4]}})",
      R"({"__metadata__": {"k\u0000": 1}})",
      R"({"a\u0000": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},)"
      R"( "b\n": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}})",
  };
  for (const char* h : headers) {
    std::string e = parse_error(file(h, "abcd"));
    EXPECT_TRUE(fuzz::names_location(e, "st")) << h << "\n  " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  EXPECT_NE(parse_error(file(headers[0], "abcd")).find("tensor 'a\\u0000b' (header entry in bytes 8-"),
            std::string::npos);
  EXPECT_NE(parse_error(file(headers[4], "abcd"))
                .find("tensor 'b\\n' (data_offsets [2, 4]) overlaps tensor 'a\\u0000'"),
            std::string::npos);
}

TEST(SafetensorsHardening, LengthPrefixErrorsNameBytesZeroToSeven) {
  std::string huge(8, '\0');
  huge[4] = 1;  // 2^32: past the end of the file
  EXPECT_NE(parse_error(huge + "{}").find("(bytes 0-7) runs past the end"), std::string::npos);
  EXPECT_NE(parse_error("\x01\x02").find("at byte 0"), std::string::npos);
}

TEST(SafetensorsHardening, OverlapAndOrderAreCheckedInFileOrder) {
  // Listed out of order but tiling the data exactly: loads.
  std::string ok = file(R"({"b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]},)"
                        R"( "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})",
                        "abcd");
  EXPECT_EQ(parse_error(ok), "(no error)");
  std::string overlap = file(R"({"a": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},)"
                             R"( "b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}})",
                             "abcd");
  std::string e = parse_error(overlap);
  EXPECT_NE(e.find("overlaps tensor 'a'"), std::string::npos) << e;
  EXPECT_TRUE(fuzz::names_location(e, "st")) << e;
}

}  // namespace
}  // namespace mixtape
