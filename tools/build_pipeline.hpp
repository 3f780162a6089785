// The pipeline behind threechains-build: compile, link per triple, pack. The
// same steps as cmake/ThreeChainsIfunc.cmake, for builds without CMake.
#pragma once

#include <threechains/container.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace threechains::build {

struct Output {
  CodecId codec = CodecId::bitcode;
  std::string path;
};

struct Request {
  std::string name;
  std::vector<std::string> sources;  // source files, prebuilt .bc/.ll/.o, or TRIPLE=FILE
  std::vector<std::string> triples;
  std::vector<std::string> gpus;  // GPU architectures (nvptx64): a GPU image in every container
  int optimisation = 2;
  bool preoptimised = false;
  bool prelinked = false;  // binary images linked here into a position-independent image
  std::vector<std::string> include_dirs;
  std::vector<std::string> defines;
  std::vector<std::string> extra_flags;
  std::vector<std::string> deps;
  std::string sign_key;
  std::string depfile;
  bool verbose = false;
  std::vector<Output> outputs;  // one container per codec
};

struct Built {
  std::string path;
  CodecId codec = CodecId::bitcode;
  std::size_t bytes = 0;
  std::string triples;  // comma-separated
};

// Builds every output of `request`; throws std::runtime_error naming the step
// (and the command) that failed.
[[nodiscard]] std::vector<Built> build(const Request& request);

}  // namespace threechains::build
