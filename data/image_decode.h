// data/image_decode.h — one image file (PNG, JPEG or BMP) to a (channels, H, W) UInt8 tensor,
// through stb_image (Debian's libstb-dev). Kept apart from ImageFolder so the decoder, the part
// that reads untrusted bytes, can be fuzzed on its own (tests/fuzz/fuzz_image.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace mixtape::data {

// A side over this is refused from the header: stb_image is built with it as its own limit
// (STBI_MAX_DIMENSIONS), so it is fixed, not an option.
inline constexpr int kMaxImageSide = 16384;
// DecodeOptions::max_pixels by default: 64 Mpixel (8192 x 8192).
inline constexpr int64_t kDefaultMaxImagePixels = int64_t(1) << 26;

// What decode_image accepts. A few hundred bytes can declare a picture of millions of pixels,
// and decoding costs time and memory in proportion to the declared size, not the file's, so
// (as Pillow's decompression-bomb limit does) an image declaring more pixels than max_pixels
// is refused from its header before anything is allocated for it. Raise it for datasets of
// larger images; it must be at least 1.
struct DecodeOptions {
  int64_t max_pixels = kDefaultMaxImagePixels;  // width x height
};

// Decodes one image file to (channels, H, W) UInt8 (see decode_image).
Tensor load_image(const std::string& path, int channels, const DecodeOptions& options = {});
// Decodes a PNG, JPEG or BMP held in memory to (channels, H, W) UInt8; `name` names the source
// in errors. Invariant: a bad image throws mixtape::Error naming the source and a byte offset
// (where stb_image gave up, when the fault is inside its decoder), never crashes, never reads
// outside [data, data + size), and never allocates for an image over the limits above. A
// truncated JPEG (no end-of-image marker), PNG (less compressed data than the pixels need) or
// BMP (pixel rows missing: an uncompressed format, so every declared row must be in the file)
// is an error, not an image silently padded with zeros. Top-down BMPs (negative height) decode
// like bottom-up ones; other formats (GIF, PNM, ...) are refused.
Tensor decode_image(const uint8_t* data, size_t size, int channels, const std::string& name,
                    const DecodeOptions& options = {});

}  // namespace mixtape::data
