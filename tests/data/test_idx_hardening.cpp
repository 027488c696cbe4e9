// tests/data/test_idx_hardening.cpp — one test per check of the IDX reader (data/idx.h) against
// hostile input: truncated headers, size products that overflow, lengths that disagree, and
// gzip streams that are cut, corrupt, followed by garbage or that inflate past their promise.
// Every error must name the source and a byte offset.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/error_of.h"
#include "data/idx.h"
#include "tests/fuzz/fuzz_util.h"

namespace mixtape::data {
namespace {

using mixtape::testing::error_of;

std::string idx_header(uint8_t type, std::initializer_list<uint32_t> sizes) {
  std::string h = {0, 0, static_cast<char>(type), static_cast<char>(sizes.size())};
  for (uint32_t s : sizes)
    for (int b = 3; b >= 0; --b) h.push_back(static_cast<char>(s >> (8 * b)));
  return h;
}

std::string gzip(const std::string& raw) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, raw.size()) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// The message read_idx_bytes throws for `bytes` ("(no error)" when it loads); it must say where.
std::string idx_error(const std::string& bytes) {
  std::string e = error_of([&] { read_idx_bytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "in.idx"); });
  if (e != "(no error)") {
    EXPECT_TRUE(fuzz::names_location(e, "in.idx")) << e;
  }
  return e;
}

#define EXPECT_CONTAINS(haystack, needle)                                        \
  do {                                                                           \
    std::string h_ = (haystack);                                                 \
    EXPECT_NE(h_.find(needle), std::string::npos) << "in: " << h_;               \
  } while (0)

const std::string kValid = idx_header(0x08, {2, 3}) + "abcdef";

TEST(IdxHardening, ValidPlainAndGzipLoadAlike) {
  for (const std::string& bytes : {kValid, gzip(kValid)}) {
    Tensor t = read_idx_bytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "in.idx");
    ASSERT_EQ(t.sizes(), IntList({2, 3}));
    EXPECT_EQ(std::memcmp(t.data_ptr(), "abcdef", 6), 0);
  }
}

TEST(IdxHardening, TruncatedHeader) {
  EXPECT_CONTAINS(idx_error(""), "too short for the 4-byte magic (ends at byte 0)");
  EXPECT_CONTAINS(idx_error(kValid.substr(0, 3)), "ends at byte 3");
  EXPECT_CONTAINS(idx_error(kValid.substr(0, 7)), "ends at byte 7 inside the dimension sizes (bytes 4-11)");
  EXPECT_CONTAINS(idx_error(gzip(kValid.substr(0, 6))), "ends at byte 6 inside the dimension sizes");
}

TEST(IdxHardening, BadMagicTypeAndRank) {
  EXPECT_CONTAINS(idx_error(std::string("\x00\x01\x08\x01", 4)), "bad magic at offset 0");
  EXPECT_CONTAINS(idx_error(std::string("\x00\x00\x0B\x01", 4)), "unsupported element type 0xb at offset 2");
  EXPECT_CONTAINS(idx_error(std::string("\x00\x00\x08\x00", 4)), "declares 0 dimensions at offset 3");
  EXPECT_CONTAINS(idx_error(std::string("\x00\x00\x08\x09", 4)), "declares 9 dimensions at offset 3");
}

TEST(IdxHardening, SizeProductOverflowIsRefusedBeforeAllocating) {
  // 2^16 * 2^16 * 2^16 = 2^48 elements: refused at the third size, offset 12.
  EXPECT_CONTAINS(idx_error(idx_header(0x08, {65536, 65536, 65536})), "absurd sizes: dimension 2 (65536, at offset 12)");
  // 8 sizes of 2^32 - 1 would wrap a 64-bit product many times over.
  EXPECT_CONTAINS(idx_error(idx_header(0x0E, {~0u, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u})), "at offset 8");
  // A zero size makes the tensor empty but does not excuse the others: their product would
  // overflow the strides.
  EXPECT_CONTAINS(idx_error(idx_header(0x08, {0, ~0u, ~0u, ~0u})), "absurd sizes: dimension 2 (4294967295, at offset 12)");
  // Empty but sane: loads.
  EXPECT_EQ(idx_error(idx_header(0x08, {0, 28, 28})), "(no error)");
}

TEST(IdxHardening, DataLengthMustMatchTheSizes) {
  EXPECT_CONTAINS(idx_error(kValid + "x"), "(6 data bytes from offset 12) but holds 7 data bytes");
  EXPECT_CONTAINS(idx_error(kValid.substr(0, 14)), "but holds 2 data bytes");
  EXPECT_CONTAINS(idx_error(idx_header(0x0C, {3}) + "12345678"), "(12 data bytes from offset 8) but holds 8");
}

TEST(IdxHardening, TruncatedAndCorruptGzip) {
  std::string gz = gzip(kValid);
  EXPECT_CONTAINS(idx_error(gz.substr(0, gz.size() - 3)), "truncated gzip data: the stream ends at byte");
  EXPECT_CONTAINS(idx_error(gz.substr(0, 12)), "gzip");
  std::string bad = gz;
  bad[3] = static_cast<char>(0xE0);  // reserved FLG bits
  EXPECT_CONTAINS(idx_error(bad), "corrupt gzip data at compressed byte");
  std::string crc = gz;
  crc[crc.size() - 6] ^= 0x55;  // the CRC-32 trailer no longer matches
  EXPECT_CONTAINS(idx_error(crc), "corrupt gzip data at compressed byte");
}

TEST(IdxHardening, GzipMembersAndTrailingBytes) {
  // Two members concatenated (`cat a.gz b.gz`) inflate to their concatenation, like gzip -d.
  std::string two = gzip(kValid.substr(0, 10)) + gzip(kValid.substr(10));
  EXPECT_EQ(idx_error(two), "(no error)");
  std::string gz = gzip(kValid);
  EXPECT_CONTAINS(idx_error(gz + "junk"), "4 bytes after the end of the gzip stream, at byte " + std::to_string(gz.size()));
}

TEST(IdxHardening, GzipBombStopsAtTheHeadersPromise) {
  // The header promises 6 bytes of data; the stream holds 4 MiB of zeros after them.
  std::string bomb = gzip(kValid + std::string(4 << 20, '\0'));
  ASSERT_LT(bomb.size(), 8u << 10);
  EXPECT_CONTAINS(idx_error(bomb), "gzip data inflates past 18 bytes (the most its header allows)");
  // A header promising more than deflate can produce from the file's size is refused at once.
  EXPECT_CONTAINS(idx_error(gzip(idx_header(0x08, {1u << 20, 1u << 10}))), "can inflate to at most");
}

TEST(IdxHardening, PathEntryPointNamesTheFile) {
  auto path = std::filesystem::temp_directory_path() / ("mixtape_idx_hardening_" + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary) << kValid.substr(0, 13);
  std::string e = error_of([&] { read_idx(path.string()); });
  EXPECT_TRUE(fuzz::names_location(e, path.string())) << e;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mixtape::data
