// data/idx.h — the IDX file format of MNIST and Fashion-MNIST, plain or gzip-compressed.
// Layout: magic (0x00 0x00 type ndims), ndims big-endian u32 sizes, then the values
// big-endian. Every field is checked against the file's real length; errors name the file
// and the byte offset.
#pragma once
#include <string>

#include "core/tensor.h"

namespace mixtape::data {

// Reads an IDX file (".gz" detected by its magic bytes, not its name). Returns a tensor of the
// file's element type (u8 -> UInt8, i32 -> Int32, f32 -> Float32, f64 -> Float64) and shape.
Tensor read_idx(const std::string& path);
// Writes a UInt8 tensor as an uncompressed IDX file (used by tests and examples).
void write_idx(const Tensor& t, const std::string& path);
// The bytes of a file, gunzipped if it is gzip data.
std::string read_file_maybe_gzip(const std::string& path);

}  // namespace mixtape::data
