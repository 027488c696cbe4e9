// tests/data/test_reader_regressions.cpp — replays the fuzzers' files through the path-based
// readers in the normal build: every crasher kept under tests/fuzz/regressions/<target>/ must
// now end in a mixtape::Error that names the file and a byte offset, and every seed under
// tests/fuzz/corpus/<target>/ must still load.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "tests/fuzz/fuzz_util.h"

namespace fs = std::filesystem;

namespace mixtape::data {
namespace {

// tests/fuzz, found from this file's own path so the test runs from any build directory.
const fs::path kFuzzDir = fs::path(__FILE__).parent_path().parent_path() / "fuzz";

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().filename().string()[0] != '.') out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Each fuzz target's reader, through its path entry point.
const std::map<std::string, std::function<void(const std::string&)>> kReaders = {
    {"idx", [](const std::string& p) { read_idx(p); }},
    {"image",
     [](const std::string& p) {
       load_image(p, 1);
       load_image(p, 3);
     }},
    {"safetensors", [](const std::string& p) { load_safetensors(p); }},
};

TEST(ReaderRegressions, EveryKeptCrasherIsALocatedError) {
  int replayed = 0;
  for (const auto& [target, read] : kReaders) {
    for (const fs::path& f : files_in(kFuzzDir / "regressions" / target)) {
      SCOPED_TRACE(f.string());
      ++replayed;
      try {
        read(f.string());
        ADD_FAILURE() << "loaded without an error";
      } catch (const Error& e) {
        EXPECT_TRUE(fuzz::names_location(e.what(), f.string())) << "no file name or byte offset: " << e.what();
      }
    }
  }
  std::printf("replayed %d regression inputs\n", replayed);
  EXPECT_GT(replayed, 0) << "no regression inputs found under " << kFuzzDir;
}

TEST(ReaderRegressions, EverySeedLoads) {
  for (const auto& [target, read] : kReaders) {
    auto seeds = files_in(kFuzzDir / "corpus" / target);
    EXPECT_FALSE(seeds.empty()) << "no seeds for " << target;
    for (const fs::path& f : seeds) {
      SCOPED_TRACE(f.string());
      EXPECT_NO_THROW(read(f.string()));
    }
  }
}

}  // namespace
}  // namespace mixtape::data
