// data/idx.h — the IDX file format of MNIST and Fashion-MNIST, plain or gzip-compressed.
// Layout: magic (0x00 0x00 type ndims), ndims big-endian u32 sizes, then the values
// big-endian. Invariant: every field is checked against the real length before anything is
// allocated or copied; a bad file throws mixtape::Error naming the file and the byte offset
// (for gzip data, the offset into the compressed file), never crashes or reads past the
// buffer. A gzip stream may not inflate past what its IDX header promises, and a header may
// not promise more than its compressed bytes can hold (deflate's 1032:1 ratio), so a gzip
// bomb is refused before it fills memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace mixtape::data {

// Reads an IDX file (".gz" detected by its magic bytes, not its name). Returns a tensor of the
// file's element type (u8 -> UInt8, i32 -> Int32, f32 -> Float32, f64 -> Float64) and shape.
Tensor read_idx(const std::string& path);
// The same from bytes in memory (plain or gzip); `name` names the source in errors.
Tensor read_idx_bytes(const uint8_t* data, size_t size, const std::string& name);
// Writes a UInt8 tensor as an uncompressed IDX file (used by tests and examples).
void write_idx(const Tensor& t, const std::string& path);
// The bytes of a file, gunzipped if it is gzip data (at most 1032x the compressed size).
std::string read_file_maybe_gzip(const std::string& path);

}  // namespace mixtape::data
