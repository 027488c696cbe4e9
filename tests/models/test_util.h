// tests/models/test_util.h — helpers the models tests share: fixture paths, a scratch
// directory per test process (removed at exit), and the message of a mixtape::Error.
#pragma once
#include "common/error_of.h"
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/error.h"

namespace mixtape::test {

inline std::string fixture_path(const std::string& name) {
  std::string here = __FILE__;
  return here.substr(0, here.find_last_of("/\\")) + "/../fixtures/" + name;
}

// A path in this process's scratch directory (ctest runs each test in its own process).
inline std::string temp_path(const std::string& name) {
  struct Dir {
    std::filesystem::path path = std::filesystem::temp_directory_path() /
                                 ("mixtape_models_test_" + std::to_string(::getpid()));
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Dir dir;
  return (dir.path / name).string();
}

using mixtape::testing::error_of;

}  // namespace mixtape::test
