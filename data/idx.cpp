// data/idx.cpp — IDX parsing, with zlib for .gz files. Sizes are validated before any
// allocation: the element count against the bytes present, and (for gzip) the inflated size
// against the header's promise and deflate's maximum ratio.
#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <vector>

namespace mixtape::data {

namespace {

constexpr uint64_t kMaxElements = uint64_t(1) << 40;  // 1 Ti elements: no real dataset is near it
// Deflate emits at most 258 bytes per 2-bit (length, distance) code pair: 1032 bytes out per
// byte in. Anything promising more cannot be honest gzip data.
constexpr uint64_t kDeflateMaxRatio = 1032;

uint64_t inflate_bound(size_t compressed) { return kDeflateMaxRatio * uint64_t(compressed) + 1024; }

bool is_gzip(const uint8_t* p, size_t n) { return n >= 2 && p[0] == 0x1f && p[1] == 0x8b; }

uint32_t be32(const uint8_t* p) { return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3]; }

// Inflates the gzip member(s) in data[0, size). After each chunk, limit(out) is the most bytes
// the output may hold given what has been inflated so far (it may also throw).
std::string gunzip(const uint8_t* data, size_t size, const std::string& name,
                   const std::function<uint64_t(const std::string&)>& limit) {
  z_stream zs{};
  MT_CHECK(inflateInit2(&zs, 15 + 16) == Z_OK, "read_idx: zlib init failed for '", name, "'");  // 15+16: gzip wrapper
  std::string out;
  size_t fed = 0;  // data[0, fed) has been handed to zlib
  auto consumed = [&] { return fed - zs.avail_in; };
  auto fail = [&](auto&&... msg) {
    inflateEnd(&zs);
    MT_ERROR("read_idx: '", name, "': ", msg...);
  };
  unsigned char buf[1 << 16];
  for (;;) {
    if (zs.avail_in == 0 && fed < size) {  // zlib counts input in uInt: feed at most 1 GiB at a time
      size_t n = std::min<size_t>(size - fed, size_t(1) << 30);
      zs.next_in = const_cast<Bytef*>(data + fed);
      zs.avail_in = static_cast<uInt>(n);
      fed += n;
    }
    zs.next_out = buf;
    zs.avail_out = sizeof buf;
    int rc = inflate(&zs, Z_NO_FLUSH);
    size_t produced = sizeof buf - zs.avail_out;
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
      fail("corrupt gzip data at compressed byte ", consumed(), " (zlib: ", zs.msg ? zs.msg : "error ", rc, ")");
    out.append(reinterpret_cast<const char*>(buf), produced);
    uint64_t max_out = 0;
    try {
      max_out = limit(out);
    } catch (...) {
      inflateEnd(&zs);
      throw;
    }
    if (out.size() > max_out)
      fail("gzip data inflates past ", max_out, " bytes (the most its header allows) by compressed byte ", consumed());
    if (rc == Z_STREAM_END) {
      size_t at = consumed();
      if (at == size) break;
      if (!is_gzip(data + at, size - at))
        fail(size - at, " bytes after the end of the gzip stream, at byte ", at);
      inflateReset(&zs);  // another gzip member follows (as `cat a.gz b.gz` makes)
      continue;
    }
    if (produced == 0 && zs.avail_in == 0 && fed == size)
      fail("truncated gzip data: the stream ends at byte ", size, " before its end marker");
  }
  inflateEnd(&zs);
  return out;
}

struct Header {
  DType dtype = DType::UInt8;
  size_t elem = 1;       // bytes per element
  IntList sizes;
  uint64_t count = 1;    // elements
  size_t bytes = 0;      // magic + sizes
  uint64_t total() const { return bytes + count * elem; }
};

// Parses the header at p[0, n). Returns false when n is too short to hold it (with
// partial = true; otherwise that is an error). Fields that are wrong throw.
bool parse_header(const uint8_t* p, size_t n, const std::string& name, bool partial, Header* h) {
  if (n < 4) {
    MT_CHECK(partial, "read_idx: '", name, "' is ", n, " bytes, too short for the 4-byte magic (ends at byte ", n, ")");
    return false;
  }
  MT_CHECK(p[0] == 0 && p[1] == 0, "read_idx: '", name, "' has a bad magic at offset 0 (expected 00 00, got ",
           int(p[0]), " ", int(p[1]), ")");
  switch (p[2]) {
    case 0x08: h->dtype = DType::UInt8; h->elem = 1; break;
    case 0x0C: h->dtype = DType::Int32; h->elem = 4; break;
    case 0x0D: h->dtype = DType::Float32; h->elem = 4; break;
    case 0x0E: h->dtype = DType::Float64; h->elem = 8; break;
    default: MT_ERROR("read_idx: '", name, "' has unsupported element type 0x", std::hex, int(p[2]), std::dec,
                      " at offset 2 (expected 08, 0c, 0d or 0e)");
  }
  int nd = p[3];
  MT_CHECK(nd >= 1 && nd <= 8, "read_idx: '", name, "' declares ", nd, " dimensions at offset 3 (expected 1..8)");
  h->bytes = 4 + 4 * size_t(nd);
  if (n < h->bytes) {
    MT_CHECK(partial, "read_idx: '", name, "' ends at byte ", n, " inside the dimension sizes (bytes 4-",
             h->bytes - 1, ")");
    return false;
  }
  // Both the element count and the product of the non-zero sizes stay below 2^40, so neither
  // the byte count nor a stride can overflow, even when a zero size makes the tensor empty.
  uint64_t nonzero = 1;
  bool empty = false;
  h->sizes.clear();
  for (int d = 0; d < nd; ++d) {
    uint32_t s = be32(p + 4 + 4 * d);
    h->sizes.push_back(s);
    if (s == 0) {
      empty = true;
      continue;
    }
    MT_CHECK(nonzero <= kMaxElements / s, "read_idx: '", name, "' has absurd sizes: dimension ", d, " (", s,
             ", at offset ", 4 + 4 * d, ") takes the element count past 2^40");
    nonzero *= s;
  }
  h->count = empty ? 0 : nonzero;
  return true;
}

}  // namespace

std::string read_file_maybe_gzip(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  MT_CHECK(f.good(), "read_idx: cannot open '", path, "'");
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  MT_CHECK(!f.bad(), "read_idx: reading '", path, "' failed after ", raw.size(), " bytes");
  const auto* p = reinterpret_cast<const uint8_t*>(raw.data());
  if (!is_gzip(p, raw.size())) return raw;
  const uint64_t bound = inflate_bound(raw.size());
  return gunzip(p, raw.size(), path, [bound](const std::string&) { return bound; });
}

Tensor read_idx_bytes(const uint8_t* data, size_t size, const std::string& name) {
  std::string inflated;
  if (is_gzip(data, size)) {
    // Stop inflating as soon as the output outgrows the header's promise.
    const uint64_t bound = inflate_bound(size);
    inflated = gunzip(data, size, name, [&](const std::string& out) -> uint64_t {
      Header h;
      if (!parse_header(reinterpret_cast<const uint8_t*>(out.data()), out.size(), name, true, &h)) return bound;
      MT_CHECK(h.total() <= bound, "read_idx: '", name, "' declares ", shape_str(h.sizes), " (", h.total(),
               " bytes with the header, sizes at offsets 4-", h.bytes - 1, ") but its ", size,
               " bytes of gzip data can inflate to at most ", bound, " bytes");
      return h.total();
    });
    data = reinterpret_cast<const uint8_t*>(inflated.data());
    size = inflated.size();
  }
  Header h;
  parse_header(data, size, name, false, &h);
  const uint64_t have = size - h.bytes;
  MT_CHECK(have == h.count * h.elem, "read_idx: '", name, "' declares ", shape_str(h.sizes), " (", h.count * h.elem,
           " data bytes from offset ", h.bytes, ") but holds ", have, " data bytes");
  Tensor t = Tensor::empty(h.sizes, TensorOptions(h.dtype));
  if (h.count == 0) return t;
  auto* out = static_cast<uint8_t*>(t.data_ptr());
  const uint8_t* src = data + h.bytes;
  if (h.elem == 1) {
    std::memcpy(out, src, h.count);
  } else {
    for (uint64_t i = 0; i < h.count; ++i)  // big-endian -> host order
      for (size_t b = 0; b < h.elem; ++b) out[i * h.elem + b] = src[i * h.elem + (h.elem - 1 - b)];
  }
  return t;
}

Tensor read_idx(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  MT_CHECK(f.good(), "read_idx: cannot open '", path, "'");
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  MT_CHECK(!f.bad(), "read_idx: reading '", path, "' failed after ", raw.size(), " bytes");
  return read_idx_bytes(reinterpret_cast<const uint8_t*>(raw.data()), raw.size(), path);
}

void write_idx(const Tensor& t, const std::string& path) {
  MT_CHECK(t.dtype() == DType::UInt8, "write_idx: expected a UInt8 tensor, got ", t.describe());
  MT_CHECK(t.dim() >= 1 && t.dim() <= 8, "write_idx: expected 1..8 dims, got ", t.describe());
  std::ofstream f(path, std::ios::binary);
  MT_CHECK(f.good(), "write_idx: cannot create '", path, "'");
  unsigned char magic[4] = {0, 0, 0x08, static_cast<unsigned char>(t.dim())};
  f.write(reinterpret_cast<const char*>(magic), 4);
  for (int64_t s : t.sizes()) {
    unsigned char b[4] = {static_cast<unsigned char>(s >> 24), static_cast<unsigned char>(s >> 16),
                          static_cast<unsigned char>(s >> 8), static_cast<unsigned char>(s)};
    f.write(reinterpret_cast<const char*>(b), 4);
  }
  // Row-major bytes for any strides, walked here rather than with contiguous() so that this
  // file needs only core/ (the fuzz harness links it alone).
  std::string bytes(static_cast<size_t>(t.numel()), '\0');
  const auto* base = static_cast<const uint8_t*>(t.data_ptr());
  std::vector<int64_t> idx(static_cast<size_t>(t.dim()), 0);
  for (size_t i = 0; i < bytes.size(); ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < t.dim(); ++d) off += idx[d] * t.stride(d);
    bytes[i] = static_cast<char>(base[off]);
    for (int64_t d = t.dim() - 1; d >= 0; --d) {  // odometer increment
      if (++idx[d] < t.size(d)) break;
      idx[d] = 0;
    }
  }
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  MT_CHECK(f.good(), "write_idx: write failed for '", path, "'");
}

}  // namespace mixtape::data
