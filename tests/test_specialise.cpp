// CPU specialisation, checked in the machine code: the saxpy kernel JIT'd from
// shipped bitcode must use the host's vector registers, as wide as clang
// -march=native makes them from the same source on this host.
#include "support/disassembly.hpp"
#include "support/temp_dir.hpp"

#include <threechains/error.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

using namespace threechains;
using threechains::test::disassembly;
using threechains::test::widest_vector;

namespace {

// The machine code of `function` JIT'd from `container` at `level`, as dumped.
std::string jitted_function(const char* container, int level, const std::string& function) {
  const test::TempDir dump("tc-objects");
  JitCache cache({.optimisation_level = level, .dump_objects_to = dump.path().string()});
  const Ifunc kernel = Ifunc::load(container);
  (void)cache.load(kernel.id(), kernel.codec(), kernel.code());
  std::string code;
  for (const auto& entry : std::filesystem::directory_iterator(dump.path())) {
    if (std::string found = disassembly(entry.path(), function); !found.empty()) code = found;
  }
  return code;
}

}  // namespace

TEST_CASE("JIT'd saxpy uses the host's vector width, as clang -march=native does", "[jit][cpu]") {
#if defined(__x86_64__)
  const std::string native = disassembly(TC_SAXPY_NATIVE_OBJECT, "saxpy_clang_native");
  REQUIRE_FALSE(native.empty());
  const std::string shipped = jitted_function(TC_SAXPY_BITCODE, 2, "saxpy");
  REQUIRE_FALSE(shipped.empty());
  const int host = widest_vector(native);
  const int jitted = widest_vector(shipped);
  INFO("clang -march=native uses " << host << "-bit vectors; the JIT " << jitted << "-bit");
  CHECK(jitted == host);
  if (__builtin_cpu_supports("avx2")) {
    CHECK(jitted >= 256);  // AVX2: ymm at least
  } else {
    WARN("this host has no AVX2: checked the baseline (SSE2, 128-bit) only");
    CHECK(jitted == 128);
  }
  if (__builtin_cpu_supports("avx512f") && jitted == 256) {
    WARN(
        "this host has AVX-512, but LLVM's model of its CPU prefers 256-bit vectors "
        "(prefer-vector-width), for clang -march=native as for the JIT");
  }
  // Code generation alone keeps the vector width clang chose for the
  // baseline CPU when it optimised the shipped IR: SSE2's 128 bits.
  CHECK(widest_vector(jitted_function(TC_SAXPY_BITCODE_VECTORISED, 0, "saxpy")) == 128);
#else
  WARN("not an x86-64 host: the register check is written for x86-64 (skipped)");
#endif
}

TEST_CASE("a module passing wide vectors to code compiled elsewhere keeps its shipped CPU",
          "[jit][cpu]") {
#if defined(__x86_64__)
  // add8 takes and returns 256-bit vectors: in ymm registers with AVX, in
  // memory without. Its callers were compiled for the baseline, so the whole
  // module keeps the baseline, and its saxpy stays 128-bit even here.
  const std::string kept = jitted_function(TC_WIDE_INTERFACE, 2, "saxpy");
  REQUIRE_FALSE(kept.empty());
  CHECK(widest_vector(kept) == 128);
  CHECK(widest_vector(jitted_function(TC_WIDE_INTERFACE, 2, "add8")) <= 128);
#else
  WARN("not an x86-64 host: the register check is written for x86-64 (skipped)");
#endif
}

TEST_CASE("a function compiled for a CPU feature the host lacks keeps it; the rest runs",
          "[jit][cpu]") {
#if defined(__x86_64__)
  std::ifstream cpuinfo("/proc/cpuinfo");
  const std::string flags((std::istreambuf_iterator<char>(cpuinfo)), {});
  if (flags.find(" avx_vnni_int8") != std::string::npos) {
    WARN("this host has AVX-VNNI-INT8: nothing to check (skipped)");
    return;
  }
  // twice() is target("avxvnniint8"): compiled so, as a native build would,
  // and callable only after a CPU check in real code; main runs here.
  const Ifunc needs = Ifunc::load(TC_NEEDS_VNNI_INT8);
  JitCache cache;
  const LoadResult loaded = cache.load(needs.id(), needs.codec(), needs.code());
  int value = 21;
  loaded.entry(nullptr, 0, &value);
  CHECK(value == 21);
#else
  WARN("not an x86-64 host: the feature check is written for x86-64 (skipped)");
#endif
}
