// threechains-build: builds an ifunc container without CMake, as the research
// built its ifuncs with Makefiles. The same pipeline as threechains_add_ifunc:
// each source compiled once per triple by its language's compiler (clang-22,
// flang-22, rustc), several sources linked into one image per triple
// (llvm-link-22, ld.lld-22 -r), the images packed (and signed) into one fat
// container. Prebuilt .bc/.ll/.o inputs join as they are.
//
//   threechains-build -n counter -o counter.tcc --depfile counter.d counter.c
#include "build_pipeline.hpp"

#include <fmt/core.h>
#include <CLI/CLI.hpp>

namespace tb = threechains::build;

int main(int argc, char** argv) {
  CLI::App app{"Build an ifunc library into a ThreeChains code container"};
  tb::Request request;
  std::string codec = "bitcode";
  std::string output;
  bool gpu_only = false;
  app.add_option("sources", request.sources,
                 "C/C++ (.c .cc .cpp .cxx), Fortran (.f .f90 ...), Rust (.rs), or prebuilt "
                 ".bc/.ll (bitcode) and .o (binary); TRIPLE=FILE for a prebuilt input of one "
                 "triple")
      ->required();
  app.add_option("-n,--name", request.name, "ifunc name; its entry point is <name>_main")
      ->required();
  app.add_option("-c,--codec", codec, "bitcode, binary, or both")
      ->check(CLI::IsMember({"bitcode", "binary", "both"}));
  app.add_option("-t,--triple", request.triples,
                 "target triple (repeatable; default x86_64-linux-gnu aarch64-linux-gnu)");
  app.add_option("--gpu", request.gpus,
                 "also compile the C/C++ sources for this GPU (nvptx64): the target's GPU runs "
                 "<name>_main as a kernel (docs/gpu.md)")
      ->check(CLI::IsMember({"nvptx64"}));
  app.add_flag("--gpu-only", gpu_only, "no CPU images (with --gpu)");
  app.add_option("-O", request.optimisation, "optimisation level of the compile (0..3)")
      ->check(CLI::Range(0, 3));
  app.add_flag("--preoptimised", request.preoptimised,
               "ship bitcode the compiler optimised for the triple's baseline CPU instead of "
               "leaving that to the target (faster load, slower code on wide-vector hosts)");
  app.add_flag("--prelinked", request.prelinked,
               "link binary images here (ld.lld -shared) into a position-independent image the "
               "target maps with no linker: a first call without JITLink (no native TLS, no "
               "constructors; gdb and perf do not see it)");
  app.add_option("-I", request.include_dirs, "include directory for C, C++ and Fortran");
  app.add_option("-D", request.defines, "preprocessor definition for C and C++");
  app.add_option("--flag", request.extra_flags, "extra flag for every C/C++ compile");
  app.add_option("--dep", request.deps,
                 "shared library the ifunc needs on the target (e.g. libm.so.6)");
  app.add_option("--sign-key", request.sign_key, "secret key file to sign the container with");
  app.add_option("-o,--output", output,
                 "container to write (default <name>.tcc; with --codec both, <stem>.bitcode.tcc "
                 "and <stem>.binary.tcc)");
  app.add_option("--depfile", request.depfile,
                 "write the headers the sources include, as a Makefile rule for the output(s)");
  app.add_flag("-v,--verbose", request.verbose, "print each command");
  CLI11_PARSE(app, argc, argv);

  if (gpu_only && request.gpus.empty()) {
    fmt::print(stderr, "threechains-build: --gpu-only needs --gpu nvptx64\n");
    return 2;
  }
  if (request.triples.empty() && !gpu_only)
    request.triples = {"x86_64-linux-gnu", "aarch64-linux-gnu"};
  if (output.empty()) output = request.name + ".tcc";
  if (codec == "both") {
    const std::string stem =
        output.ends_with(".tcc") ? output.substr(0, output.size() - 4) : output;
    request.outputs = {{threechains::CodecId::bitcode, stem + ".bitcode.tcc"},
                       {threechains::CodecId::binary, stem + ".binary.tcc"}};
  } else {
    request.outputs = {
        {codec == "bitcode" ? threechains::CodecId::bitcode : threechains::CodecId::binary,
         output}};
  }
  try {
    for (const tb::Built& built : tb::build(request)) {
      fmt::print("threechains-build: {} ({} codec, {} bytes, {})\n", built.path,
                 threechains::to_string(built.codec), built.bytes, built.triples);
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "threechains-build: {}\n", e.what());
    return 1;
  }
}
