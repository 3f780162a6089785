// The window tier of confined code (ConfinementOptions::window_tier, issue
// 33): a JitCache compiles confined bitcode that takes the window shape in
// its compile worker, links it into a window of its own, runs the verifier
// on the machine code as linked, and runs it there; code that does not take
// the shape keeps the checked tier. The ifuncs are the clang-built
// containers of the test suite, compiled by the real worker; the attacker
// (tests/ifuncs/window_escape.c) tries each way out from inside a window.
#include "support/stored_object.hpp"
#include "support/temp_dir.hpp"
#include "support/window_checks.hpp"

#include <threechains/error.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include <unwind.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

using namespace threechains;
using namespace std::chrono_literals;

// libgcc's: the FDE registered or found for `pc`.
extern "C" const void* _Unwind_Find_FDE(const void* pc, void* bases);

namespace {

JitOptions window_options() {
  JitOptions options;
  options.confinement.window_tier = true;
  options.confinement.time_budget = 20ms;
  return options;
}

// `ifunc` loaded confined into `cache`, as cached there.
const CachedIfunc& loaded_confined(JitCache& cache, const Ifunc& ifunc) {
  (void)cache.load(ifunc.id(), ifunc.codec(), ifunc.code(), Confine::yes);
  const CachedIfunc* const loaded = cache.find_ifunc(ifunc.id());
  REQUIRE(loaded != nullptr);
  return *loaded;
}

// A target global that no region exposes, in the shape of a counter.
constexpr uint64_t kCanaryWord = 0x5a5a5a5a5a5a5a5aULL;
std::array<uint64_t, 8> g_canary{};

struct Order {
  uint64_t command;
  uint64_t argument;
};
enum : uint64_t { add = 0, write_address, read_address, spin, divide, write_code, far_store };

}  // namespace

TEST_CASE(
    "confined code that takes the window shape runs in a window, beside checked confined code",
    "[confinement][window]") {
  if (test::skip_without_x86_window_checks()) return;
  JitCache cache(window_options());
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  const CachedIfunc* const loaded = &loaded_confined(cache, counter);
  REQUIRE(cache.in_window(*loaded));

  // The counter in memory exposed to windows: the pointer means the same
  // memory inside the window.
  const std::span<std::byte> exposed = cache.allocate_exposed("counter", 8, true);
  auto* const count = reinterpret_cast<uint64_t*>(exposed.data());
  alignas(16) uint64_t increment = 5;
  for (int k = 0; k < 3; ++k)
    CHECK_FALSE(cache.invoke(*loaded, &increment, sizeof(increment), count).has_value());
  CHECK_FALSE(cache.invoke(*loaded, nullptr, 0, count).has_value());
  CHECK(*count == 16);

  // target_args anywhere else is passed as null: the store faults, and
  // the memory it named is untouched.
  uint64_t outside = 1234;
  const std::optional<ConfinedTrap> trap =
      cache.invoke(*loaded, &increment, sizeof(increment), &outside);
  REQUIRE(trap.has_value());
  CHECK(trap->reason == TrapReason::out_of_bounds);
  CHECK(trap->address < 4096);  // an offset in the window: null's page, never a host address
  CHECK(outside == 1234);
  CHECK_FALSE(cache.invoke(*loaded, &increment, sizeof(increment), count).has_value());
  CHECK(*count == 21);

  // saxpy over arrays exposed to windows: the result the plain loop gives.
  const Ifunc saxpy = Ifunc::load(TC_SAXPY_BITCODE);
  const CachedIfunc* const kernel = &loaded_confined(cache, saxpy);
  CHECK(cache.in_window(*kernel));
  constexpr std::size_t n = 1000;
  const auto [x, y] = test::exposed_saxpy_arrays(cache, n);
  std::vector<float> expected(n);
  for (std::size_t i = 0; i < n; ++i) {
    expected[i] = 0.5F * x[i] + 1.0F;
    expected[i] = 0.5F * x[i] + expected[i];
  }
  alignas(16) test::SaxpyRequest request{0.5F, 2, n, x, y};
  CHECK_FALSE(cache.invoke(*kernel, &request, sizeof(request), nullptr).has_value());
  CHECK(std::equal(y, y + n, expected.begin()));
  // x is read-only to confined code: saxpy told to write it traps.
  alignas(16) test::SaxpyRequest backwards{0.5F, 1, n, y, x};
  const std::optional<ConfinedTrap> read_only =
      cache.invoke(*kernel, &backwards, sizeof(backwards), nullptr);
  REQUIRE(read_only.has_value());
  CHECK(read_only->reason == TrapReason::out_of_bounds);
  CHECK(x[1] == 1.0F);

  // Evicted and loaded again: a window of its own again, and it counts on.
  CHECK(cache.evict(counter.id()));
  const CachedIfunc* const again = &loaded_confined(cache, counter);
  CHECK(cache.in_window(*again));
  CHECK_FALSE(cache.invoke(*again, nullptr, 0, count).has_value());
  CHECK(*count == 22);

  // With the option off, the same code keeps the checked tier.
  JitOptions off = window_options();
  off.confinement.window_tier = false;
  JitCache checked(off);
  CHECK_FALSE(checked.in_window(loaded_confined(checked, counter)));
}

TEST_CASE(
    "honest code with recursion, a local array, copies and fills runs in a window, "
    "computing what it computes unconfined",
    "[confinement][window]") {
  if (test::skip_without_x86_window_checks()) return;
  // Recursion keeps the checked tier: the verifier bounds the stack window
  // code can use, and a function that can call itself has no bound (the
  // verifier refused it, and with it the load, before the shape did).
  struct Kernel {
    const char* what;
    const char* path;
    bool in_window;
    std::vector<std::vector<std::byte>> payloads;
  };
  std::mt19937_64 random(33);
  const auto bytes_of = [&](std::size_t n) {
    std::vector<std::byte> bytes(n);
    for (std::byte& b : bytes) b = static_cast<std::byte>(random());
    return bytes;
  };
  const auto word = [](uint64_t value) {
    std::vector<std::byte> bytes(8);
    std::memcpy(bytes.data(), &value, 8);
    return bytes;
  };
  const std::vector<Kernel> kernels = {
      {"recursion",
       TC_WINDOW_KERNEL_0,
       false,
       {{}, bytes_of(8), bytes_of(8 * 37), bytes_of(8 * 512)}},
      {"a local array indexed by data",
       TC_WINDOW_KERNEL_1,
       true,
       {{}, bytes_of(200), bytes_of(3000)}},
      {"a copy loop and a move",
       TC_WINDOW_KERNEL_2,
       true,
       {{}, bytes_of(17), bytes_of(256), bytes_of(999)}},
      {"a zeroing loop", TC_WINDOW_KERNEL_3, true, {word(0), word(100), word(512), word(9999)}},
      {"a clear of 13 bytes", TC_WINDOW_KERNEL_5, true, {{}, bytes_of(5), bytes_of(300)}},
      {"a loop the verifier refuses, compiled again for the checked tier",
       TC_WINDOW_KERNEL_6,
       false,
       {{}, bytes_of(1), bytes_of(40)}},
      {"copies, a move and a fill of known lengths",
       TC_WINDOW_KERNEL_7,
       true,
       {bytes_of(400), bytes_of(500)}},
  };
  JitCache windowed(window_options());
  JitCache plain;
  constexpr std::size_t kOut = 1024;
  uint64_t refusals = 0;
  auto* const out = windowed.allocate_exposed("out", kOut, true).data();
  std::vector<std::byte> expected(kOut);
  for (const Kernel& kernel : kernels) {
    INFO(kernel.what);
    const Ifunc ifunc = Ifunc::load(kernel.path);
    const CachedIfunc* const in_window = &loaded_confined(windowed, ifunc);
    (void)plain.load(ifunc.id(), ifunc.codec(), ifunc.code(), Confine::no);
    const CachedIfunc* const unconfined = plain.find_ifunc(ifunc.id());
    REQUIRE(unconfined != nullptr);
    CHECK(windowed.in_window(*in_window) == kernel.in_window);
    // Only the kernel the verifier refuses is counted as refused.
    if (kernel.path == std::string_view(TC_WINDOW_KERNEL_6)) {
      CHECK(windowed.window_refusals().count == ++refusals);
      CHECK_THAT(windowed.window_refusals().last, Catch::Contains("window verifier refused"));
    }
    CHECK(windowed.window_refusals().count == refusals);
    for (const std::vector<std::byte>& payload : kernel.payloads) {
      INFO("payload of " << payload.size() << " bytes");
      std::memset(out, 0x5c, kOut);
      std::memset(expected.data(), 0x5c, kOut);
      std::vector<std::byte> copy = payload;
      CHECK_FALSE(windowed.invoke(*in_window, copy.data(), copy.size(), out).has_value());
      copy = payload;
      CHECK_FALSE(plain.invoke(*unconfined, copy.data(), copy.size(), expected.data()).has_value());
      CHECK(std::memcmp(out, expected.data(), kOut) == 0);
    }
  }
  // The same fallback where a Receiver loads: started, compiled beside the
  // caller, its window object refused, compiled again, and only then
  // finished.
  {
    JitCache beside(window_options());
    const Ifunc refused = Ifunc::load(TC_WINDOW_KERNEL_6);
    CHECK_FALSE(
        beside.start_load(refused.id(), refused.codec(), refused.code(), Confine::yes).has_value());
    std::optional<JitCache::FinishedLoad> done;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!done && std::chrono::steady_clock::now() < deadline) {
      for (JitCache::FinishedLoad& finished : beside.finish_loads()) done = std::move(finished);
      std::this_thread::sleep_for(1ms);
    }
    REQUIRE(done.has_value());
    INFO((done->error ? done->error->what() : std::string("loaded")));
    REQUIRE(done->result.has_value());
    const CachedIfunc* const loaded = beside.find_ifunc(refused.id());
    REQUIRE(loaded != nullptr);
    CHECK_FALSE(beside.in_window(*loaded));
    auto* const seven =
        reinterpret_cast<uint64_t*>(beside.allocate_exposed("seven", 8, true).data());
    std::vector<std::byte> payload = bytes_of(3);
    CHECK_FALSE(beside.invoke(*loaded, payload.data(), payload.size(), seven).has_value());
    CHECK(*seven == 21);
  }
  // Locals past what the shape makes globals of (1 MiB in all) keep the
  // checked tier too, where they are past its data stack: a trap, not 2 MiB
  // of window data wiped at every change of caller.
  const Ifunc big = Ifunc::load(TC_WINDOW_KERNEL_4);
  const CachedIfunc* const loaded = &loaded_confined(windowed, big);
  CHECK_FALSE(windowed.in_window(*loaded));
  std::vector<std::byte> payload = bytes_of(64);
  const std::optional<ConfinedTrap> trap =
      windowed.invoke(*loaded, payload.data(), payload.size(), out);
  REQUIRE(trap.has_value());
  CHECK(trap->reason == TrapReason::stack_exhausted);
}

TEST_CASE("a local that window code keeps carries nothing of one caller to the next",
          "[confinement][window]") {
  if (test::skip_without_x86_window_checks()) return;
  // The reader reports what its local holds, then stores its payload's
  // word there: in a window the local is a global, so it outlives the
  // invocation, and only the change of caller may wipe it.
  JitCache cache(window_options());
  const CachedIfunc& reader = loaded_confined(cache, Ifunc::load(TC_WINDOW_KERNEL_8));
  REQUIRE(cache.in_window(reader));
  auto* const seen = reinterpret_cast<uint64_t*>(cache.allocate_exposed("seen", 8, true).data());
  constexpr uint64_t kSecret = 0x5ec2e75ec2e75ec2ULL;
  constexpr uint64_t kPeerA = 1;
  constexpr uint64_t kPeerB = 2;
  uint64_t secret = kSecret;
  CHECK_FALSE(cache.invoke(reader, &secret, sizeof(secret), seen, kPeerA).has_value());
  CHECK(*seen == 0);
  // The same caller finds its own word (the local does outlive the call:
  // without this the check below would prove nothing).
  CHECK_FALSE(cache.invoke(reader, nullptr, 0, seen, kPeerA).has_value());
  CHECK(*seen == kSecret);
  // Another caller finds nothing of it.
  CHECK_FALSE(cache.invoke(reader, nullptr, 0, seen, kPeerB).has_value());
  CHECK(*seen == 0);
  CHECK_FALSE(cache.invoke(reader, nullptr, 0, seen, kPeerA).has_value());
  CHECK(*seen == 0);
}

TEST_CASE("window code cannot reach the target, outlast its budget or keep it from serving",
          "[confinement][window]") {
  if (test::skip_without_x86_window_checks()) return;
  g_canary.fill(kCanaryWord);
  JitCache cache(window_options());
  const Ifunc escape = Ifunc::load(TC_WINDOW_ESCAPE);
  const CachedIfunc* const loaded = &loaded_confined(cache, escape);
  REQUIRE(cache.in_window(*loaded));
  auto* const count =
      reinterpret_cast<uint64_t*>(cache.allocate_exposed("counter", 8, true).data());
  const auto address = [](const void* p) { return reinterpret_cast<uint64_t>(p); };
  volatile uint64_t stack_canary = kCanaryWord;  // on this thread's stack

  struct Attempt {
    const char* what;
    Order order;
    std::optional<TrapReason> reason;  // nullopt: trap or not, as the window's layout has it
  };
  const std::array<Attempt, 7> attempts{{
      {"a store to a target global", {write_address, address(g_canary.data())}, std::nullopt},
      {"a load from a target global", {read_address, address(g_canary.data())}, std::nullopt},
      {"a store far into the window", {far_store, 0}, TrapReason::out_of_bounds},
      {"a store into its own code", {write_code, 0}, TrapReason::out_of_bounds},
      {"a division by zero", {divide, 0}, TrapReason::division},
      {"an endless loop", {spin, 0}, TrapReason::out_of_time},
      {"a store to the target's stack",
       {write_address, address(const_cast<uint64_t*>(&stack_canary))},
       std::nullopt},
  }};
  uint64_t expected = 0;
  for (const Attempt& attempt : attempts) {
    INFO(attempt.what);
    alignas(16) Order order = attempt.order;
    const auto started = std::chrono::steady_clock::now();
    const std::optional<ConfinedTrap> trap = cache.invoke(*loaded, &order, sizeof(order), count);
    const auto took = std::chrono::steady_clock::now() - started;
    if (attempt.reason) {
      REQUIRE(trap.has_value());
      CHECK(trap->reason == *attempt.reason);
      CHECK(trap->address < (uint64_t{1} << 32));  // an offset in its window
    }
    if (attempt.order.command == spin) {
      CHECK(took >= 20ms);
      CHECK(took < 1s);
    }
    // Nothing of the target's changed: the canaries, and the counter only
    // by what a load could add (the window's own bytes, never the canary).
    CHECK(
        std::all_of(g_canary.begin(), g_canary.end(), [](uint64_t w) { return w == kCanaryWord; }));
    CHECK(stack_canary == kCanaryWord);
    CHECK(*count - expected != kCanaryWord);
    expected = *count;
    // Honest work right after: done, with the right result.
    alignas(16) Order honest{add, 3};
    CHECK_FALSE(cache.invoke(*loaded, &honest, sizeof(honest), count).has_value());
    expected += 3;
    CHECK(*count == expected);
  }
}

namespace {

// The counter compiled into a code cache on disk, its stored object's
// .text changed by `change` (as an attacker who can write there, or a
// compromised worker, would), and loaded again: the verifier must refuse
// the changed object, so the cache compiles the code again, in a window,
// and that counts.
template <class Change>
void counter_refused_after_store_changed(const char* directory_name, Change&& change) {
  const test::TempDir directory(directory_name);
  JitOptions options = window_options();
  options.code_cache_directory = directory.path();
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  {
    JitCache cache(options);
    const LoadResult first =
        cache.load(counter.id(), counter.codec(), counter.code(), Confine::yes);
    CHECK_FALSE(first.from_code_cache);
  }
  change(directory.path());
  JitCache cache(options);
  const LoadResult again = cache.load(counter.id(), counter.codec(), counter.code(), Confine::yes);
  CHECK_FALSE(again.from_code_cache);  // refused, compiled again
  const CachedIfunc* const loaded = cache.find_ifunc(counter.id());
  REQUIRE(loaded != nullptr);
  REQUIRE(cache.in_window(*loaded));
  auto* const count =
      reinterpret_cast<uint64_t*>(cache.allocate_exposed("counter", 8, true).data());
  CHECK_FALSE(cache.invoke(*loaded, nullptr, 0, count).has_value());
  CHECK(*count == 1);
}

}  // namespace

TEST_CASE("the target runs no window code the verifier refuses, whoever compiled it",
          "[confinement][window]") {
  if (test::skip_without_x86_window_checks()) return;
  // The counter's %gs prefix replaced by %ds, so its store would go to the
  // address itself, in the target.
  counter_refused_after_store_changed("threechains-window-store",
                                      [](const std::filesystem::path& directory) {
                                        test::tamper_stored_window_gs_access(directory);
                                      });
}

TEST_CASE("window code that reaches past its window by a 64-bit absolute offset is refused",
          "[confinement][window]") {
  if (test::skip_without_x86_window_checks()) return;
  // A counter whose first instruction is `movabs %gs:0x200000000,%rax`
  // (the moffs form: a 64-bit offset, 8 GiB past the window's base, beyond
  // its upper guard, where another window or nothing lies), then `ret`.
  // helper-27 found the verifier took it: the offset form has no base
  // register, and the rule for that read only the width. Before 80ff303 the
  // target ran it (a trap, the count untouched).
  counter_refused_after_store_changed(
      "threechains-window-moffs", [](const std::filesystem::path& directory) {
        test::rewrite_stored_window_text(directory, [](std::span<char> text) {
          constexpr std::array<unsigned char, 12> kFarRead = {0x65, 0x48, 0xa1, 0x00, 0x00, 0x00,
                                                              0x00, 0x02, 0x00, 0x00, 0x00, 0xc3};
          REQUIRE(text.size() >= kFarRead.size());
          std::memcpy(text.data(), kFarRead.data(), kFarRead.size());
        });
      });
}

TEST_CASE("window code leaves the host's unwinder alone and nothing of one caller for the next",
          "[confinement][window]") {
  if (test::skip_without_x86_window_checks()) return;
  JitCache cache(window_options());
  const Ifunc escape = Ifunc::load(TC_WINDOW_ESCAPE);
  const CachedIfunc* loaded = &loaded_confined(cache, escape);
  REQUIRE(cache.in_window(*loaded));
  auto* const count =
      reinterpret_cast<uint64_t*>(cache.allocate_exposed("counter", 8, true).data());

  // Its unwind tables are not the host's: libgcc searches registered
  // frames before the process's own, so an object's FDE over host code
  // would run its personality routine in the host (an attacker review did).
  // The same code built with unwind tables, unconfined, has its registered.
  {
    const Ifunc unwinding = Ifunc::load(TC_WINDOW_ESCAPE_UNWIND);
    void* bases[3] = {};
    JitCache windowed(window_options());
    const CachedIfunc* const in_window = &loaded_confined(windowed, unwinding);
    REQUIRE(windowed.in_window(*in_window));
    CHECK(_Unwind_Find_FDE(reinterpret_cast<const char*>(in_window->main) + 1, bases) == nullptr);
    JitCache plain;
    (void)plain.load(unwinding.id(), unwinding.codec(), unwinding.code());
    const IfuncMain entry = plain.find(unwinding.id());
    REQUIRE(entry != nullptr);
    CHECK(_Unwind_Find_FDE(reinterpret_cast<const char*>(entry) + 1, bases) != nullptr);
  }

  // What the code can write in its window, outside its own globals (its
  // payload area beyond the payload, the rest of its code reservation), is
  // nothing the next caller reads: every page of the first 2 MiB, written
  // for caller 1 and read for caller 2.
  constexpr uint64_t kMarker = 0xbadbadbadULL;  // what write_address stores
  constexpr uint64_t kFirst = 0x10000;
  constexpr uint64_t kEnd = 0x200000;
  for (uint64_t at = kFirst; at < kEnd; at += 0x1000) {
    alignas(16) Order write{write_address, at + 0x800};
    (void)cache.invoke(*loaded, &write, sizeof(write), count, /*caller=*/1);
  }
  uint64_t readable = 0;
  for (uint64_t at = kFirst; at < kEnd; at += 0x1000) {
    INFO("window offset " << at + 0x800);
    const uint64_t before = *count;
    alignas(16) Order read{read_address, at + 0x800};
    if (!cache.invoke(*loaded, &read, sizeof(read), count, /*caller=*/2)) {
      ++readable;
      CHECK(*count - before != kMarker);
    }
  }
  CHECK(readable > 0);  // the payload area and the code's own data read as zero

  // A payload larger than the window's payload area, then the code evicted
  // and loaded again into the same window: the next code's payloads go
  // where they should, and nothing of the large one is left to read.
  std::vector<uint64_t> large(16 << 10, 0x5ec2e75ec2e75ec2ULL);
  large[0] = add;
  large[1] = 5;
  const uint64_t before_large = *count;
  CHECK_FALSE(cache.invoke(*loaded, large.data(), large.size() * 8, count, 3).has_value());
  CHECK(*count == before_large + 5);
  CHECK(cache.evict(escape.id()));
  loaded = &loaded_confined(cache, escape);
  REQUIRE(cache.in_window(*loaded));
  alignas(16) Order honest{add, 1};
  const uint64_t before_small = *count;
  CHECK_FALSE(cache.invoke(*loaded, &honest, sizeof(honest), count, 4).has_value());
  CHECK(*count == before_small + 1);
  for (uint64_t at = kFirst; at < kEnd; at += 0x1000) {
    INFO("window offset " << at + 0x40);
    const uint64_t before = *count;
    alignas(16) Order read{read_address, at + 0x40};
    if (!cache.invoke(*loaded, &read, sizeof(read), count, 4))
      CHECK(*count - before != 0x5ec2e75ec2e75ec2ULL);
  }
}

TEST_CASE("a run of window calls on large payloads runs them all and keeps the payload area small",
          "[confinement][window]") {
  if (test::skip_without_x86_window_checks()) return;
  JitCache cache(window_options());
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  const CachedIfunc& loaded = loaded_confined(cache, counter);
  REQUIRE(cache.in_window(loaded));
  auto* const count = reinterpret_cast<uint64_t*>(cache.allocate_exposed("count", 8, true).data());
  // 32 payloads of 32 KiB, each adding its first word: all run, in runs
  // whose payloads fit 64 KiB (helper-21: one run of 32 grew the area,
  // which is wiped whole at every change of caller, to 1 MiB).
  constexpr std::size_t kPayloads = 32;
  constexpr std::size_t kBytes = 32 * 1024;
  std::vector<std::vector<uint64_t>> bodies(kPayloads, std::vector<uint64_t>(kBytes / 8));
  std::vector<IfuncPayload> payloads;
  uint64_t expected = 0;
  for (std::size_t k = 0; k < kPayloads; ++k) {
    bodies[k][0] = k + 1;
    expected += k + 1;
    payloads.push_back({bodies[k].data(), kBytes});
  }
  std::optional<ConfinedTrap> trap;
  CHECK(cache.invoke_each(loaded, payloads, count, trap, 1) == kPayloads);
  CHECK_FALSE(trap.has_value());
  CHECK(*count == expected);
  CHECK(cache.committed_bytes(counter.id()) < 256 * 1024);
  // Small ones, many at once, and a target_args outside exposed memory in
  // the middle of nothing: every one runs once.
  std::vector<uint64_t> words(100);
  std::vector<IfuncPayload> small;
  for (std::size_t k = 0; k < words.size(); ++k) {
    words[k] = uint64_t{1} << (k % 50);
    small.push_back({&words[k], 8});
  }
  *count = 0;
  CHECK(cache.invoke_each(loaded, small, count, trap, 1) == words.size());
  CHECK_FALSE(trap.has_value());
  uint64_t sum = 0;
  for (const uint64_t w : words) sum += w;
  CHECK(*count == sum);
  // Small ones around a large one: every one runs once (a run ends before
  // the large one, which runs alone).
  std::vector<IfuncPayload> mixed(small.begin(), small.begin() + 10);
  mixed.push_back({bodies[4].data(), kBytes});
  mixed.insert(mixed.end(), small.begin() + 10, small.begin() + 20);
  uint64_t mixed_sum = bodies[4][0];
  for (std::size_t k = 0; k < 20; ++k) mixed_sum += words[k];
  *count = 0;
  CHECK(cache.invoke_each(loaded, mixed, count, trap, 1) == mixed.size());
  CHECK_FALSE(trap.has_value());
  CHECK(*count == mixed_sum);
  // target_args outside exposed memory: the first call traps, none runs after.
  uint64_t outside = 0;
  CHECK(cache.invoke_each(loaded, small, &outside, trap, 1) == 0);
  REQUIRE(trap.has_value());
  CHECK(trap->reason == TrapReason::out_of_bounds);
  CHECK(outside == 0);
}
