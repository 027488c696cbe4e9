// tests/fuzz/fuzz_image.cpp — libFuzzer harness for the image decoder (PNG, JPEG, BMP through
// stb_image), in both channel modes: any bytes must decode or throw a located mixtape::Error.
#include <cstddef>
#include <cstdint>

#include "data/image_folder.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (int channels : {1, 3})
    mixtape::fuzz::expect_load_or_error(
        [&] { mixtape::data::decode_image(data, size, channels, mixtape::fuzz::kName); });
  return 0;
}
