// The hard-linking matrix: every case is a real ifunc library built by clang-22,
// shipped as bitcode, as a relocatable object and as a pre-linked image, sent through a real UCX
// connection to a Receiver in another process, and run there. Nothing of any
// ifunc exists on the target's disk.
#include "ifuncs/matrix/matrix.h"
#include "support/two_process.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <string>

using namespace threechains;
using namespace threechains::test;

// What the target process exports to injected code (the test binary is linked
// with -rdynamic, so the JIT finds these by name).
extern "C" {
__attribute__((visibility("default"))) int64_t threechains_test_target_value = 1000;
__attribute__((visibility("default"))) int64_t threechains_test_target_add(int64_t x) {
  return threechains_test_target_value + x;
}
}

namespace {

struct MatrixOutcome {
  matrix_result result;
  uint64_t dispatched;
  uint64_t errors;
  char first_error[512];
};

// How the matrix ships each ifunc: bitcode, a relocatable object (JITLink
// links it on the target), or an image pre-linked at build time (mapped on
// the target with no linker: threechains_add_ifunc PRELINKED).
enum class Kind { bitcode, object, prelinked };
struct Bitcode {
  static constexpr Kind kind = Kind::bitcode;
};
struct Object {
  static constexpr Kind kind = Kind::object;
};
struct Prelinked {
  static constexpr Kind kind = Kind::prelinked;
};

template <class T, class C>
struct Case {
  static constexpr Transport transport = T::transport;
  static constexpr Kind kind = C::kind;
};

const char* pick(Kind kind, const char* bitcode, const char* object, const char* prelinked) {
  return kind == Kind::bitcode ? bitcode : kind == Kind::object ? object : prelinked;
}

#define TC_MATRIX(NAME) TC_MATRIX_##NAME##_BITCODE, TC_MATRIX_##NAME##_BINARY, TC_MATRIX_##NAME##_PRELINKED
const char* container(const std::string& name, Kind kind) {
  if (name == "libc_libm") return pick(kind, TC_MATRIX(LIBC_LIBM));
  if (name == "target_symbols") return pick(kind, TC_MATRIX(TARGET_SYMBOLS));
  if (name == "static_data") return pick(kind, TC_MATRIX(STATIC_DATA));
  if (name == "atomics") return pick(kind, TC_MATRIX(ATOMICS));
  if (name == "openmp") return pick(kind, TC_MATRIX(OPENMP));
  if (name == "thread_local") return pick(kind, TC_MATRIX(THREAD_LOCAL));
  if (name == "cxx") return pick(kind, TC_MATRIX(CXX));
#ifdef TC_HAVE_FORTRAN
  if (name == "fortran") return pick(kind, TC_MATRIX(FORTRAN));
#endif
#ifdef TC_HAVE_RUST
  if (name == "rust") return pick(kind, TC_MATRIX(RUST));
#endif
  throw std::runtime_error("no matrix ifunc " + name);
}
#undef TC_MATRIX

// Sends `ifunc` `times` times with `payload` to a fresh child target and returns
// what the ifunc recorded there.
template <class Payload>
MatrixOutcome run_on_target(Transport transport, const Ifunc& ifunc, const Payload& payload,
                            int times) {
  // The target's import policy: the safe set, plus what this target chose to
  // expose (its own two symbols) and to allow (libomp, by path).
  ReceiverOptions options;
  options.jit.imports.allow_symbol("threechains_test_target_value")
      .allow_symbol("threechains_test_target_add")
      .allow_library("/usr/lib/llvm-22/lib/libomp.so.5");
  ChildTarget<MatrixOutcome> target(transport, [](ChildContext& context) {
    static matrix_result result{};
    context.receiver.set_target_args(&result);
    ChildTarget<MatrixOutcome>::serve_until_closed(context.receiver);
    MatrixOutcome outcome{};
    outcome.result = result;
    outcome.dispatched = context.receiver.stats().frames_dispatched;
    outcome.errors = context.errors.size();
    context.first_error(outcome.first_error);
    return outcome;
  }, options);
  TestSource source(transport, target.port());
  for (int i = 0; i < times; ++i) (void)send(source.channel, ifunc, payload);
  source.channel.close();
  return target.result();
}

}  // namespace

TEMPLATE_TEST_CASE("the hard-linking matrix runs on a remote target", "[ucx][linking]",
                   (Case<Shm, Bitcode>), (Case<Shm, Object>), (Case<Shm, Prelinked>),
                   (Case<Tcp, Bitcode>), (Case<Tcp, Object>), (Case<Tcp, Prelinked>)) {
  constexpr Kind codec = TestType::kind;
  constexpr Transport transport = TestType::transport;
  const uint64_t no_payload = 0;

  SECTION("libc and libm calls") {
    const Ifunc ifunc = Ifunc::load(container("libc_libm", codec));
    CHECK(ifunc.info().deps == std::vector<std::string>{"libm.so.6"});
    const MatrixOutcome out = run_on_target(transport, ifunc, 0.5, 2);
    INFO(out.first_error);
    REQUIRE(out.errors == 0);
    CHECK(out.result.calls == 2);
    CHECK(out.result.values[0] == static_cast<int64_t>(std::cos(0.5) * 1000000.0));
    CHECK(std::string(out.result.text) == "42-libc-0.50");
    CHECK(out.result.values[1] == 12);
    CHECK(out.result.values[2] == 12);
  }
  SECTION("a global and a function of the target process, by name") {
    const MatrixOutcome out =
        run_on_target(transport, Ifunc::load(container("target_symbols", codec)), no_payload, 2);
    INFO(out.first_error);
    REQUIRE(out.errors == 0);
    CHECK(out.result.calls == 2);
    CHECK(out.result.values[0] == 1005);  // second call sees the first call's += 5
    CHECK(out.result.values[1] == 1017);
  }
  SECTION("the ifunc's own .data, .rodata, .bss and function-pointer table") {
    const MatrixOutcome out =
        run_on_target(transport, Ifunc::load(container("static_data", codec)), no_payload, 3);
    INFO(out.first_error);
    REQUIRE(out.errors == 0);
    CHECK(out.result.calls == 3);
    CHECK(out.result.values[0] == 42);  // 40, 41, 42: .data persists between calls
    CHECK(out.result.values[1] == 3);   // .bss counted 1, 2, 3
    CHECK(out.result.values[2] == 25);
    CHECK(out.result.values[3] == 30);  // table[3 & 1] = thrice
    CHECK(std::string(out.result.text) == "rodata survives");
  }
  SECTION("C11 atomics with a 16-byte compare-exchange") {
    const MatrixOutcome out =
        run_on_target(transport, Ifunc::load(container("atomics", codec)), no_payload, 4);
    INFO(out.first_error);
    REQUIRE(out.errors == 0);
    CHECK(out.result.values[0] == 4);
    CHECK(out.result.values[1] == 1);
    CHECK(out.result.values[2] == 4);
    CHECK(out.result.values[3] == 8);
  }
  SECTION("an OpenMP parallel-for reduction through libomp") {
    const Ifunc ifunc = Ifunc::load(container("openmp", codec));
    REQUIRE(ifunc.info().deps.size() == 1);
    CHECK_THAT(ifunc.info().deps[0], Catch::Contains("libomp"));
    const MatrixOutcome out = run_on_target(transport, ifunc, int64_t{100000}, 2);
    INFO(out.first_error);
    REQUIRE(out.errors == 0);
    CHECK(out.result.calls == 2);
    CHECK(out.result.values[0] == int64_t{100000} * 100001 / 2);
  }
  SECTION("a C++ ifunc: template, lambda, exception thrown and caught inside") {
    const MatrixOutcome out =
        run_on_target(transport, Ifunc::load(container("cxx", codec)), no_payload, 2);
    INFO(out.first_error);
    REQUIRE(out.errors == 0);
    CHECK(out.result.calls == 2);
    CHECK(out.result.values[0] == 100);
    CHECK(out.result.values[1] == -84);
    CHECK(out.result.values[2] == 42);
  }
  // Other languages: the same ABI (bind(c), extern "C"), the same pipeline.
  // 1*16 + 2*15 + ... + 16*1 = 816; the payload's four values sum to 10.
  const std::array<int64_t, 4> four{1, 2, 3, 4};
  SECTION("a Fortran ifunc (flang-22): dot_product and sum over the payload") {
#ifdef TC_HAVE_FORTRAN
    const MatrixOutcome out =
        run_on_target(transport, Ifunc::load(container("fortran", codec)), four, 2);
    INFO(out.first_error);
    REQUIRE(out.errors == 0);
    CHECK(out.result.calls == 2);
    CHECK(out.result.values[0] == 816);
    CHECK(out.result.values[1] == 10);
#else
    WARN("SKIPPED: no Fortran compiler for ifuncs (install flang-22)");
#endif
  }
  SECTION("a Rust ifunc (rustc, no_std): iterator folds over the payload") {
#ifdef TC_HAVE_RUST
    const MatrixOutcome out =
        run_on_target(transport, Ifunc::load(container("rust", codec)), four, 2);
    INFO(out.first_error);
    REQUIRE(out.errors == 0);
    CHECK(out.result.calls == 2);
    CHECK(out.result.values[0] == 816);
    CHECK(out.result.values[1] == 10);
#else
    WARN("SKIPPED: no Rust compiler for ifuncs (install rustc-web)");
#endif
  }
  SECTION("a thread-local variable") {
    // Bitcode: ORC compiles it with emulated TLS. Binary: threechains_add_ifunc
    // builds objects with -femulated-tls (native ELF TLS is refused; see test_jit).
    const MatrixOutcome out =
        run_on_target(transport, Ifunc::load(container("thread_local", codec)), no_payload, 2);
    INFO(out.first_error);
    REQUIRE(out.errors == 0);
    CHECK(out.result.calls == 2);
    CHECK(out.result.values[0] == 102);
  }
}
