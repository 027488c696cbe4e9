// data/idx.cpp — IDX parsing with zlib for .gz files.
#include "data/idx.h"

#include <zlib.h>

#include <cstring>
#include <fstream>

namespace mixtape::data {

std::string read_file_maybe_gzip(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  MT_CHECK(f.good(), "read_idx: cannot open '", path, "'");
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (raw.size() < 2 || static_cast<unsigned char>(raw[0]) != 0x1f || static_cast<unsigned char>(raw[1]) != 0x8b)
    return raw;
  // gzip: inflate in chunks (windowBits 15 + 16 selects the gzip wrapper).
  z_stream zs{};
  MT_CHECK(inflateInit2(&zs, 15 + 16) == Z_OK, "read_idx: zlib init failed for '", path, "'");
  zs.next_in = reinterpret_cast<Bytef*>(raw.data());
  zs.avail_in = static_cast<uInt>(raw.size());
  std::string out;
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      size_t at = zs.total_in;
      inflateEnd(&zs);
      MT_ERROR("read_idx: corrupt gzip data in '", path, "' at compressed byte ", at, " (zlib error ", rc, ")");
    }
    out.append(buf, sizeof buf - zs.avail_out);
    if (rc != Z_STREAM_END && zs.avail_in == 0 && zs.avail_out != 0) {
      inflateEnd(&zs);
      MT_ERROR("read_idx: truncated gzip data in '", path, "' (", raw.size(), " bytes)");
    }
  }
  inflateEnd(&zs);
  return out;
}

namespace {
uint32_t be32(const unsigned char* p) { return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3]; }
}  // namespace

Tensor read_idx(const std::string& path) {
  std::string bytes = read_file_maybe_gzip(path);
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  MT_CHECK(n >= 4, "read_idx: '", path, "' is ", n, " bytes, too short for the 4-byte magic");
  MT_CHECK(p[0] == 0 && p[1] == 0, "read_idx: '", path, "' has a bad magic at offset 0 (expected 00 00, got ",
           int(p[0]), " ", int(p[1]), ")");
  DType dt;
  size_t es;
  switch (p[2]) {
    case 0x08: dt = DType::UInt8; es = 1; break;
    case 0x0C: dt = DType::Int32; es = 4; break;
    case 0x0D: dt = DType::Float32; es = 4; break;
    case 0x0E: dt = DType::Float64; es = 8; break;
    default: MT_ERROR("read_idx: '", path, "' has unsupported element type 0x", std::hex, int(p[2]), " at offset 2");
  }
  int nd = p[3];
  MT_CHECK(nd >= 1 && nd <= 8, "read_idx: '", path, "' declares ", nd, " dimensions at offset 3 (expected 1..8)");
  MT_CHECK(n >= 4 + 4 * size_t(nd), "read_idx: '", path, "' ends at byte ", n, " inside the dimension sizes");
  IntList sizes;
  uint64_t count = 1;
  for (int d = 0; d < nd; ++d) {
    uint32_t s = be32(p + 4 + 4 * d);
    sizes.push_back(s);
    MT_CHECK(s == 0 || count <= (uint64_t(1) << 40) / s, "read_idx: '", path, "' has absurd sizes at offset ", 4 + 4 * d);
    count *= s;
  }
  size_t header = 4 + 4 * size_t(nd);
  MT_CHECK(n - header == count * es, "read_idx: '", path, "' declares ", shape_str(sizes), " (", count * es,
           " data bytes from offset ", header, ") but holds ", n - header, " data bytes");
  Tensor t = Tensor::empty(sizes, TensorOptions(dt));
  auto* out = static_cast<unsigned char*>(t.data_ptr());
  const unsigned char* src = p + header;
  if (es == 1) {
    std::memcpy(out, src, count);
  } else {
    for (uint64_t i = 0; i < count; ++i)  // big-endian -> host order
      for (size_t b = 0; b < es; ++b) out[i * es + b] = src[i * es + (es - 1 - b)];
  }
  return t;
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
  Tensor c = t.contiguous();
  f.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  MT_CHECK(f.good(), "write_idx: write failed for '", path, "'");
}

}  // namespace mixtape::data
