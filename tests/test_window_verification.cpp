// The window verifier beside the thread that finishes loads: a Receiver's
// loads (JitCache::start_load, finish_loads) hand each window object to a
// thread of its own, which links it into its window and reads it, so the
// serving thread goes on serving while a large object is linked and read
// (threechains-bench-compile-isolation --tier window,
// threechains-bench-compile-end), and the code runs only once its verdict
// is in.
#include "support/finish_loads.hpp"
#include "support/stored_object.hpp"
#include "support/temp_dir.hpp"
#include "support/threads.hpp"
#include "support/window_checks.hpp"

#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace threechains;
using namespace std::chrono_literals;

using test::has_thread;

// Named without "window": ThreadSanitizer runs it (CMakePresets.json).
TEST_CASE("confined code a Receiver's load links is verified on a thread beside it, then runs",
          "[confinement][window]") {
  if (test::skip_without_window_tier()) return;
  REQUIRE_FALSE(has_thread("tc-verify"));
  JitCache cache;
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  REQUIRE_FALSE(
      cache.start_load(counter.id(), counter.codec(), counter.code(), Confine::yes).has_value());
  const JitCache::FinishedLoad done = test::finished_load(cache, counter.id());
  INFO((done.error ? done.error->what() : std::string("loaded")));
  REQUIRE(done.result.has_value());
  // Linked and read there, not on this thread.
  CHECK(has_thread("tc-verify"));
  const CachedIfunc* const loaded = cache.find_ifunc(counter.id());
  REQUIRE(loaded != nullptr);
  CHECK(cache.in_window(*loaded));
  // Its functions named for the target's own fault reports: the link
  // found them there, and this thread entered them when it took it back.
  const auto* const entry = reinterpret_cast<const void*>(loaded->main);
  std::uintptr_t offset = 1;
  const std::string* const name = cache.function_at(entry, offset);
  REQUIRE(name != nullptr);
  CHECK(*name == done.result->name + "_main");
  CHECK(offset == 0);
  auto* const count = reinterpret_cast<uint64_t*>(cache.allocate_exposed("count", 8, true).data());
  alignas(16) uint64_t increment = 5;
  CHECK_FALSE(cache.invoke(*loaded, &increment, sizeof(increment), count).has_value());
  CHECK(*count == 5);
  // Evicted: named no more (its window may hold another code next).
  CHECK(cache.evict(counter.id()));
  CHECK(cache.function_at(entry, offset) == nullptr);
}

namespace {

// A code store in `directory` with one window, filled with `code`'s window
// object by a first cache: what the tests below then change.
JitOptions one_window_storing(const test::TempDir& directory, const Ifunc& code) {
  JitOptions options;
  options.code_cache_directory = directory.path();
  // A window a failed or cancelled load kept would leave none.
  options.confinement.max_windows = 1;
  JitCache cache(options);
  (void)cache.load(code.id(), code.codec(), code.code(), Confine::yes);
  const CachedIfunc* const first = cache.find_ifunc(code.id());
  REQUIRE(first != nullptr);
  REQUIRE(cache.in_window(*first));
  return options;
}

// Loads `code` as a Receiver does (start_load, then finish_loads): it must
// load, compiled again (not the stored object), into a window.
const CachedIfunc& loaded_again_in_window(JitCache& cache, const Ifunc& code) {
  REQUIRE_FALSE(cache.start_load(code.id(), code.codec(), code.code(), Confine::yes).has_value());
  const JitCache::FinishedLoad done = test::finished_load(cache, code.id());
  INFO((done.error ? done.error->what() : std::string("loaded")));
  REQUIRE(done.result.has_value());
  CHECK_FALSE(done.result->from_code_cache);
  const CachedIfunc* const loaded = cache.find_ifunc(code.id());
  REQUIRE(loaded != nullptr);
  CHECK(cache.in_window(*loaded));
  return *loaded;
}

// big_table in `cache` sums what the same code unconfined sums, for each
// word; returns that sum.
uint64_t big_table_sums_as_unconfined(JitCache& cache, const CachedIfunc& loaded, const Ifunc& big,
                                      std::initializer_list<uint64_t> words) {
  JitCache plain;
  (void)plain.load(big.id(), big.codec(), big.code(), Confine::no);
  auto* const sum = reinterpret_cast<uint64_t*>(cache.allocate_exposed("sum", 8, true).data());
  uint64_t expected = 0;
  for (const uint64_t word : words) {
    alignas(16) uint64_t payload = word;
    CHECK_FALSE(cache.invoke(loaded, &payload, sizeof(payload), sum).has_value());
    CHECK_FALSE(plain.invoke(*plain.find_ifunc(big.id()), &payload, sizeof(payload), &expected)
                    .has_value());
  }
  CHECK(*sum == expected);
  return expected;
}

}  // namespace

TEST_CASE(
    "a large code's stored object the verifier beside refuses is compiled again, and loads "
    "cancelled while verified give their place back",
    "[confinement][window]") {
  if (test::skip_without_x86_window_checks()) return;
  // JitCache prepares every confined load beside the caller: a stored
  // object found there is linked and verified aside.
  const Ifunc big = Ifunc::load(TC_BIG_TABLE);
  const test::TempDir directory("threechains-window-verification");
  const JitOptions options = one_window_storing(directory, big);
  test::tamper_stored_window_gs_access(directory.path());

  JitCache cache(options);
  // Loads dropped while their window object may be with the verifier: each
  // link waits for its verdict, then gives the one window back.
  for (int round = 0; round < 30; ++round) {
    REQUIRE_FALSE(cache.start_load(big.id(), big.codec(), big.code(), Confine::yes).has_value());
    for (int poll = 0; poll < round % 6; ++poll) {
      (void)cache.finish_loads();
      std::this_thread::sleep_for(std::chrono::microseconds(200 * (round % 3)));
    }
    (void)cache.evict(big.id());  // pending (preparing, compiling, verified) or loaded
  }
  // The verdicts of the links dropped last come back meanwhile.
  for (const auto until = std::chrono::steady_clock::now() + 300ms;
       std::chrono::steady_clock::now() < until;) {
    (void)cache.finish_loads();
    std::this_thread::sleep_for(1ms);
  }
  // The tampered object is refused aside; the code compiles again, into
  // the window the cancelled loads gave back.
  const CachedIfunc& loaded = loaded_again_in_window(cache, big);
  (void)big_table_sums_as_unconfined(cache, loaded, big, {7, 65535, 123456789});
}

// Named for ThreadSanitizer's filter too (CMakePresets.json).
TEST_CASE(
    "a large code's stored object that fails to link beside is compiled again, into the place "
    "its link gave back",
    "[confinement][window]") {
  if (test::skip_without_window_tier()) return;
  const Ifunc big = Ifunc::load(TC_BIG_TABLE);
  const test::TempDir directory("threechains-window-link-refused");
  const JitOptions options = one_window_storing(directory, big);
  // Its entry renamed: the stored object reads well and links, but defines
  // no big_table_main, so tc-verify's link fails and nothing is verified.
  test::rename_in_stored_window_object(directory.path(), "big_table_main", "big_table_mair");

  JitCache cache(options);
  // Compiled again, into the one window, which the failed link gave back.
  const CachedIfunc& loaded = loaded_again_in_window(cache, big);
  CHECK(big_table_sums_as_unconfined(cache, loaded, big, {65535}) != 0);
}

// helper-33's attack (2026-11-29): a link that fails after its window gave
// it memory. LLVM 22's MapperJITLinkMemoryManager abandons such an
// allocation and never hands its range out again, so the window, given
// back as it was, had too little room left for the next code, which then
// took the checked tier (its window object counted as refused).
TEST_CASE(
    "a window object that takes its whole window and fails to link leaves the window whole for the "
    "next code",
    "[confinement][window]") {
  // The hog's size is fitted to x86-64's link of it (its code, stubs and
  // GOT a page each): elsewhere it might not fill its window.
  if (test::skip_without_x86_window_checks()) return;
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  const test::TempDir directory("threechains-window-hog");
  const JitOptions options = one_window_storing(directory, counter);
  // Under the counter's key, as a compromised worker or a writer of the
  // store would leave it: 2047 MiB less 8 KiB of zeroed data and an
  // import (tests/ifuncs/window_hog.c).
  const std::string hog = test::read_whole_file(TC_WINDOW_HOG_OBJECT);
  REQUIRE(hog.size() > 64);
  test::replace_stored_window_object(directory.path(), hog);

  JitCache cache(options);
  // The hog refused, the counter compiled again: in the one window, which
  // the hog's failed link did not leave full.
  const CachedIfunc& loaded = loaded_again_in_window(cache, counter);
  INFO(cache.window_refusals().last);
  CHECK(cache.window_refusals().count == 0);
  auto* const count = reinterpret_cast<uint64_t*>(cache.allocate_exposed("count", 8, true).data());
  alignas(16) uint64_t increment = 3;
  CHECK_FALSE(cache.invoke(loaded, &increment, sizeof(increment), count).has_value());
  CHECK(*count == 3);
}
