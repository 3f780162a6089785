// Confined ifuncs: the escape suite. A target that trusts the test key only
// as a code signer (Trust::allow_code_signer, not allow_native_code_signer)
// runs its bitcode confined; every way out tests/ifuncs/escape/escape.c
// tries must trap (errc::code_trapped, named, to the source) or be refused at
// load, the target must stay up with its canaries untouched, and honest work
// after each attempt must complete with the right result.
#include "engine/fault_report.hpp"
#include "support/counter_target.hpp"
#include "support/two_process.hpp"
#include "support/window_checks.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <span>
#include <string>

using namespace threechains;
using namespace threechains::test;

namespace {

constexpr uint64_t kCanaryWord = 0x5a5a5a5a5a5a5a5aULL;
// A global of the target that no region exposes (the child is a fork of this
// process: the address the test sends is the child's too).
std::array<uint64_t, 64> g_canary{};
// A table the target exposes to confined code, read-only.
std::array<uint64_t, 8> g_table{};

struct EscapeResult {
  uint64_t counter;
  uint64_t trapped;
  uint64_t dispatched;
  uint64_t refused;
  uint64_t canary_intact;
  // Receiver::ifunc_stats(): the escape ifunc's record, and the codes refused
  // once and never run.
  uint64_t escape_calls;
  uint64_t escape_traps;
  uint64_t escape_timed;
  uint64_t codes_refused_once;
  char first_error[256];
};

// A child target that runs the test key's code confined.
ChildTarget<EscapeResult> confined_target(Transport transport, uint32_t max_traps = 0,
                                          uint64_t sources = 1) {
  ReceiverOptions options;
  options.exposed.push_back(
      {"table", std::as_writable_bytes(std::span(g_table)), /*writable=*/false});
  options.limits.max_traps_per_code = max_traps;
  const PublicKey key = test_identity().public_key();
  options.trust = Trust().allow_peer(key).allow_code_signer(key);
  options.jit.confinement.time_budget = std::chrono::milliseconds(20);
  return ChildTarget<EscapeResult>(
      transport,
      [sources](ChildContext& context) {
        g_canary.fill(kCanaryWord);
        for (std::size_t k = 0; k < g_table.size(); ++k) g_table[k] = 100 + k;
        context.receiver.set_target_args(&g_counter, sizeof(g_counter));
        ChildTarget<EscapeResult>::serve_until_closed(context.receiver, sources);
        EscapeResult result{};
        const ReceiverStats& stats = context.receiver.stats();
        result.counter = g_counter;
        result.trapped = stats.code_trapped;
        result.dispatched = stats.frames_dispatched;
        result.refused = stats.code_refused;
        for (const IfuncStats& record : context.receiver.ifunc_stats()) {
          if (record.name == "escape") {
            result.escape_calls = record.calls;
            result.escape_traps = record.traps;
            result.escape_timed = record.timed_calls;
          }
          if (record.refusals == 1 && record.calls == 0) ++result.codes_refused_once;
        }
        bool table_intact = true;
        for (std::size_t k = 0; k < g_table.size(); ++k) table_intact &= g_table[k] == 100 + k;
        result.canary_intact =
            table_intact && std::all_of(g_canary.begin(), g_canary.end(),
                                        [](uint64_t w) { return w == kCanaryWord; });
        context.first_error(result.first_error);
        return result;
      },
      std::move(options));
}

struct Order {
  uint64_t command;
  uint64_t argument;
};

enum Command : uint64_t {
  honest = 0,
  return_address_walk,
  from_allowed_import,
  forged_function,
  write_target_global,
  read_beyond_payload,
  stack_smash,
  spin_forever,
  recurse_forever,
  null_store,
  huge_memcpy,
  wild_send,
  divide_by_zero,
  write_string_literal,
  past_target_args,
  read_address,
};

// Sends one order and flushes: the error the target answered with, if any.
std::optional<Error> carry_out(Channel& channel, const Ifunc& escape, Order order) {
  (void)send(channel, escape, order);
  try {
    channel.flush();
    return std::nullopt;
  } catch (const Error& error) {
    return error;
  }
}

struct Attempt {
  const char* what;
  Order order;
  const char* reason;  // what the trap must say
};

}  // namespace

TEMPLATE_TEST_CASE("confined code: every escape traps, the target serves on, canaries stay",
                   "[confinement][trust][ucx]", Shm, Tcp) {
  const std::string witness = "/tmp/threechains-escaped";
  std::filesystem::remove(witness);
  auto target = confined_target(TestType::transport);
  const Ifunc escape = Ifunc::load(TC_ESCAPE);
  TestSource source(TestType::transport, target.port(), options_for<TestType>());
  const auto address = [](const void* p) {
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
  };
  const std::array<Attempt, 14> attempts{{
      {"walk from the return address to the ELF header",
       {return_address_walk, 0},
       "outside every region"},
      {"an address computed from an allowed import",
       {from_allowed_import, 0x1000},
       "outside every region"},
      {"a call to the target's system()",
       {forged_function, address(reinterpret_cast<void*>(&system))},
       "indirect call"},
      {"a write to a target global not exposed",
       {write_target_global, address(g_canary.data())},
       "outside every region"},
      {"a read past its own frame into the ring",
       {read_beyond_payload, 1 << 16},
       "outside every region"},
      {"a stack smash", {stack_smash, uint64_t{1} << 22}, "outside every region"},
      {"an endless loop", {spin_forever, 0}, "time budget"},
      {"endless recursion", {recurse_forever, 0}, "stack ran out"},
      {"a NULL store", {null_store, 0}, "outside every region"},
      {"a huge memcpy", {huge_memcpy, uint64_t{1} << 30}, "outside every region"},
      {"threechains_send_self with a wild pointer", {wild_send, 0x1000}, "runtime call"},
      {"a division by zero", {divide_by_zero, 0}, "division"},
      {"a write into a string literal", {write_string_literal, 0}, "read-only"},
      {"a write past the exposed target_args", {past_target_args, 0}, "outside every region"},
  }};
  uint64_t expected = 0;
  for (const Attempt& attempt : attempts) {
    INFO(attempt.what);
    const std::optional<Error> error = carry_out(source.channel, escape, attempt.order);
    REQUIRE(error.has_value());
    CHECK(error->is(errc::code_trapped));
    CHECK_THAT(error->what(), Catch::Contains("'escape'") && Catch::Contains(attempt.reason));
    // Honest work right after: done, with the right result.
    const uint64_t increment = 1 + (expected % 7);
    CHECK_FALSE(carry_out(source.channel, escape, {honest, increment}).has_value());
    expected += increment;
  }
  source.channel.close();
  const EscapeResult result = target.result();
  INFO(result.first_error);
  CHECK(result.trapped == attempts.size());
  CHECK(result.counter == expected);
  CHECK(result.canary_intact == 1);
  CHECK(result.dispatched == 2 * attempts.size());
  CHECK(result.escape_calls == 2 * attempts.size());  // per ifunc, as in total
  CHECK(result.escape_traps == attempts.size());
  CHECK(result.escape_timed >= 1);  // its first call, and one in 1024
  CHECK_FALSE(std::filesystem::exists(witness));
}

TEMPLATE_TEST_CASE("confined targets refuse what cannot be confined, and serve on",
                   "[confinement][trust][ucx]", Shm, Tcp) {
  auto target = confined_target(TestType::transport);
  const Ifunc escape = Ifunc::load(TC_ESCAPE);
  TestSource source(TestType::transport, target.port(), options_for<TestType>());
  struct Refusal {
    const char* path;
    errc code;
    const char* says;
  };
  for (const Refusal& refusal :
       {Refusal{TC_EVIL_SYSTEM_BITCODE, errc::import_refused, "imports 'system'"},
        Refusal{TC_EVIL_SYSTEM_BINARY, errc::code_refused, "only bitcode runs confined"},
        Refusal{TC_COUNTER_BINARY, errc::code_refused, "allow_native_code_signer"},
        Refusal{TC_EVIL_ASM, errc::import_refused, "inline assembly"}}) {
    INFO(refusal.path);
    const Ifunc evil = Ifunc::load(refusal.path);
    (void)send(source.channel, evil, uint64_t{0});
    CHECK_THROWS_MATCHES(source.channel.flush(), Error,
                         Catch::Predicate<Error>([&](const Error& e) {
                           return e.is(refusal.code) &&
                                  std::string(e.what()).find(refusal.says) != std::string::npos;
                         }));
    CHECK_FALSE(carry_out(source.channel, escape, {honest, 2}).has_value());
  }
  source.channel.close();
  const EscapeResult result = target.result();
  INFO(result.first_error);
  CHECK(result.refused == 4);
  CHECK(result.codes_refused_once == 4);  // each refusal counted against its code
  CHECK(result.escape_calls == 4);
  CHECK(result.counter == 8);
  CHECK(result.canary_intact == 1);
}

// Bans by key across connections: tests/test_confined_limits.cpp.

TEST_CASE("a fault in fully trusted code is named before the process dies",
          "[confinement][trust][ucx]") {
  const std::string log = "/tmp/threechains-fault-" + std::to_string(getpid()) + ".log";
  std::filesystem::remove(log);
  ReceiverOptions options;
  const PublicKey key = test_identity().public_key();
  options.trust = Trust().allow_peer(key).allow_native_code_signer(key);  // unconfined
  ChildTarget<EscapeResult> target(
      Transport::tcp,
      [log](ChildContext& context) {
        // What the child writes to stderr from here on, for the test to read.
        std::FILE* file = std::fopen(log.c_str(), "w");
        if (file == nullptr || dup2(fileno(file), STDERR_FILENO) < 0)
          throw std::runtime_error("cannot redirect stderr");
        // This child is a fork of Catch's process: its handlers would report
        // the fault as a failed test here; the reporter, then death, is the point.
        detail::report_faults_then_default();
        context.receiver.set_target_args(&g_counter);
        ChildTarget<EscapeResult>::serve_until_closed(context.receiver);
        return EscapeResult{};
      },
      std::move(options));
  const Ifunc escape = Ifunc::load(TC_ESCAPE);
  // tcp: the source hears at once that the target died (a reset connection).
  TestSource source(Transport::tcp, target.port(), options_for<Tcp>());
  CHECK_FALSE(carry_out(source.channel, escape, {honest, 1}).has_value());
  (void)send(source.channel, escape, Order{null_store, 0});
  CHECK_THROWS(source.channel.flush());  // the target died of it
  CHECK_THROWS(target.result(std::chrono::seconds(30)));
  std::string text;
  if (std::FILE* file = std::fopen(log.c_str(), "r")) {
    char buffer[4096];
    text.assign(buffer, std::fread(buffer, 1, sizeof(buffer), file));
    std::fclose(file);
  }
  std::filesystem::remove(log);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("threechains: SIGSEGV in ifunc 'escape' (code 0x") &&
                       Catch::Contains(") from ") && Catch::Contains(": address 0x0,") &&
                       Catch::Contains(" (escape_main+0x"));
}

TEMPLATE_TEST_CASE("confined code reads an exposed read-only region and cannot write it",
                   "[confinement][trust][ucx]", Shm, Tcp) {
  auto target = confined_target(TestType::transport);
  const Ifunc escape = Ifunc::load(TC_ESCAPE);
  TestSource source(TestType::transport, target.port(), options_for<TestType>());
  const auto at = [](std::size_t k) {
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&g_table[k]));
  };
  // Read twice from the same access site: the second through its cached region.
  CHECK_FALSE(carry_out(source.channel, escape, {read_address, at(3)}).has_value());
  CHECK_FALSE(carry_out(source.channel, escape, {read_address, at(5)}).has_value());
  const std::optional<Error> write =
      carry_out(source.channel, escape, {write_target_global, at(3)});
  REQUIRE(write.has_value());
  CHECK(write->is(errc::code_trapped));
  CHECK_THAT(write->what(), Catch::Contains("read-only"));
  // A read that starts inside the table and runs past its end.
  const std::optional<Error> past = carry_out(source.channel, escape, {read_address, at(7) + 4});
  REQUIRE(past.has_value());
  CHECK_THAT(past->what(), Catch::Contains("outside every region"));
  source.channel.close();
  const EscapeResult result = target.result();
  INFO(result.first_error);
  CHECK(result.counter == 103 + 105);
  CHECK(result.trapped == 2);
}

// The window tier (ConfinementOptions::window_tier, issue 33) behind a real
// Receiver: tests/ifuncs/window_escape.c, signed by a key the target trusts
// only as a confined signer, takes the window shape; each of its ways out
// traps or stays in its window, the target's canaries stay, and honest work
// after each completes.
namespace {

struct WindowResult {
  uint64_t counter;
  uint64_t in_window;
  uint64_t trapped;
  uint64_t canary_intact;
  uint64_t in_runs;  // ReceiverStats::frames_in_window_runs
  char first_error[256];
};

enum WindowCommand : uint64_t {
  window_add = 0,
  window_write_address,
  window_read_address,
  window_spin,
  window_divide,
  window_write_code,
  window_far_store,
};

// A Receiver in a child that trusts test_identity() as a confined signer
// and runs its code in the window tier (a 20 ms budget), with a counter
// exposed to window code as its target_args; when its source closes, what
// the counter, the window_escape code, its stats and the canary show.
// A Receiver's options that trust test_identity() as a confined signer
// only, with a 20 ms budget (the window tier by default).
ReceiverOptions confined_signer_options() {
  ReceiverOptions options;
  const PublicKey key = test_identity().public_key();
  options.trust = Trust().allow_peer(key).allow_code_signer(key);
  options.jit.confinement.time_budget = std::chrono::milliseconds(20);
  return options;
}

ChildTarget<WindowResult> window_target(Transport transport) {
  ReceiverOptions options = confined_signer_options();
  options.jit.confinement.window_tier = true;  // asked for, whatever the default
  return ChildTarget<WindowResult>(
      transport,
      [](ChildContext& context) {
        g_canary.fill(kCanaryWord);
        auto* const counter = reinterpret_cast<uint64_t*>(
            context.receiver.cache().allocate_exposed("counter", 8, true).data());
        context.receiver.set_target_args(counter, 8);
        ChildTarget<WindowResult>::serve_until_closed(context.receiver);
        WindowResult result{};
        result.counter = *counter;
        const Ifunc escape = Ifunc::load(TC_WINDOW_ESCAPE);
        const CachedIfunc* const loaded = context.receiver.cache().find_ifunc(escape.id());
        result.in_window = loaded != nullptr && context.receiver.cache().in_window(*loaded);
        result.trapped = context.receiver.stats().code_trapped;
        result.in_runs = context.receiver.stats().frames_in_window_runs;
        result.canary_intact = std::all_of(g_canary.begin(), g_canary.end(),
                                           [](uint64_t w) { return w == kCanaryWord; });
        context.first_error(result.first_error);
        return result;
      },
      std::move(options));
}

}  // namespace

TEMPLATE_TEST_CASE(
    "window-tier code from a confined signer cannot reach the target, outlast "
    "its budget or stop it serving",
    "[confinement][trust][ucx]", Shm, Tcp) {
  if (test::skip_without_x86_window_checks()) return;
  ChildTarget<WindowResult> target = window_target(TestType::transport);
  const Ifunc escape = Ifunc::load(TC_WINDOW_ESCAPE);
  TestSource source(TestType::transport, target.port(), options_for<TestType>());
  const uint64_t canary = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(g_canary.data()));
  struct WindowAttempt {
    const char* what;
    Order order;
    const char* reason;  // nullptr: a trap or not, as the window's layout has it
  };
  const std::array<WindowAttempt, 6> attempts{{
      {"a store to a target global", {window_write_address, canary}, nullptr},
      {"a load from a target global", {window_read_address, canary}, nullptr},
      {"a store far into its window", {window_far_store, 0}, "outside every region"},
      {"a store into its own code", {window_write_code, 0}, "outside every region"},
      {"a division by zero", {window_divide, 0}, "division"},
      {"an endless loop", {window_spin, 0}, "time budget"},
  }};
  uint64_t expected_traps = 0;
  uint64_t added = 0;
  for (const WindowAttempt& attempt : attempts) {
    INFO(attempt.what);
    const std::optional<Error> error = carry_out(source.channel, escape, attempt.order);
    if (attempt.reason != nullptr) {
      REQUIRE(error.has_value());
      CHECK(error->is(errc::code_trapped));
      CHECK_THAT(error->what(), Catch::Contains("'window_escape'") &&
                                    Catch::Contains(attempt.reason));
    }
    if (error) ++expected_traps;
    // Honest work right after: done.
    CHECK_FALSE(carry_out(source.channel, escape, {window_add, 3}).has_value());
    added += 3;
  }
  source.channel.close();
  const WindowResult result = target.result();
  INFO(result.first_error);
  CHECK(result.in_window == 1);
  CHECK(result.canary_intact == 1);
  CHECK(result.trapped == expected_traps);
  // The load of a target global adds what the window holds there (its own
  // memory, or nothing if it trapped), never the canary.
  CHECK(result.counter >= added);
  CHECK(result.counter - added != kCanaryWord);
}

TEMPLATE_TEST_CASE("a burst of window-tier frames runs in order, around a trap in its middle",
                   "[confinement][trust][ucx]", Shm, Tcp) {
  if (test::skip_without_x86_window_checks()) return;
  // Over shared memory the Receiver runs the frames of one code that wait
  // in the ring together, with one way into the window (Engine::
  // run_window_frames); a trap stops that run at its frame, and the frames
  // after it go on as they would have. Over tcp the frames arrive as Active
  // Messages and run one by one: the same answers.
  ChildTarget<WindowResult> target = window_target(TestType::transport);
  const Ifunc escape = Ifunc::load(TC_WINDOW_ESCAPE);
  TestSource source(TestType::transport, target.port(), options_for<TestType>());
  // The code first, so that the burst's frames carry none.
  REQUIRE_FALSE(carry_out(source.channel, escape, {window_add, 1}).has_value());
  uint64_t added = 1;
  // Each add a power of two: a frame run twice, or lost, shows in the sum.
  for (int burst = 0; burst < 3; ++burst) {
    INFO("burst " << burst);
    constexpr int kFrames = 40;
    const int trapping = 7 + 11 * burst;
    for (int k = 0; k < kFrames; ++k) {
      const Order order =
          k == trapping ? Order{window_divide, 0} : Order{window_add, uint64_t{1} << (k % 60)};
      (void)send(source.channel, escape, order);
      if (k != trapping) added += order.argument;
    }
    std::optional<Error> error;
    try {
      source.channel.flush();
    } catch (const Error& e) {
      error = e;
    }
    REQUIRE(error.has_value());
    CHECK(error->is(errc::code_trapped));
    CHECK_THAT(error->what(), Catch::Contains("division"));
  }
  CHECK_FALSE(carry_out(source.channel, escape, {window_add, 2}).has_value());
  added += 2;
  source.channel.close();
  const WindowResult result = target.result();
  INFO(result.first_error);
  CHECK(result.in_window == 1);
  CHECK(result.trapped == 3);
  CHECK(result.counter == added);
  // Over shared memory some of it ran in runs (else this proves nothing of
  // them); over tcp none could.
  INFO(result.in_runs << " frames in window runs");
  if (TestType::transport == Transport::shared_memory) {
    CHECK(result.in_runs > 0);
  } else {
    CHECK(result.in_runs == 0);
  }
}

namespace {
uint64_t g_own_counter = 0;

struct MovedArgsResult {
  uint64_t window_counter;    // the counter in memory exposed to windows
  uint64_t own_counter;       // g_own_counter, target_args from then on
  uint64_t in_window_before;  // window_escape in a window before the move
  uint64_t in_window_after;
  uint64_t trapped;
  uint64_t code_loads;
  char first_error[256];
};
}  // namespace

TEMPLATE_TEST_CASE(
    "a Receiver whose target_args moves out of every window loads its peer's window code "
    "again, checked, and none of its calls trap",
    "[confinement][trust][ucx]", Shm, Tcp) {
  if (test::skip_without_x86_window_checks()) return;
  ChildTarget<MovedArgsResult> target(
      TestType::transport,
      [](ChildContext& context) {
        Receiver& receiver = context.receiver;
        auto* const counter = reinterpret_cast<uint64_t*>(
            receiver.cache().allocate_exposed("counter", 8, true).data());
        receiver.set_target_args(counter, 8);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        receiver.run([&] {
          return receiver.stats().frames_dispatched >= 4 ||
                 std::chrono::steady_clock::now() > deadline;
        });
        MovedArgsResult result{};
        const Ifunc escape = Ifunc::load(TC_WINDOW_ESCAPE);
        const auto in_window = [&] {
          const CachedIfunc* const loaded = receiver.cache().find_ifunc(escape.id());
          return loaded != nullptr && receiver.cache().in_window(*loaded) ? 1U : 0U;
        };
        result.in_window_before = in_window();
        // The application's own memory from now on: window code could not
        // reach it (it would get null and trap against the peer's key).
        receiver.set_target_args(&g_own_counter, sizeof(g_own_counter));
        ChildTarget<MovedArgsResult>::serve_until_closed(receiver);
        result.window_counter = *counter;
        result.own_counter = g_own_counter;
        result.in_window_after = in_window();
        result.trapped = receiver.stats().code_trapped;
        result.code_loads = receiver.stats().code_loads;
        context.first_error(result.first_error);
        return result;
      },
      confined_signer_options());  // the window tier by default
  const Ifunc escape = Ifunc::load(TC_WINDOW_ESCAPE);
  TestSource source(TestType::transport, target.port(), options_for<TestType>());
  for (uint64_t k = 1; k <= 4; ++k)  // 10 in all, in the window
    CHECK_FALSE(carry_out(source.channel, escape, {window_add, k}).has_value());
  for (uint64_t k = 1; k <= 3; ++k)  // 60 in all, after the move
    CHECK_FALSE(carry_out(source.channel, escape, {window_add, 10 * k}).has_value());
  source.channel.close();
  const MovedArgsResult result = target.result();
  INFO(result.first_error);
  CHECK(result.in_window_before == 1);
  CHECK(result.in_window_after == 0);
  CHECK(result.trapped == 0);
  CHECK(result.window_counter + result.own_counter == 70);
  CHECK(result.own_counter >= 50);  // the last two at least ran after the move
  CHECK(result.code_loads == 2);    // forgotten, sent again, loaded checked
}
