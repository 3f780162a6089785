// This process's threads, by the names they give themselves
// (pthread_setname_np): what the tests of the helpers beside the serving
// thread look for.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

namespace threechains::test {

// Whether this process has a thread named `name` (/proc/self/task/*/comm).
inline bool has_thread(const std::string& name) {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) return true;
  }
  return false;
}

}  // namespace threechains::test
