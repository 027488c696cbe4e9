// data/image_decode.h — one image file (PNG, JPEG or BMP) to a (channels, H, W) UInt8 tensor,
// through stb_image (Debian's libstb-dev). Kept apart from ImageFolder so the decoder, the part
// that reads untrusted bytes, can be fuzzed on its own (tests/fuzz/fuzz_image.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace mixtape::data {

// Images larger than this are refused from their header, before stb_image allocates anything.
inline constexpr int kMaxImageSide = 16384;                    // pixels per side
inline constexpr int64_t kMaxImagePixels = int64_t(1) << 26;   // 64 Mpixel (8192 x 8192)

// Decodes one image file to (channels, H, W) UInt8 (see decode_image).
Tensor load_image(const std::string& path, int channels);
// Decodes a PNG, JPEG or BMP held in memory to (channels, H, W) UInt8; `name` names the source
// in errors. Invariant: a bad image throws mixtape::Error naming the source and a byte offset
// (where stb_image gave up, when the fault is inside its decoder), never crashes, never reads
// outside [data, data + size), and never allocates for an image over the limits above. A
// truncated JPEG (no end-of-image marker) or BMP (pixel rows missing) is an error, not an image
// silently padded with zeros.
Tensor decode_image(const uint8_t* data, size_t size, int channels, const std::string& name);

}  // namespace mixtape::data
