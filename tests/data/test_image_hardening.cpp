// tests/data/test_image_hardening.cpp — decode_image (data/image_folder.h) on the committed seed
// images (tests/fuzz/corpus/image) and on their damaged copies: unknown signatures, header
// dimensions over the limits (DecodeOptions::max_pixels), truncated PNG/JPEG/BMP, BMP headers
// stb_image would misread, top-down BMPs. Every error names the source and a byte.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/error_of.h"
#include "data/image_folder.h"
#include "tests/fuzz/fuzz_util.h"

namespace fs = std::filesystem;

namespace mixtape::data {
namespace {

using mixtape::testing::error_of;

const fs::path kSeeds = fs::path(__FILE__).parent_path().parent_path() / "fuzz" / "corpus" / "image";

std::string seed(const std::string& name) {
  std::ifstream f(kSeeds / name, std::ios::binary);
  EXPECT_TRUE(f.good()) << (kSeeds / name);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

Tensor decode(const std::string& bytes, int channels, const DecodeOptions& options = {}) {
  return decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), channels, "img", options);
}

// The error decode_image throws ("(no error)" if none); it must name the source and a byte.
std::string image_error(const std::string& bytes, int channels = 1, const DecodeOptions& options = {}) {
  std::string e = error_of([&] { decode(bytes, channels, options); });
  if (e != "(no error)") {
    EXPECT_TRUE(fuzz::names_location(e, "img")) << e;
  }
  return e;
}

void put_be32(std::string& s, size_t at, uint32_t v) {
  for (int b = 0; b < 4; ++b) s[at + b] = static_cast<char>(v >> (8 * (3 - b)));
}
void put_le32(std::string& s, size_t at, uint32_t v) {
  for (int b = 0; b < 4; ++b) s[at + b] = static_cast<char>(v >> (8 * b));
}

#define EXPECT_CONTAINS(haystack, needle)                          \
  do {                                                             \
    std::string h_ = (haystack);                                   \
    EXPECT_NE(h_.find(needle), std::string::npos) << "in: " << h_; \
  } while (0)

TEST(ImageHardening, SeedsDecodeToCHW) {
  // Seeds are w x h with pixel (x, y) = (40x + 20y) % 256 (tests/fuzz/make_corpus.py).
  Tensor g = decode(seed("gray.png"), 1);
  ASSERT_EQ(g.sizes(), IntList({1, 3, 4}));
  EXPECT_EQ(g.data_ptr<uint8_t>()[1 * 4 + 2], 100);  // (x=2, y=1)
  EXPECT_EQ(decode(seed("gray.png"), 3).sizes(), IntList({3, 3, 4}));
  Tensor rgb = decode(seed("rgb.png"), 3);
  ASSERT_EQ(rgb.sizes(), IntList({3, 2, 3}));
  EXPECT_EQ(rgb.data_ptr<uint8_t>()[2 * 6 + 1 * 3 + 1], 60);  // blue plane, (x=1, y=1)
  EXPECT_EQ(decode(seed("gray.jpg"), 1).sizes(), IntList({1, 8, 8}));
  EXPECT_EQ(decode(seed("rgb_progressive.jpg"), 3).sizes(), IntList({3, 7, 9}));
  Tensor bmp = decode(seed("rgb.bmp"), 3);
  ASSERT_EQ(bmp.sizes(), IntList({3, 2, 3}));
  EXPECT_EQ(bmp.data_ptr<uint8_t>()[1 * 3 + 2], 100);  // red plane, (x=2, y=1)
  EXPECT_EQ(decode(seed("gray.bmp"), 1).sizes(), IntList({1, 2, 5}));
}

TEST(ImageHardening, UnknownSignatureAndBadChannels) {
  EXPECT_CONTAINS(image_error(""), "cannot decode 'img' (0 bytes): no PNG, JPEG or BMP signature at byte 0");
  EXPECT_CONTAINS(image_error("GIF89a......"), "no PNG, JPEG or BMP signature at byte 0");
  // PNM (P5 gray, P6 RGB) is not a format decode_image reads: stb's PNM decoder is not built.
  EXPECT_CONTAINS(image_error(std::string("P5\n4 3\n255\n") + std::string(12, '\x7f')),
                  "no PNG, JPEG or BMP signature");
  EXPECT_CONTAINS(image_error(std::string("P6\n8195 7170\n65535\n")), "no PNG, JPEG or BMP signature");
  EXPECT_CONTAINS(image_error(seed("gray.png").substr(0, 7)), "signature at byte 0");
  // A bad argument, not bad bytes: no offset to name.
  EXPECT_CONTAINS(error_of([] { decode(seed("gray.png"), 2); }), "channels must be 1 or 3, got 2");
}

TEST(ImageHardening, DimensionsOverTheLimitAreRefusedFromTheHeader) {
  std::string png = seed("gray.png");
  put_be32(png, 16, 10000);  // IHDR width and height: 10^8 pixels > 2^26
  put_be32(png, 20, 10000);
  EXPECT_CONTAINS(image_error(png), "'img' declares 10000x10000 = 100000000 pixels (header at byte 16), over the "
                                    "limit of 67108864 pixels (DecodeOptions::max_pixels)");
  // Over the per-side limit (stb's header reader would refuse it as an "unknown image type"):
  // refused by the limit, with the declared size.
  put_be32(png, 16, 20000);
  EXPECT_CONTAINS(image_error(png), "'img' declares 20000x10000 pixels (header at byte 16), over the limit of 16384 "
                                    "pixels per side");
  put_be32(png, 16, 16385);
  put_be32(png, 20, 3);
  EXPECT_CONTAINS(image_error(png), "'img' declares 16385x3 pixels (header at byte 16), over the limit of 16384");
  put_be32(png, 16, 0);
  EXPECT_CONTAINS(image_error(png), "'img' declares 0x3 pixels (header at byte 16): no image");
  // The same for a JPEG's frame header (height, then width, 16 bits each, after the precision).
  std::string jpg = seed("gray.jpg");
  size_t sof = 2;
  while (!(static_cast<uint8_t>(jpg[sof]) == 0xFF && static_cast<uint8_t>(jpg[sof + 1]) == 0xC0)) ++sof;
  jpg[sof + 7] = static_cast<char>(0x50), jpg[sof + 8] = 0;  // width 20480
  EXPECT_CONTAINS(image_error(jpg), "'img' declares 20480x8 pixels (header at byte " + std::to_string(sof) +
                                        "), over the limit of 16384 pixels per side");
}

TEST(ImageHardening, JpegHuffmanTableWithTooManyCodesIsRefused) {
  // stb_image 2.27 would write past its 257-entry size table (the first fuzz_image crasher).
  std::string jpg = seed("gray.jpg");
  size_t dht = jpg.find("\xFF\xC4");
  ASSERT_NE(dht, std::string::npos);
  for (size_t i = 0; i < 16; ++i) jpg[dht + 5 + i] = static_cast<char>(0xFF);  // 16 x 255 code counts
  EXPECT_CONTAINS(image_error(jpg), "JPEG Huffman table declares 4080 codes (at most 256) at byte " + std::to_string(dht + 4));
}

TEST(ImageHardening, JpegDcSymbolOver15IsRefused) {
  // stb_image 2.27 would read 255 bits for it: past its mask table, shifts by 32 or more.
  std::string jpg = seed("gray.jpg");
  size_t dht = jpg.find("\xFF\xC4");
  ASSERT_NE(dht, std::string::npos);
  ASSERT_EQ(jpg[dht + 4], 0x00) << "the seed's first DHT is DC table 0";
  jpg[dht + 4 + 17] = static_cast<char>(0xFF);  // its first symbol
  EXPECT_CONTAINS(image_error(jpg), "DC Huffman symbol 255 (at most 15) at byte " + std::to_string(dht + 21));
}

TEST(ImageHardening, JpegScanWithUndefinedTablesIsRefused) {
  // stb_image 2.27 would decode with the uninitialised memory of a table no DHT/DQT defined.
  std::string jpg = seed("gray.jpg");
  size_t sos = jpg.find("\xFF\xDA");
  ASSERT_NE(sos, std::string::npos);
  std::string bad = jpg;
  bad[sos + 6] = 0x11;  // the component's DC/AC selectors: table 1, which the file never defines
  EXPECT_CONTAINS(image_error(bad), "scan uses DC Huffman table 1 before any DHT defines it at byte " + std::to_string(sos));
  bad = jpg;
  size_t sof = bad.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  bad[sof + 12] = 3;  // the frame component's quantisation table: 3, never defined
  EXPECT_CONTAINS(image_error(bad), "scan needs quantisation table 3, which no DQT defines");
}

TEST(ImageHardening, PngChunkLongerThanTheFileIsRefusedBeforeAllocating) {
  // stb_image would allocate the declared 2 GB for the IDAT before finding it missing.
  std::string png = seed("gray.png");
  size_t idat = png.find("IDAT") - 4;
  put_be32(png, idat, 0x7FFFFFF0u);
  EXPECT_CONTAINS(image_error(png), "PNG chunk at byte " + std::to_string(idat) + " declares 2147483632 data bytes");
}

TEST(ImageHardening, PngEmptyFirstIdatIsRefused) {
  // stb_image 2.27 would memcpy into a null buffer (undefined behaviour, caught by UBSan).
  std::string png = seed("gray.png");
  size_t idat = png.find("IDAT") - 4;
  std::string empty_idat("\0\0\0\0IDAT\x35\xAF\x06\x1E", 12);
  png.insert(idat, empty_idat);
  EXPECT_CONTAINS(image_error(png), "empty IDAT chunk at byte " + std::to_string(idat));
}

TEST(ImageHardening, DimensionsTheDataCannotFillAreRefused) {
  // Within the pixel limit, but far more pixels than the file's compressed data can code:
  // stb_image would allocate the image and spend seconds decoding zero padding.
  std::string png = seed("gray.png");
  put_be32(png, 16, 8000);
  put_be32(png, 20, 8000);
  EXPECT_CONTAINS(image_error(png), "truncated PNG: 8000x8000 (header at byte 16) needs 64000000 bytes of pixel data");
  std::string jpg = seed("gray.jpg");
  size_t sof = jpg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  jpg[sof + 5] = 0x1F;  // height 8 -> 0x1F08 = 7944
  EXPECT_CONTAINS(image_error(jpg), "truncated JPEG: 8x7944 (frame at byte " + std::to_string(sof) + ") has 993 blocks");
}

TEST(ImageHardening, PixelLimitIsAnOptionAndAnImageAtTheLimitDecodes) {
  // gray.png is 4x3 = 12 pixels: 12 allowed decodes it, 11 refuses it from the header, naming
  // the declared size and the limit. The same holds for JPEG (8x8) and BMP (5x2).
  std::string png = seed("gray.png");
  EXPECT_EQ(decode(png, 1, {.max_pixels = 12}).sizes(), IntList({1, 3, 4}));
  EXPECT_CONTAINS(image_error(png, 1, {.max_pixels = 11}),
                  "'img' declares 4x3 = 12 pixels (header at byte 16), over the limit of 11 pixels "
                  "(DecodeOptions::max_pixels)");
  EXPECT_EQ(decode(seed("gray.jpg"), 1, {.max_pixels = 64}).sizes(), IntList({1, 8, 8}));
  EXPECT_CONTAINS(image_error(seed("gray.jpg"), 1, {.max_pixels = 63}), "declares 8x8 = 64 pixels");
  EXPECT_EQ(decode(seed("gray.bmp"), 1, {.max_pixels = 10}).sizes(), IntList({1, 2, 5}));
  EXPECT_CONTAINS(image_error(seed("gray.bmp"), 1, {.max_pixels = 9}),
                  "declares 5x2 = 10 pixels (header at byte 18), over the limit of 9 pixels");
  // The default, 2^26: 8192x8192 passes the limit (and is then refused because this file's data
  // cannot fill it), one more row does not.
  put_be32(png, 16, 8192);
  put_be32(png, 20, 8192);
  EXPECT_CONTAINS(image_error(png), "truncated PNG: 8192x8192");
  put_be32(png, 20, 8193);
  EXPECT_CONTAINS(image_error(png), "declares 8192x8193 = 67117056 pixels (header at byte 16), over the limit of "
                                    "67108864 pixels");
  EXPECT_CONTAINS(error_of([&] { decode(png, 1, {.max_pixels = 0}); }), "max_pixels must be at least 1, got 0");
}

TEST(ImageHardening, BmpCompressionStbWouldReadAsUncompressedIsRefused) {
  // stb_image 2.27 takes the field as a signed int and refuses only 1, 2 and 4 or more: the
  // fuzzer's 105-byte file (0xD1D1D17A, declaring 8195x7170 at 24 bits) was decoded as
  // uncompressed, its 176 MB of missing rows as zeros, and skipped our row count, which
  // trusted only 0 and 3 to be uncompressed.
  std::string bmp = seed("rgb.bmp");
  put_le32(bmp, 30, 0xD1D1D17Au);
  EXPECT_CONTAINS(image_error(bmp, 3), "'img': BMP compression 3520188794 at byte 30 is not decoded");
  put_le32(bmp, 18, 8195);
  put_le32(bmp, 22, 7170);
  EXPECT_CONTAINS(image_error(bmp, 3), "BMP compression 3520188794 at byte 30");
  put_le32(bmp, 30, 1);  // RLE8, which stb does not decode either
  EXPECT_CONTAINS(image_error(bmp, 3), "BMP compression 1 at byte 30");
  put_le32(bmp, 30, 0);  // uncompressed: its rows are not in the file
  EXPECT_CONTAINS(image_error(bmp, 3),
                  "truncated BMP: 8195x7170 at 24 bits per pixel (header at byte 18) needs 176295960 bytes of pixel "
                  "data from byte 54 (offset at byte 10), up to byte 176296014, but the file has 78 bytes");
}

TEST(ImageHardening, BmpHeaderCutShortIsRefused) {
  // stb_image reads missing header fields as zeros: 30 bytes of an 8-bit BMP declaring
  // 8000x8000 had compression 0 and a full palette offset, and decoded as 64 Mpixel of zeros.
  std::string bmp = seed("gray.bmp").substr(0, 30);
  put_le32(bmp, 18, 8000);
  put_le32(bmp, 22, 8000);
  EXPECT_CONTAINS(image_error(bmp), "BMP info header of 40 bytes at byte 14 ends past the file's 30 bytes");
  EXPECT_CONTAINS(image_error(seed("gray.bmp").substr(0, 16)),
                  "BMP file of 16 bytes ends inside its 18-byte file header");
  std::string odd = seed("gray.bmp");
  put_le32(odd, 14, 64);
  EXPECT_CONTAINS(image_error(odd), "BMP info header size 64 at byte 14 is not one stb_image reads");
}

TEST(ImageHardening, BmpPixelOffsetInsideTheHeadersIsRefused) {
  // stb_image would count a negative palette and index its uninitialised palette array.
  std::string bmp = seed("gray.bmp");
  put_le32(bmp, 10, 20);
  EXPECT_CONTAINS(image_error(bmp),
                  "BMP pixel data offset 20 at byte 10 points inside its headers, which end at byte 54");
}

TEST(ImageHardening, BmpPaletteIndexPastThePaletteIsRefused) {
  // stb_image reads the palette entries that fit before the pixel data and leaves the rest of
  // its 256-entry table uninitialised: an index past them would put stack bytes in the image.
  const std::string full = seed("gray.bmp");  // 5x2 at 8 bits: 256 entries from byte 54, pixels from 1078
  std::string bmp = full.substr(0, 54 + 16 * 4) + full.substr(1078);  // keep 16 entries
  put_le32(bmp, 10, 54 + 16 * 4);
  // Pixel (x, y) is (40x + 20y) % 256 and the rows are stored bottom-up: the first stored pixel,
  // (0, 1), is entry 20.
  EXPECT_CONTAINS(image_error(bmp), "BMP pixel 0 of stored row 0 (byte 118) is palette entry 20, past the 16 "
                                    "entries before the pixel data");
  for (size_t i = 118; i < bmp.size(); ++i) bmp[i] = static_cast<char>(i % 16);  // every index under 16
  EXPECT_EQ(decode(bmp, 1).sizes(), IntList({1, 2, 5}));
  // No room for a palette at all (stb would count 0 or fewer entries).
  put_le32(bmp, 10, 54);
  EXPECT_CONTAINS(image_error(bmp), "BMP has room for 0 palette entries before its pixel data at byte 54");
}

TEST(ImageHardening, BmpBitsPerPixelStbCannotDecodeAreRefused) {
  // stb would allocate the whole image before finding out.
  std::string bmp = seed("gray.bmp");
  bmp[28] = 2;
  EXPECT_CONTAINS(image_error(bmp), "BMP 2 bits per pixel at byte 28 (1, 4, 8, 16, 24 or 32 decode)");
}

TEST(ImageHardening, TopDownBmpDecodesLikeBottomUpAndIsCheckedTheSame) {
  // A negative height stores the rows top first. rgb.bmp is 3x2: two 12-byte rows from byte 54.
  const std::string up = seed("rgb.bmp");
  ASSERT_EQ(up.size(), 78u);
  std::string down = up;
  put_le32(down, 22, static_cast<uint32_t>(-2));
  down.replace(54, 12, up.substr(66, 12));
  down.replace(66, 12, up.substr(54, 12));
  Tensor a = decode(up, 3), b = decode(down, 3);
  ASSERT_EQ(b.sizes(), IntList({3, 2, 3}));
  EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0);
  EXPECT_CONTAINS(image_error(down.substr(0, 74), 3), "truncated BMP: 3x2 at 24 bits per pixel");
  EXPECT_CONTAINS(image_error(down, 3, {.max_pixels = 5}), "declares 3x2 = 6 pixels");
  put_le32(down, 22, static_cast<uint32_t>(-7170));
  EXPECT_CONTAINS(image_error(down, 3), "truncated BMP: 3x7170");
  put_le32(down, 22, 0x80000000u);  // -2^31, whose absolute value an int cannot hold
  EXPECT_CONTAINS(image_error(down, 3), "declares 3x2147483648 pixels (header at byte 18), over the limit of 16384 "
                                        "pixels per side");
}

TEST(ImageHardening, TruncatedFilesAreErrorsNotZeroPaddedImages) {
  std::string png = seed("rgb.png");
  for (size_t n : {size_t(8), size_t(20), size_t(33), png.size() / 2, png.size() - 13})
    EXPECT_NE(image_error(png.substr(0, n), 3), "(no error)") << "PNG cut to " << n;
  std::string jpg = seed("gray.jpg");
  EXPECT_CONTAINS(image_error(jpg.substr(0, jpg.size() - 20)), "truncated JPEG: no end-of-image marker (FF D9)");
  std::string bmp = seed("rgb.bmp");
  EXPECT_CONTAINS(image_error(bmp.substr(0, bmp.size() - 4), 3),
                  "truncated BMP: 3x2 at 24 bits per pixel (header at byte 18) needs 24 bytes of pixel data from byte "
                  "54 (offset at byte 10), up to byte 78, but the file has 74 bytes");
  std::string tall = seed("gray.bmp");
  tall[22] = 100;  // height 2 -> 100 rows the file does not hold
  EXPECT_CONTAINS(image_error(tall), "truncated BMP");
}

TEST(ImageHardening, LoadImageNamesThePath) {
  auto path = fs::temp_directory_path() / ("mixtape_image_hardening_" + std::to_string(::getpid()) + ".jpg");
  std::string jpg = seed("gray.jpg");
  std::ofstream(path, std::ios::binary) << jpg.substr(0, jpg.size() / 2);
  std::string e = error_of([&] { load_image(path.string(), 1); });
  EXPECT_TRUE(fuzz::names_location(e, path.string())) << e;
  fs::remove(path);
  EXPECT_CONTAINS(error_of([&] { load_image(path.string(), 1); }), "cannot open");
}

}  // namespace
}  // namespace mixtape::data
