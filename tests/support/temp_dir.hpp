// A directory of its own for one test, removed with everything in it at the end.
#pragma once

#include <stdlib.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

namespace threechains::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "tc") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace threechains::test
