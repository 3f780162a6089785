// Which tier confined code gets by default (ConfinementOptions::window_tier
// is on): the window tier where nothing it may be handed lies out of a
// window's reach, the checked tier where something does (a region exposed
// by address outside JitCache::allocate_exposed memory), and the checked
// tier when every window is held: honest code runs in either, and a
// window freed later is used again; through load() and through the
// start_load()/finish_loads() a Receiver uses. The ifuncs are the suite's clang-built
// counter and saxpy, compiled by the real compile worker.
#include "support/finish_loads.hpp"
#include "support/sanitized.hpp"
#include "support/temp_dir.hpp"
#include "support/window_checks.hpp"

#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <thread>

using namespace threechains;

namespace {

const CachedIfunc& loaded_confined(JitCache& cache, const Ifunc& ifunc) {
  (void)cache.load(ifunc.id(), ifunc.codec(), ifunc.code(), Confine::yes);
  const CachedIfunc* const loaded = cache.find_ifunc(ifunc.id());
  REQUIRE(loaded != nullptr);
  return *loaded;
}

std::span<std::byte> bytes_of(std::array<uint64_t, 4>& words) {
  return std::as_writable_bytes(std::span(words));
}

}  // namespace

TEST_CASE(
    "confined code takes the window tier by default, and the checked tier while memory it "
    "may be handed lies outside every window",
    "[confinement][window]") {
  if (test::skip_without_window_tier()) return;
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  alignas(16) uint64_t increment = 3;

  // Nothing exposed by address: a window, counting in memory exposed to windows.
  {
    JitCache cache;
    const CachedIfunc& loaded = loaded_confined(cache, counter);
    CHECK(cache.in_window(loaded));
    auto* const count = reinterpret_cast<uint64_t*>(cache.allocate_exposed("c", 8, true).data());
    CHECK_FALSE(cache.invoke(loaded, &increment, sizeof(increment), count).has_value());
    CHECK(*count == 3);
  }
  // A region exposed by address outside the arena (as a Receiver exposes a
  // target_args the application allocated itself): the checked tier, and
  // the counter counts there. In a window it would get null and trap.
  {
    JitCache cache;
    std::array<uint64_t, 4> outside{};
    cache.expose({{"outside", bytes_of(outside), true}});
    const CachedIfunc& loaded = loaded_confined(cache, counter);
    CHECK_FALSE(cache.in_window(loaded));
    CHECK_FALSE(cache.invoke(loaded, &increment, sizeof(increment), outside.data()).has_value());
    CHECK_FALSE(cache.invoke(loaded, &increment, sizeof(increment), outside.data()).has_value());
    CHECK(outside[0] == 6);
    // Exposed again with nothing outside: the next load takes a window.
    cache.expose({});
    CHECK(cache.evict(counter.id()));
    CHECK(cache.in_window(loaded_confined(cache, counter)));
  }
  // A region exposed by address that lies in the arena (a Receiver's
  // target_args from allocate_exposed) keeps the window tier.
  {
    JitCache cache;
    const std::span<std::byte> arena = cache.allocate_exposed("args", 64, true);
    cache.expose({{"target_args", arena, true}});
    const CachedIfunc& loaded = loaded_confined(cache, counter);
    CHECK(cache.in_window(loaded));
    CHECK_FALSE(cache.invoke(loaded, &increment, sizeof(increment), arena.data()).has_value());
    CHECK(*reinterpret_cast<uint64_t*>(arena.data()) == 3);
  }
  // Asked off: the checked tier, whatever is exposed.
  {
    JitOptions off;
    off.confinement.window_tier = false;
    JitCache cache(off);
    CHECK_FALSE(cache.in_window(loaded_confined(cache, counter)));
  }
}

TEST_CASE(
    "with every window held a confined code loads in the checked tier and runs, and a window "
    "freed later takes the next load",
    "[confinement][window]") {
  if (test::skip_without_window_tier()) return;
  // With a code cache on disk: the checked object made for want of a window
  // must not be stored where the window tier's object is looked up, or the
  // code would stay out of windows once one is free.
  const test::TempDir directory("threechains-window-default");
  JitOptions options;
  options.confinement.max_windows = 1;
  options.code_cache_directory = directory.path();
  JitCache cache(options);
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  const Ifunc saxpy = Ifunc::load(TC_SAXPY_BITCODE);
  CHECK(cache.in_window(loaded_confined(cache, counter)));

  // The one window is held: saxpy loads checked, and computes saxpy.
  const CachedIfunc& checked = loaded_confined(cache, saxpy);
  CHECK_FALSE(cache.in_window(checked));
  constexpr std::size_t n = 64;
  const auto [x, y] = test::exposed_saxpy_arrays(cache, n);
  alignas(16) test::SaxpyRequest request{2.0F, 1, n, x, y};
  CHECK_FALSE(cache.invoke(checked, &request, sizeof(request), nullptr).has_value());
  CHECK(y[5] == 11.0F);
  CHECK(cache.window_refusals().count == 0);  // no window is no refusal of the code

  // The counter's window freed: saxpy, loaded again, takes it (from a
  // compile, not from a stored checked object).
  CHECK(cache.evict(counter.id()));
  CHECK(cache.evict(saxpy.id()));
  const CachedIfunc& windowed = loaded_confined(cache, saxpy);
  CHECK(cache.in_window(windowed));
  CHECK_FALSE(cache.invoke(windowed, &request, sizeof(request), nullptr).has_value());
  CHECK(y[5] == 21.0F);
}

namespace {
// Waits for the load of `id` that start_load began; REQUIREs it loaded.
const CachedIfunc& finished(JitCache& cache, CodeId id) {
  const JitCache::FinishedLoad done = test::finished_load(cache, id);
  if (done.error) FAIL_CHECK(done.error->what());
  const CachedIfunc* const loaded = cache.find_ifunc(id);
  REQUIRE(loaded != nullptr);
  return *loaded;
}
}  // namespace

TEST_CASE(
    "loads a Receiver starts beside its serving take the checked tier when memory exposed "
    "meanwhile lies outside every window, or every window is held",
    "[confinement][window]") {
  if (test::skip_without_window_tier()) return;
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  const Ifunc saxpy = Ifunc::load(TC_SAXPY_BITCODE);
  alignas(16) uint64_t increment = 2;

  // Started for the window shape; before it links, the application exposes
  // memory outside the arena (a Receiver's set_target_args): the window
  // object is not linked into a window, the code is compiled again for the
  // checked tier and counts there.
  {
    JitCache cache;
    CHECK_FALSE(cache.start_load(counter.id(), counter.codec(), counter.code(), Confine::yes));
    std::array<uint64_t, 4> outside{};
    cache.expose({{"outside", bytes_of(outside), true}});
    const CachedIfunc& loaded = finished(cache, counter.id());
    CHECK_FALSE(cache.in_window(loaded));
    CHECK_FALSE(cache.invoke(loaded, &increment, sizeof(increment), outside.data()).has_value());
    CHECK(outside[0] == 2);
    CHECK(cache.window_refusals().count == 0);
  }
  // Every window held: the next load is checked, and it is not stored
  // under the window tier's key (once the window is free it takes it).
  {
    const test::TempDir directory("threechains-window-default-async");
    JitOptions options;
    options.confinement.max_windows = 1;
    options.code_cache_directory = directory.path();
    JitCache cache(options);
    CHECK_FALSE(cache.start_load(counter.id(), counter.codec(), counter.code(), Confine::yes));
    CHECK(cache.in_window(finished(cache, counter.id())));
    CHECK_FALSE(cache.start_load(saxpy.id(), saxpy.codec(), saxpy.code(), Confine::yes));
    CHECK_FALSE(cache.in_window(finished(cache, saxpy.id())));
    CHECK(cache.evict(counter.id()));
    CHECK(cache.evict(saxpy.id()));
    CHECK_FALSE(cache.start_load(saxpy.id(), saxpy.codec(), saxpy.code(), Confine::yes));
    CHECK(cache.in_window(finished(cache, saxpy.id())));
  }
}

namespace {

// This process's address space in bytes (VmSize), or 0 if unknown.
std::size_t address_space_in_use() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return 0;
  char line[256];
  std::size_t kib = 0;
  while (std::fgets(line, sizeof(line), status) != nullptr)
    if (std::sscanf(line, "VmSize: %zu kB", &kib) == 1) break;
  std::fclose(status);
  return kib << 10;
}
}  // namespace

TEST_CASE(
    "a window that cannot be made (no address space left) sends the load to the checked tier, "
    "refusing nothing",
    "[confinement][window]") {
  if (test::skip_without_window_tier()) return;
  if (test::kSanitized) {
    WARN("SKIP: a sanitizer's shadow memory cannot live under RLIMIT_AS");
    return;
  }
  // In a child whose address space may grow by 6 GiB (soft limit; the
  // compile worker may raise its own): a window's reservation (12 GiB on
  // x86-64 while it is made, 40 GiB a window on aarch64) cannot be had.
  // Until 951c945 that refused the load (errc::limit_exceeded), and a
  // Receiver banned the content for the honest key that sent it
  // (helper-23: an attacker with a handful of codes could get there).
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  const Ifunc saxpy = Ifunc::load(TC_SAXPY_BITCODE);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int failed = 0;
    try {
      const std::size_t in_use = address_space_in_use();
      rlimit limit{};
      if (in_use == 0 || getrlimit(RLIMIT_AS, &limit) != 0) _exit(10);
      limit.rlim_cur = in_use + (std::size_t{6} << 30);
      if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(11);
      JitCache cache;
      (void)cache.load(counter.id(), counter.codec(), counter.code(), Confine::yes);
      const CachedIfunc* const loaded = cache.find_ifunc(counter.id());
      if (loaded == nullptr) _exit(12);
      if (cache.in_window(*loaded)) failed |= 1;
      if (cache.window_refusals().count != 0) failed |= 2;  // no window is no refusal
      // The next load does not try for a window again (no double compile
      // needed to tell): it loads, checked.
      (void)cache.load(saxpy.id(), saxpy.codec(), saxpy.code(), Confine::yes);
      const CachedIfunc* const next = cache.find_ifunc(saxpy.id());
      if (next == nullptr || cache.in_window(*next)) failed |= 4;
      // The checked counter counts where it is handed memory.
      std::array<uint64_t, 4> own{};
      cache.expose({{"own", bytes_of(own), true}});
      alignas(16) uint64_t increment = 7;
      if (cache.invoke(*loaded, &increment, sizeof(increment), own.data()).has_value() ||
          own[0] != 7)
        failed |= 8;
    } catch (const std::exception& error) {
      std::fprintf(stderr, "child: %s\n", error.what());
      _exit(20);
    }
    _exit(failed);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  INFO(
      "child's exit code (bits: 1 in a window, 2 counted as a refusal, 4 the next load, 8 "
      "ran wrong; 10-11 no limit set; 12 not loaded; 20 threw, said on stderr)");
  CHECK(WEXITSTATUS(status) == 0);
}
