// Tiered code: a container with, per triple, an object (tier 0, linked at
// once) and IR (tier 1, compiled for this CPU by a background thread and
// switched to between calls), under each JitOptions::tiering policy.
#include "ifuncs/matrix/matrix.h"
#include "support/disassembly.hpp"
#include "support/run_counter.hpp"
#include "support/temp_dir.hpp"

#include <threechains/codec.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <thread>

using namespace threechains;
namespace fs = std::filesystem;
using test::run_counter;

namespace {

// Calls promote_ready() as a dispatch loop would until something is promoted
// (or failed), for at most `limit`.
Promotions wait_for_promotion(JitCache& cache,
                              std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  Promotions done;
  while (std::chrono::steady_clock::now() < deadline) {
    done = cache.promote_ready();
    if (done.promoted != 0 || !done.failures.empty()) return done;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done;
}

}  // namespace

TEST_CASE("a tiered container carries both kinds per triple", "[jit][tiered]") {
  const Ifunc counter = Ifunc::load(TC_COUNTER_TIERED);
  CHECK(counter.codec() == CodecId::tiered);
  const ContainerInfo info = inspect_container(counter.code());
  CHECK(info.triples.size() == 4);  // x86_64 and aarch64, object and IR each
}

TEST_CASE("tiered code runs the object at once and switches to the IR compiled here",
          "[jit][tiered]") {
  const Ifunc counter = Ifunc::load(TC_COUNTER_TIERED);
  JitCache cache({.promote_after_calls = 1});
  const LoadResult loaded = cache.load(counter.id(), counter.codec(), counter.code());
  CHECK(loaded.tier == 0);
  CHECK(cache.promotions_pending());
  IfuncMain tier0 = cache.find(counter.id());
  REQUIRE(tier0 == loaded.entry);
  cache.count_call(counter.id());  // the dispatch loop counts the call it makes
  CHECK(run_counter(tier0) == 8);

  const Promotions done = wait_for_promotion(cache);
  INFO((done.failures.empty() ? std::string() : done.failures.front()));
  REQUIRE(done.promoted == 1);
  CHECK_FALSE(cache.promotions_pending());
  IfuncMain tier1 = cache.find(counter.id());
  CHECK(tier1 != tier0);
  CHECK(run_counter(tier1) == 8);
  CHECK(run_counter(tier0) == 8);  // tier 0 stays loaded until the ifunc is evicted
  CHECK(cache.evict(counter.id()));
  CHECK(cache.find(counter.id()) == nullptr);
}

TEST_CASE("the tiering policy decides what runs", "[jit][tiered]") {
  const Ifunc counter = Ifunc::load(TC_COUNTER_TIERED);
  SECTION("object only: never compiled") {
    JitCache cache({.tiering = Tiering::object_only});
    const LoadResult loaded = cache.load(counter.id(), counter.codec(), counter.code());
    CHECK(loaded.tier == 0);
    cache.count_call(counter.id());
    CHECK_FALSE(cache.promotions_pending());
    CHECK(run_counter(loaded.entry) == 8);
  }
  SECTION("IR only: compiled before the first call") {
    JitCache cache({.tiering = Tiering::ir_only});
    const LoadResult loaded = cache.load(counter.id(), counter.codec(), counter.code());
    CHECK(loaded.tier == 1);
    CHECK_FALSE(cache.promotions_pending());
    CHECK(run_counter(loaded.entry) == 8);
  }
  SECTION("by default, promoted from the second call") {
    JitCache cache;
    const LoadResult loaded = cache.load(counter.id(), counter.codec(), counter.code());
    cache.count_call(counter.id());
    CHECK(wait_for_promotion(cache, std::chrono::milliseconds(300)).promoted == 0);
    cache.count_call(counter.id());
    CHECK(wait_for_promotion(cache).promoted == 1);
    CHECK(cache.find(counter.id()) != loaded.entry);
  }
  SECTION("promoted after three calls, not before") {
    JitCache cache({.promote_after_calls = 3});
    const LoadResult loaded = cache.load(counter.id(), counter.codec(), counter.code());
    cache.count_call(counter.id());
    cache.count_call(counter.id());
    // Nothing was submitted: however long we wait, nothing is promoted.
    CHECK(wait_for_promotion(cache, std::chrono::milliseconds(300)).promoted == 0);
    CHECK(cache.find(counter.id()) == loaded.entry);
    cache.count_call(counter.id());
    CHECK(wait_for_promotion(cache).promoted == 1);
    CHECK(cache.find(counter.id()) != loaded.entry);
  }
  SECTION("single-kind containers load as before") {
    JitCache cache;
    const Ifunc binary = Ifunc::load(TC_COUNTER_BINARY);
    const LoadResult object = cache.load(binary.id(), binary.codec(), binary.code());
    CHECK(object.tier == 0);
    const Ifunc bitcode = Ifunc::load(TC_COUNTER_BITCODE);
    const LoadResult compiled = cache.load(bitcode.id(), bitcode.codec(), bitcode.code());
    CHECK(compiled.tier == 1);
    cache.count_call(binary.id());
    CHECK_FALSE(cache.promotions_pending());
  }
}

TEST_CASE("evicting tiered code while its tier 1 compiles drops the compile", "[jit][tiered]") {
  const Ifunc counter = Ifunc::load(TC_COUNTER_TIERED);
  JitCache cache({.promote_after_calls = 0});  // due from the load on
  (void)cache.load(counter.id(), counter.codec(), counter.code());
  cache.start_due_compiles();  // as a dispatch loop would after its credits: the compile runs
  CHECK(cache.compiles_in_progress());
  CHECK(cache.evict(counter.id()));
  CHECK_FALSE(cache.compiles_in_progress());
  CHECK_FALSE(cache.promotions_pending());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(cache.promote_ready().promoted == 0);  // the finished compile is for evicted code
  CHECK(cache.find(counter.id()) == nullptr);
  // Loaded again: a new promotion, which completes.
  (void)cache.load(counter.id(), counter.codec(), counter.code());
  CHECK(wait_for_promotion(cache).promoted == 1);
  CHECK(run_counter(cache.find(counter.id())) == 8);
}

TEST_CASE("a restarted target links stored tier-1 code at once", "[jit][tiered][code_cache]") {
  const test::TempDir dir("tiered-store");
  const JitOptions options{.code_cache_directory = (dir.path() / "objects").string(),
                           .promote_after_calls = 1};
  const Ifunc counter = Ifunc::load(TC_COUNTER_TIERED);
  {
    JitCache cache(options);
    CHECK(cache.load(counter.id(), counter.codec(), counter.code()).tier == 0);
    cache.count_call(counter.id());
    REQUIRE(wait_for_promotion(cache).promoted == 1);
  }
  JitCache restarted(options);
  const LoadResult loaded = restarted.load(counter.id(), counter.codec(), counter.code());
  CHECK(loaded.tier == 1);
  CHECK(loaded.from_code_cache);
  CHECK_FALSE(restarted.promotions_pending());
  CHECK(run_counter(loaded.entry) == 8);
}

TEST_CASE("tier 0 runs baseline vectors, tier 1 this host's", "[jit][tiered][cpu]") {
#if defined(__x86_64__)
  const test::TempDir dump("tiered-objects");
  const Ifunc saxpy = Ifunc::load(TC_SAXPY_TIERED);
  JitCache cache({.dump_objects_to = dump.path().string(), .promote_after_calls = 1});
  (void)cache.load(saxpy.id(), saxpy.codec(), saxpy.code());
  cache.count_call(saxpy.id());
  REQUIRE(wait_for_promotion(cache).promoted == 1);
  // Two objects went through the linker: the shipped one and the one compiled here.
  std::vector<int> widths;
  for (const auto& entry : fs::directory_iterator(dump.path())) {
    const std::string code = test::disassembly(entry.path(), "saxpy");
    if (!code.empty()) widths.push_back(test::widest_vector(code));
  }
  std::sort(widths.begin(), widths.end());
  REQUIRE(widths.size() == 2);
  CHECK(widths.front() == 128);  // tier 0: clang -O2 for the baseline x86-64 (SSE2)
  if (__builtin_cpu_supports("avx2")) {
    CHECK(widths.back() >= 256);
  } else {
    WARN("this host has no AVX2: tier 1 checked against the baseline only");
    CHECK(widths.back() == 128);
  }
#else
  WARN("not an x86-64 host: the register check is written for x86-64 (skipped)");
#endif
}

TEST_CASE("code with writable globals stays at tier 0, its state intact", "[jit][tiered]") {
  // static_data keeps counters in .data and .bss: tier 1, linked apart, would
  // start from fresh copies of them.
  const Ifunc stateful = Ifunc::load(TC_STATIC_DATA_TIERED);
  JitCache cache({.promote_after_calls = 1});
  const LoadResult loaded = cache.load(stateful.id(), stateful.codec(), stateful.code());
  REQUIRE(loaded.tier == 0);
  matrix_result r{};
  cache.count_call(stateful.id());
  loaded.entry(nullptr, 0, &r);
  CHECK(r.values[0] == 40);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  Promotions done;
  while (cache.promotions_pending() && std::chrono::steady_clock::now() < deadline) {
    const Promotions round = cache.promote_ready();
    done.promoted += round.promoted;
    done.stay_at_tier0 += round.stay_at_tier0;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(done.promoted == 0);
  CHECK(done.stay_at_tier0 == 1);
  CHECK(cache.find(stateful.id()) == loaded.entry);
  cache.find(stateful.id())(nullptr, 0, &r);
  CHECK(r.values[0] == 41);  // the same .data as the first call
  CHECK(r.calls == 2);
}

TEST_CASE("an evicted ifunc's JITDylib, reused, gives the next one fresh state", "[jit]") {
  // Evicted JITDylibs are emptied and reused; what loads into one must see
  // its own data from scratch, as in a new JITDylib.
  JitCache cache;
  for (const char* path : {TC_MATRIX_STATIC_DATA_BITCODE, TC_MATRIX_STATIC_DATA_BINARY,
                           TC_MATRIX_THREAD_LOCAL_BITCODE, TC_MATRIX_CXX_BITCODE}) {
    const Ifunc ifunc = Ifunc::load(path);
    for (int round = 0; round < 3; ++round) {
      INFO(path << ", round " << round);
      const LoadResult loaded = cache.load(ifunc.id(), ifunc.codec(), ifunc.code());
      matrix_result r{};
      loaded.entry(nullptr, 0, &r);
      CHECK(r.calls == 1);
      if (std::string(path) != TC_MATRIX_THREAD_LOCAL_BITCODE &&
          std::string(path) != TC_MATRIX_CXX_BITCODE) {
        CHECK(r.values[0] == 40);  // static_data's .data, as initialised
        CHECK(r.values[1] == 1);   // its .bss, zeroed
      }
      CHECK(cache.evict(ifunc.id()));
    }
  }
}
