// tests/fuzz/fuzz_idx.cpp — libFuzzer harness for the IDX reader (plain and gzip): any bytes
// must load or throw a located mixtape::Error (tests/fuzz/fuzz_util.h).
#include <cstddef>
#include <cstdint>

#include "data/idx.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mixtape::fuzz::expect_load_or_error([&] { mixtape::data::read_idx_bytes(data, size, mixtape::fuzz::kName); });
  return 0;
}
