// data/image_decode.cpp — decode_image and load_image over stb_image (Debian's libstb-dev).
// stb_image is not written for hostile input, so it sees only what passed our own checks:
// a known signature, header dimensions within the limits, and (for the formats where stb pads
// missing data with zeros instead of failing) the bytes the header promises.
#include "data/image_decode.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_HDR
#define STBI_ONLY_PNG  // the three formats ImageFolder accepts; the other decoders are not built
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_MAX_DIMENSIONS 16384  // = kMaxImageSide, for stb's own checks (static_assert below)
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace mixtape::data {

static_assert(STBI_MAX_DIMENSIONS == kMaxImageSide);

namespace {

enum class Format { Png, Jpeg, Bmp };

uint32_t le16(const uint8_t* p) { return uint32_t(p[0]) | (uint32_t(p[1]) << 8); }
uint32_t le32(const uint8_t* p) { return le16(p) | (le16(p + 2) << 16); }
uint32_t be16(const uint8_t* p) { return (uint32_t(p[0]) << 8) | p[1]; }
uint32_t be32(const uint8_t* p) { return (be16(p) << 16) | be16(p + 2); }

// Offsets of the first start-of-frame and start-of-scan markers of a JPEG (size when absent),
// found by walking the marker segments from byte 2.
struct JpegMarkers {
  size_t sof, sos;
};
JpegMarkers jpeg_markers(const uint8_t* p, size_t n) {
  JpegMarkers m{n, n};
  size_t pos = 2;
  while (pos + 4 <= n && p[pos] == 0xFF) {
    uint8_t marker = p[pos + 1];
    if (marker == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (marker == 0xDA) {
      m.sos = pos;
      break;
    }
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC && m.sof == n)
      m.sof = pos;
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) {  // markers without a length
      pos += 2;
      continue;
    }
    pos += 2 + ((size_t(p[pos + 2]) << 8) | p[pos + 3]);
  }
  return m;
}

// stb_image 2.27 (Debian 12) trusts a JPEG's tables, so the segments it will act on are
// checked first (both fixed or guarded upstream after 2.27; found by tests/fuzz/fuzz_image):
//  - a Huffman table's 16 code counts may sum to 4080, and stb writes that many sizes and
//    symbols into 257- and 256-byte arrays (regression jpeg-dht-over-256-codes);
//  - a DC table's symbols are the bit counts of the values that follow; stb reads as many bits
//    as a symbol says, and one over 16 indexes past its 17-entry mask table and shifts by 32 or
//    more (regression jpeg-dc-symbol-over-15);
//  - a scan may use a Huffman table that no DHT defined, and stb decodes with the
//    uninitialised memory of its malloc'd decoder, indexing arrays with garbage
//    (regression jpeg-scan-uses-undefined-huffman-table); the same holds for quantisation tables.
// The walk finds markers the way stb does: any 0xFF run followed by a byte other than 0x00
// (stuffing) and 0xD0-0xD7 (restarts), between segments and inside entropy-coded data alike;
// segments with a length are skipped whole. Where stb itself refuses a segment, so do we.
void check_jpeg_tables(const uint8_t* p, size_t n, const std::string& name) {
  auto at = [&](size_t i) -> uint32_t { return i < n ? p[i] : 0; };  // stb reads 0 past the end
  auto fail = [&](size_t where, auto&&... what) {
    MT_ERROR("decode_image: '", name, "': JPEG ", what..., " at byte ", where);
  };
  bool huffman[2][4] = {}, quant[4] = {}, progressive = false;
  std::vector<uint32_t> frame_quant;  // the quantisation table of each frame component
  size_t pos = 2;
  while (pos < n) {
    if (p[pos] != 0xFF) {
      ++pos;
      continue;
    }
    size_t m = pos;
    while (m < n && p[m] == 0xFF) ++m;
    if (m >= n) break;
    uint8_t marker = p[m];
    if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) {  // no length
      pos = m + 1;
      continue;
    }
    if (marker == 0xD9) break;  // end of image: stb reads no further
    const size_t seg = m - 1;   // the segment's 0xFF, for messages
    uint32_t len = (at(m + 1) << 8) | at(m + 2);
    if (len < 2) fail(seg, "segment length ", len);
    const size_t body = m + 3, end = m + 1 + len;
    if (marker == 0xC4) {  // DHT: tables of (class << 4 | id, 16 counts, symbols)
      for (size_t t = body; t < end;) {
        uint32_t q = at(t), codes = 0;
        if ((q >> 4) > 1 || (q & 15) > 3) fail(t, "Huffman table class/id 0x", std::hex, q, std::dec);
        for (size_t i = 1; i <= 16; ++i) codes += at(t + i);
        if (codes > 256) fail(t, "Huffman table declares ", codes, " codes (at most 256)");
        for (size_t i = 0; (q >> 4) == 0 && i < codes; ++i)  // a DC symbol is a bit count: 0..15
          if (at(t + 17 + i) > 15) fail(t + 17 + i, "DC Huffman symbol ", at(t + 17 + i), " (at most 15)");
        huffman[q >> 4][q & 15] = true;
        t += 17 + codes;
      }
    } else if (marker == 0xDB) {  // DQT: tables of (precision << 4 | id, 64 or 128 bytes)
      for (size_t t = body; t < end;) {
        uint32_t q = at(t);
        if ((q >> 4) > 1 || (q & 15) > 3) fail(t, "quantisation table precision/id 0x", std::hex, q, std::dec);
        quant[q & 15] = true;
        t += 1 + ((q >> 4) ? 128 : 64);
      }
    } else if (marker == 0xC0 || marker == 0xC1 || marker == 0xC2) {  // SOF: the frame
      progressive = marker == 0xC2;
      frame_quant.clear();
      for (uint32_t c = 0, nc = at(m + 8); c < nc && body + 6 + 3 * c + 2 < end; ++c)
        frame_quant.push_back(at(body + 6 + 3 * c + 2));
    } else if (marker == 0xDA) {  // SOS: which tables this scan decodes with
      uint32_t ns = at(body);
      if (len != 6 + 2 * ns) fail(seg, "scan header length ", len, " for ", ns, " components");
      uint32_t ss = at(body + 1 + 2 * ns), ah = at(body + 3 + 2 * ns) >> 4;
      // Baseline scans use both tables; progressive DC scans only the DC table (refinements
      // none), AC scans only the AC table.
      bool dc = !progressive || (ss == 0 && ah == 0), ac = !progressive || ss != 0;
      for (uint32_t c = 0; c < ns; ++c) {
        uint32_t t = at(body + 2 + 2 * c), td = t >> 4, ta = t & 15;
        if (td > 3 || ta > 3) fail(body + 2 + 2 * c, "scan table selector 0x", std::hex, t, std::dec);
        if (dc && !huffman[0][td]) fail(seg, "scan uses DC Huffman table ", td, " before any DHT defines it");
        if (ac && !huffman[1][ta]) fail(seg, "scan uses AC Huffman table ", ta, " before any DHT defines it");
      }
      for (uint32_t tq : frame_quant)
        if (tq > 3 || !quant[tq]) fail(seg, "scan needs quantisation table ", tq, ", which no DQT defines");
    }
    pos = end;
  }
}

// stb_image 2.27 sizes its compressed-data buffer from each IDAT chunk's declared length before
// it reads the chunk, so a 60-byte file declaring a 2 GB chunk costs a 2 GB allocation (found by
// fuzz_image, regression png-chunk-length-past-end): every chunk up to IEND must fit the file.
// An empty IDAT before any image data makes stb memcpy into its still-null buffer (undefined
// behaviour; regression png-empty-first-idat); no encoder writes one, so it is refused.
// Returns the total length of the IDAT chunks.
uint64_t check_png_chunks(const uint8_t* p, size_t n, const std::string& name) {
  size_t pos = 8;  // after the signature
  bool have_data = false;
  uint64_t idat = 0;
  while (pos + 8 <= n) {
    uint64_t len = (uint64_t(p[pos]) << 24) | (uint64_t(p[pos + 1]) << 16) | (uint64_t(p[pos + 2]) << 8) | p[pos + 3];
    std::string type(reinterpret_cast<const char*>(p + pos + 4), 4);
    MT_CHECK(len <= n - pos - 8, "decode_image: '", name, "': PNG chunk at byte ", pos, " declares ", len,
             " data bytes but the file has ", n - pos - 8, " after its header");
    if (type == "IDAT") {
      MT_CHECK(len > 0 || have_data, "decode_image: '", name, "': empty IDAT chunk at byte ", pos,
               " before any image data (stb_image cannot read it)");
      have_data = true;
      idat += len;
    }
    if (type == "IEND") break;
    pos += 12 + len;  // length, type, data, CRC
  }
  return idat;
}

// What an uncompressed BMP's header promises, read by us because stb_image 2.27 trusts it:
//  - it takes the compression field as a signed int and refuses only 1, 2 and 4 or more, so a
//    garbage value with the top bit set decodes as uncompressed (regression
//    bmp-negative-compression-huge-frame: 105 bytes declaring 8195x7170 at 24 bits cost a
//    second and 280 MB in a Release build, 39 s under ASan, decoding zeros);
//  - it reads missing header fields and missing pixel rows as zeros, so a short file becomes a
//    picture of the size it declares;
//  - it reports a top-down image's (negative) height as it is, which a size check must not
//    take for a small or negative number;
//  - it reads as many palette entries as fit between the headers and the pixel data, a count
//    that may come out negative, and leaves the rest of its 256-entry table uninitialised.
struct BmpLayout {
  int64_t width, height;       // height made positive (a negative one means top-down)
  uint32_t bpp, compression;   // compression: 0 (BI_RGB) or 3 (BI_BITFIELDS), the uncompressed ones
  uint64_t offset, row_bytes;  // where the pixel rows start; each row padded to 4 bytes
  uint32_t palette;            // entries stb reads, for 1, 4 and 8 bits per pixel
  size_t bpp_at;               // header offsets, for messages
};
BmpLayout bmp_layout(const uint8_t* p, size_t n, const std::string& name) {
  auto fail = [&](auto&&... what) { MT_ERROR("decode_image: '", name, "': BMP ", what...); };
  if (n < 18) fail("file of ", n, " bytes ends inside its 18-byte file header (at byte 0)");
  const uint32_t hsz = le32(p + 14);
  if (hsz != 12 && hsz != 40 && hsz != 56 && hsz != 108 && hsz != 124)
    fail("info header size ", hsz, " at byte 14 is not one stb_image reads (12, 40, 56, 108 or 124)");
  if (n < 14 + hsz) fail("info header of ", hsz, " bytes at byte 14 ends past the file's ", n, " bytes");
  // BI_BITFIELDS after a 40-byte header: three 32-bit channel masks follow it.
  const uint64_t headers_end = 14 + hsz + (hsz == 40 && le32(p + 30) == 3 ? 12 : 0);
  if (n < headers_end) fail("bit-field masks end at byte ", headers_end, ", past the file's ", n, " bytes");
  BmpLayout b{};
  if (hsz == 12) {  // OS/2 BITMAPCOREHEADER: unsigned 16-bit sides, never compressed
    b.width = le16(p + 18);
    b.height = le16(p + 20);
    b.bpp_at = 24;
  } else {
    b.width = int32_t(le32(p + 18));
    b.height = int32_t(le32(p + 22));
    b.bpp_at = 28;
    b.compression = le32(p + 30);
  }
  b.height = b.height < 0 ? -b.height : b.height;
  b.bpp = le16(p + b.bpp_at);
  if (b.compression != 0 && b.compression != 3)
    fail("compression ", b.compression, " at byte 30 is not decoded (0 = uncompressed and 3 = bit fields are; ",
         "stb_image reads no RLE, JPEG or PNG in BMP)");
  if (b.bpp != 1 && b.bpp != 4 && b.bpp != 8 && b.bpp != 16 && b.bpp != 24 && b.bpp != 32)
    fail(b.bpp, " bits per pixel at byte ", b.bpp_at, " (1, 4, 8, 16, 24 or 32 decode)");
  b.offset = le32(p + 10);
  if (b.offset < headers_end)
    fail("pixel data offset ", b.offset, " at byte 10 points inside its headers, which end at byte ", headers_end);
  b.row_bytes = (uint64_t(std::max<int64_t>(b.width, 0)) * b.bpp + 31) / 32 * 4;
  if (b.bpp <= 8) {  // stb's count: 3-byte entries from byte 38 after a 12-byte header, else 4-byte
    const int64_t room = hsz == 12 ? (int64_t(b.offset) - 38) / 3 : (int64_t(b.offset) - 14 - hsz) / 4;
    if (room < 1 || room > 256)
      fail("has room for ", room, " palette entries before its pixel data at byte ", b.offset,
           " (offset at byte 10); stb_image decodes 1 to 256");
    b.palette = static_cast<uint32_t>(room);
  }
  return b;
}

// Every palette index of a BMP's rows (all in the file by now) must name an entry stb read:
// the others hold whatever was on the stack, which would end up in the image.
void check_bmp_indices(const uint8_t* p, const BmpLayout& b, const std::string& name) {
  if (b.bpp > 8 || b.palette >= (1u << b.bpp)) return;  // no palette, or no index can miss it
  const uint32_t per_byte = 8 / b.bpp, mask = (1u << b.bpp) - 1;
  for (int64_t y = 0; y < b.height; ++y) {
    const uint8_t* row = p + b.offset + uint64_t(y) * b.row_bytes;
    for (int64_t x = 0; x < b.width; ++x) {  // pixels from the high bits of each byte down
      const uint32_t v = (row[x / per_byte] >> (8 - b.bpp * (x % per_byte + 1))) & mask;
      MT_CHECK(v < b.palette, "decode_image: '", name, "': BMP pixel ", x, " of stored row ", y, " (byte ",
               b.offset + uint64_t(y) * b.row_bytes + uint64_t(x / per_byte), ") is palette entry ", v,
               ", past the ", b.palette, " entries before the pixel data");
    }
  }
}

// stb_image reads through these callbacks so that an error can say how far it got.
struct Cursor {
  const uint8_t* data;
  size_t size, pos;
};
int cursor_read(void* user, char* out, int n) {
  auto* c = static_cast<Cursor*>(user);
  size_t k = std::min<size_t>(static_cast<size_t>(std::max(n, 0)), c->size - c->pos);
  std::memcpy(out, c->data + c->pos, k);
  c->pos += k;
  return static_cast<int>(k);
}
void cursor_skip(void* user, int n) {
  auto* c = static_cast<Cursor*>(user);
  if (n < 0)
    c->pos -= std::min<size_t>(c->pos, static_cast<size_t>(-static_cast<int64_t>(n)));
  else
    c->pos += std::min<size_t>(static_cast<size_t>(n), c->size - c->pos);
}
int cursor_eof(void* user) {
  auto* c = static_cast<Cursor*>(user);
  return c->pos >= c->size;
}

}  // namespace

Tensor decode_image(const uint8_t* data, size_t size, int channels, const std::string& name,
                    const DecodeOptions& options) {
  MT_CHECK(channels == 1 || channels == 3, "decode_image: '", name, "': channels must be 1 or 3, got ", channels);
  MT_CHECK(options.max_pixels >= 1, "decode_image: '", name, "': DecodeOptions::max_pixels must be at least 1, got ",
           options.max_pixels);
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  Format fmt;
  size_t dims_at;  // where the header keeps the width and height, for error messages
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) {
    fmt = Format::Png;
    dims_at = 16;
  } else if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
    fmt = Format::Jpeg;
    dims_at = std::min(jpeg_markers(data, size).sof, size);
  } else if (size >= 2 && data[0] == 'B' && data[1] == 'M') {
    fmt = Format::Bmp;
    dims_at = 18;
  } else {
    MT_ERROR("decode_image: cannot decode '", name, "' (", size, " bytes): no PNG, JPEG or BMP signature at byte 0");
  }

  if (fmt == Format::Jpeg) check_jpeg_tables(data, size, name);
  uint64_t png_idat = fmt == Format::Png ? check_png_chunks(data, size, name) : 0;
  BmpLayout bmp{};
  if (fmt == Format::Bmp) bmp = bmp_layout(data, size, name);

  // The declared size, read by us where the header is where the format puts it, and checked
  // against the per-side limit first: stb_image's header reader refuses a side over
  // STBI_MAX_DIMENSIONS with no more than "unknown image type".
  auto check_sides = [&](int64_t w, int64_t h) {
    MT_CHECK(w > 0 && h > 0, "decode_image: '", name, "' declares ", w, "x", h, " pixels (header at byte ", dims_at,
             "): no image");
    MT_CHECK(w <= kMaxImageSide && h <= kMaxImageSide, "decode_image: '", name, "' declares ", w, "x", h,
             " pixels (header at byte ", dims_at, "), over the limit of ", kMaxImageSide, " pixels per side");
  };
  if (fmt == Format::Png && size >= 24 && std::memcmp(data + 12, "IHDR", 4) == 0)
    check_sides(int64_t(be32(data + 16)), int64_t(be32(data + 20)));
  else if (fmt == Format::Jpeg && dims_at + 9 <= size)  // SOF: marker, length, precision, height, width
    check_sides(int64_t(be16(data + dims_at + 7)), int64_t(be16(data + dims_at + 5)));
  else if (fmt == Format::Bmp)
    check_sides(bmp.width, bmp.height);
  // Then the header as stb_image reads it (nothing is allocated).
  stbi_io_callbacks io{cursor_read, cursor_skip, cursor_eof};
  int info_w = 0, info_h = 0, n = 0;
  Cursor info_cursor{data, size, 0};
  MT_CHECK(stbi_info_from_callbacks(&io, &info_cursor, &info_w, &info_h, &n) != 0, "decode_image: '", name,
           "': unreadable header: ", stbi_failure_reason(), " (stb_image stopped by byte ", info_cursor.pos, " of ",
           size, ")");
  const int64_t w = fmt == Format::Bmp ? bmp.width : info_w, h = fmt == Format::Bmp ? bmp.height : info_h;
  check_sides(w, h);
  MT_CHECK(w * h <= options.max_pixels, "decode_image: '", name, "' declares ", w, "x", h, " = ", w * h,
           " pixels (header at byte ", dims_at, "), over the limit of ", options.max_pixels,
           " pixels (DecodeOptions::max_pixels)");

  if (fmt == Format::Jpeg) {
    // stb_image pads a cut-off scan with zeros; an end-of-image marker after the first scan
    // tells a complete file from a truncated one.
    size_t sos = jpeg_markers(data, size).sos;
    bool has_eoi = false;
    for (size_t i = size; i >= sos + 2 && i >= 2 && !has_eoi; --i) has_eoi = data[i - 2] == 0xFF && data[i - 1] == 0xD9;
    MT_CHECK(has_eoi, "decode_image: '", name, "': truncated JPEG: no end-of-image marker (FF D9) after the scan ",
             "at byte ", sos, " (file ends at byte ", size, ")");
    // Every 8x8 block of the full-resolution component costs at least one bit (its DC code)
    // in the first scan. Fewer bytes than that cannot be a complete image, and stb would spend
    // seconds decoding zero padding for it (a 385-byte file declaring 12552x1032 did).
    uint64_t blocks = (uint64_t(w) + 7) / 8 * ((uint64_t(h) + 7) / 8);
    MT_CHECK((size - std::min(sos, size)) * 8 >= blocks, "decode_image: '", name, "': truncated JPEG: ", w, "x", h,
             " (frame at byte ", dims_at, ") has ", blocks, " blocks, more than the ", size - std::min(sos, size),
             " bytes from the scan at byte ", sos, " can code");
  }
  if (fmt == Format::Png) {
    // Deflate inflates at most 1032:1, so the IDAT data bounds the pixel bytes it can hold.
    uint32_t depth = size > 25 ? data[24] : 0, type = size > 25 ? data[25] : 0;
    uint64_t samples = type == 2 ? 3 : type == 4 ? 2 : type == 6 ? 4 : 1;
    uint64_t raw = (uint64_t(w) * samples * depth + 7) / 8 * uint64_t(h);
    MT_CHECK(png_idat * 1032 + 1024 >= raw, "decode_image: '", name, "': truncated PNG: ", w, "x", h,
             " (header at byte 16) needs ", raw, " bytes of pixel data, more than its ", png_idat,
             " bytes of IDAT data can inflate to");
  }
  if (fmt == Format::Bmp) {
    // Uncompressed rows, each padded to 4 bytes: all of them must be in the file.
    const uint64_t pixels = bmp.row_bytes * uint64_t(h), need = bmp.offset + pixels;
    MT_CHECK(size >= need, "decode_image: '", name, "': truncated BMP: ", w, "x", h, " at ", bmp.bpp,
             " bits per pixel (header at byte ", dims_at, ") needs ", pixels, " bytes of pixel data from byte ",
             bmp.offset, " (offset at byte 10), up to byte ", need, ", but the file has ", size, " bytes");
    check_bmp_indices(data, bmp, name);
  }

  Cursor cursor{data, size, 0};
  int dw = 0, dh = 0;
  unsigned char* px = stbi_load_from_callbacks(&io, &cursor, &dw, &dh, &n, channels);
  MT_CHECK(px != nullptr, "decode_image: cannot decode '", name, "': ", stbi_failure_reason(),
           " (stb_image stopped by byte ", cursor.pos, " of ", size, ")");
  if (dw != w || dh != h) {
    stbi_image_free(px);
    MT_ERROR("decode_image: '", name, "': header at byte ", dims_at, " says ", w, "x", h, " but decoding gave ", dw,
             "x", dh);
  }
  Tensor t = Tensor::empty({channels, h, w}, TensorOptions(DType::UInt8));
  uint8_t* out = t.data_ptr<uint8_t>();
  const size_t hw = size_t(h) * size_t(w);
  for (size_t i = 0; i < hw; ++i)  // HWC (stb) -> CHW (mixtape)
    for (int c = 0; c < channels; ++c) out[size_t(c) * hw + i] = px[i * size_t(channels) + size_t(c)];
  stbi_image_free(px);
  return t;
}

Tensor load_image(const std::string& path, int channels, const DecodeOptions& options) {
  std::ifstream f(path, std::ios::binary);
  MT_CHECK(f.good(), "load_image: cannot open '", path, "'");
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  MT_CHECK(!f.bad(), "load_image: reading '", path, "' failed after ", raw.size(), " bytes");
  return decode_image(reinterpret_cast<const uint8_t*>(raw.data()), raw.size(), channels, path, options);
}

}  // namespace mixtape::data
