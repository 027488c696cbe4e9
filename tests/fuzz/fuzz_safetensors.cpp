// tests/fuzz/fuzz_safetensors.cpp — libFuzzer harness for the safetensors reader: any bytes
// must load or throw a located mixtape::Error (tests/fuzz/fuzz_util.h).
#include <cstddef>
#include <cstdint>

#include "core/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mixtape::fuzz::expect_load_or_error([&] { mixtape::parse_safetensors(data, size, mixtape::fuzz::kName); });
  return 0;
}
