// Disassembly of JIT'd code for tests that check which instructions the host runs.
#pragma once

#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace threechains::test {

// `llvm-objdump -d` of one function in `object`, or "" if absent.
inline std::string disassembly(const std::filesystem::path& object, const std::string& function) {
  const std::string command =
      std::string(TC_LLVM_OBJDUMP) + " -d --no-show-raw-insn '" + object.string() + "' 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string all;
  std::array<char, 4096> chunk{};
  while (std::fgets(chunk.data(), chunk.size(), pipe) != nullptr) all += chunk.data();
  pclose(pipe);
  const std::size_t start = all.find("<" + function + ">:");
  if (start == std::string::npos) return {};
  const std::size_t end = all.find("\n\n", start);
  return all.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// The widest x86 vector register class the code names: 512, 256, 128 or 0.
inline int widest_vector(const std::string& code) {
  if (code.find("%zmm") != std::string::npos) return 512;
  if (code.find("%ymm") != std::string::npos) return 256;
  if (code.find("%xmm") != std::string::npos) return 128;
  return 0;
}

}  // namespace threechains::test
