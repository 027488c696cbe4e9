// tests/fuzz/fuzz_util.h — the property every reader harness checks: an input either loads or
// throws mixtape::Error whose message names the source and a byte offset. Anything else — a
// crash, a sanitizer report, another exception type, a message without a location — aborts,
// which libFuzzer records as a crasher.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace mixtape::fuzz {

// The source name the harnesses pass to the readers.
inline const std::string kName = "fuzz-input";

// True when an error message says where: the source name and "byte"/"offset" before a number.
inline bool names_location(const std::string& msg, const std::string& name) {
  if (msg.find(name) == std::string::npos) return false;
  for (const char* word : {"byte ", "bytes ", "offset ", "offsets "})
    for (size_t at = msg.find(word); at != std::string::npos; at = msg.find(word, at + 1)) {
      size_t digit = at + std::string(word).size();
      if (digit < msg.size() && msg[digit] >= '0' && msg[digit] <= '9') return true;
    }
  return false;
}

template <typename F>
void expect_load_or_error(F&& read) {
  try {
    read();
  } catch (const Error& e) {
    if (!names_location(e.what(), kName)) {
      std::fprintf(stderr, "error without source name or byte offset: %s\n", e.what());
      std::abort();
    }
  }
}

}  // namespace mixtape::fuzz
