// Attacks on a Receiver, as a network peer would make them: each test starts
// threechains-attack-target (a Receiver trusting the build's key, with three
// canaries), runs threechains-attacker (plain UCX, no key, none of this
// library) against it, and then checks that the target is still running,
// that its canaries are untouched, and that an honest source's work completes
// with the right result. The cross-peer tests need a trusted peer, so their
// attacker is a library source that writes forged frames into its own ring.
#include "engine/testing.hpp"
#include "support/counter_target.hpp"
#include "support/process.hpp"
#include "support/sanitized.hpp"
#include "support/trust.hpp"
#include "support/two_process.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <sstream>
#include <thread>

using namespace threechains;
using namespace threechains::test;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kCanary = 0x600d600d600d600dULL;

struct TargetReport {
  uint64_t canary[3] = {};
  uint64_t counter = 0;
  uint64_t peers_connected = 0;
  uint64_t peers_refused = 0;
  uint64_t dispatched = 0;
  uint64_t rejected = 0;
  uint64_t code_refused = 0;
  long rss_kb = 0;
  long peak_rss_kb = 0;
};

std::string trusted_key_hex() { return test_identity().public_key().hex(); }

// threechains-attack-target, started and asked for its port and canaries.
class AttackTarget {
 public:
  // `anyone`: the target trusts every peer (Trust::anyone(), development).
  // `handshake_timeout_ms`: its ReceiverLimits::handshake_timeout (0: default).
  // `rma`: its context does RMA (ContextOptions::remote_memory_access).
  explicit AttackTarget(Transport transport, bool anyone = false, long handshake_timeout_ms = 0,
                        bool rma = false)
      : transport_(transport),
        process_({TC_ATTACK_TARGET, "--transport", std::string(to_string(transport)), "--trust",
                  TC_DEV_PUBLIC_KEY, "--anyone", anyone ? "yes" : "no", "--handshake-timeout-ms",
                  std::to_string(handshake_timeout_ms), "--rma", rma ? "yes" : "no"}) {
    const auto port = process_.read_line_starting("port ", 30s);
    const auto canary = process_.read_line_starting("canary ", 5s);
    if (!port || !canary) throw std::runtime_error("the attack target did not start");
    port_ = static_cast<uint16_t>(std::stoul(port->substr(5)));
    canary_ = canary->substr(7);
  }

  [[nodiscard]] uint16_t port() const noexcept { return port_; }
  [[nodiscard]] const std::string& canary_address() const noexcept { return canary_; }
  [[nodiscard]] bool alive() { return process_.running(); }

  [[nodiscard]] TargetReport report() {
    process_.write_line("report");
    const auto line = process_.read_line_starting("report ", 30s);
    if (!line) throw std::runtime_error("the attack target did not report (it died?)");
    std::istringstream in(line->substr(7));
    TargetReport r;
    in >> std::hex >> r.canary[0] >> r.canary[1] >> r.canary[2] >> std::dec >> r.counter >>
        r.peers_connected >> r.peers_refused >> r.dispatched >> r.rejected >> r.code_refused >>
        r.rss_kb >> r.peak_rss_kb;
    return r;
  }

  // `frames` counter frames (each adding 1) from a trusted source, flushed and closed.
  void honest_work(uint64_t frames) {
    const Ifunc counter = Ifunc::load(TC_COUNTER_BINARY);
    TestSource source(transport_, port_);
    for (uint64_t i = 0; i < frames; ++i) (void)send(source.channel, counter, uint64_t{1});
    source.channel.flush();
    source.channel.close();
  }

 private:
  Transport transport_;
  Process process_;
  uint16_t port_ = 0;
  std::string canary_;
};

// Runs the attacker to its end (bounded) and returns what it printed.
std::string attack(const AttackTarget& target, Transport transport, std::vector<std::string> args,
                   std::chrono::seconds limit = 120s) {
  std::vector<std::string> argv{TC_ATTACKER};
  argv.insert(argv.end(), args.begin(), args.end());
  for (const char* a : {"--port"}) argv.emplace_back(a);
  argv.push_back(std::to_string(target.port()));
  argv.emplace_back("--transport");
  argv.emplace_back(to_string(transport));
  Process attacker(argv);
  std::string output = attacker.read_rest(std::chrono::duration_cast<std::chrono::milliseconds>(limit));
  const std::optional<int> status = attacker.wait(5s);
  INFO(output);
  REQUIRE(status.has_value());
  REQUIRE(WIFEXITED(*status));
  REQUIRE(WEXITSTATUS(*status) == 0);  // the attack ran (whatever the target did)
  return output;
}

// The checks after every attack: alive, canaries intact, honest work done.
void check_survived(AttackTarget& target, uint64_t counter_before = 0) {
  REQUIRE(target.alive());
  const TargetReport after_attack = target.report();
  for (uint64_t word : after_attack.canary) CHECK(word == kCanary);
  target.honest_work(20);
  const TargetReport after_work = target.report();
  CHECK(after_work.counter == counter_before + 20);
  CHECK(target.alive());
}

// A frame carrying `code`'s container under identity `id`, with an 8-byte
// payload (the counter's increment): what a source sends with new code.
std::vector<std::byte> frame_with_code(const Ifunc& code, CodeId id, uint64_t increment) {
  std::vector<std::byte> frame(sizeof(FrameHeader) + 8 + code.code().size());
  FrameBuilder builder(frame);
  REQUIRE(builder.begin(code.codec(), id, 1, 8, code.code().size()) == errc::ok);
  builder.write_payload(std::as_bytes(std::span(&increment, 1)));
  builder.write_code(code.code());
  frame.resize(builder.size());
  return frame;
}

std::size_t env_or(const char* name, std::size_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::strtoull(value, nullptr, 10) : fallback;
}

}  // namespace

TEMPLATE_TEST_CASE("a peer with no key reaches no memory: put, get and atomics over UCX",
                   "[attack][ucx]", Shm, Tcp) {
  AttackTarget target(TestType::transport);
  // Over tcp lanes, which a shared-memory Receiver has too (connection set-up
  // needs them): there UCX emulates RMA with Active Messages that check no
  // rkey. (Over the shm lanes a put needs the target's own segment.)
  const std::string output =
      attack(target, Transport::tcp, {"rma", "--address", target.canary_address()});
  INFO(output);
  // The attack was made (an rkey to aim with, each operation posted) ...
  REQUIRE(output.find("rkey_unpack: status=Success") != std::string::npos);
  REQUIRE(output.find("put: status=") != std::string::npos);
  REQUIRE(output.find("get: status=") != std::string::npos);
  // (over an endpoint the target has already reset, UCX 1.22 would spin in
  // the atomic, so the attacker skips it and says so)
  REQUIRE((output.find("atomic: status=") != std::string::npos ||
           output.find("atomic: skipped (endpoint failed") != std::string::npos));
  // ... and the get did not read the canary.
  CHECK(output.find("600d600d600d600d") == std::string::npos);
  check_survived(target);
}

TEMPLATE_TEST_CASE("a peer granted a ring reaches nothing beyond it with the ring's own rkey",
                   "[attack][ucx]", Shm, Tcp) {
  // A development Receiver (Trust::anyone()) grants a ring to a raw-UCX
  // peer; it aims that ring's rkey at the bytes just past its ring and
  // credit line, where another peer's ring may lie, and at the canaries.
  // Over tcp this failed before issue 19 (the put wrote a canary). Over
  // shared memory UCX copies in the attacker's own process: past the ring is
  // the slack of its own segment, the canaries fault there; the Shm case
  // checks that this stays so, it did not fail before.
  AttackTarget target(TestType::transport, true);
  const std::string output = attack(target, TestType::transport,
                                    {"granted", "--address", target.canary_address()});
  INFO(output);
  REQUIRE(output.find("granted: ring=0x") != std::string::npos);  // it had a ring to aim from
  REQUIRE(output.find("rkey_unpack: status=Success") != std::string::npos);
  REQUIRE(output.find("put: status=") != std::string::npos);
  CHECK(output.find("600d600d600d600d") == std::string::npos);  // no get read a canary
  check_survived(target);
}

TEST_CASE("a peer's credit word outside the segment its rkey maps is refused, never put to",
          "[attack][ucx]") {
  // A development Receiver whose context does RMA puts credits where a source
  // asks, through the source's rkey. Over shared memory UCX turns that rkey
  // into a pointer by adding an offset, no bounds: a credit word 1 GiB past
  // the raw-UCX peer's segment would be a store 1 GiB past where the target
  // mapped it. (With the check taken out, the target died on that put.)
  AttackTarget target(Transport::shared_memory, true, 0, true);
  const std::string output =
      attack(target, Transport::shared_memory,
             {"granted", "--address", target.canary_address(), "--credit-shift", "0x40000000"});
  INFO(output);
  REQUIRE(output.find("hello: status=Success") != std::string::npos);  // the HELLO went
  CHECK(output.find("granted: no ring") != std::string::npos);         // refused, with a WELCOME
  CHECK(output.find("welcome status=0") == std::string::npos);
  check_survived(target);
  CHECK(target.report().peers_refused >= 1);
}

TEMPLATE_TEST_CASE("malformed and unproven HELLOs are refused, never a crash", "[attack][ucx]",
                   Shm, Tcp) {
  AttackTarget target(TestType::transport);
  const std::string output =
      attack(target, TestType::transport, {"hello", "--variant", "all", "--key", trusted_key_hex()});
  INFO(output);
  CHECK(output.find("welcome status=0") == std::string::npos);  // no ring for anyone
  check_survived(target);
  CHECK(target.report().peers_connected >= 5 + 1);  // every HELLO reached it, and the honest source
}

TEMPLATE_TEST_CASE("HELLOs with broken rkeys to a Receiver that trusts anyone are no crash",
                   "[attack][ucx]", Shm, Tcp) {
  // Such a Receiver grants a ring at once: the rkey that came with the HELLO
  // is the first thing it could touch. (It used to unpack it, and died.)
  AttackTarget target(TestType::transport, true);
  const std::string output = attack(target, TestType::transport, {"hello", "--variant", "all"});
  INFO(output);
  check_survived(target);
}

TEMPLATE_TEST_CASE("connect/close churn from 16 processes leaves the target serving",
                   "[attack][ucx][churn]", Shm, Tcp) {
  AttackTarget target(TestType::transport);
  const std::size_t cycles = env_or("THREECHAINS_ATTACK_CYCLES", 10000);
  const std::string output = attack(target, TestType::transport,
                                    {"churn", "--threads", "16", "--cycles", std::to_string(cycles)},
                                    240s);
  INFO(output);
  // Most cycles ran (a churner that could not connect at all would pass otherwise).
  const std::size_t at = output.find("churn: cycles=");
  REQUIRE(at != std::string::npos);
  CHECK(std::stoull(output.substr(at + 14)) >= cycles * 9 / 10);
  check_survived(target);
}

TEMPLATE_TEST_CASE("64 half-open handshakes do not lock out a trusted source",
                   "[attack][ucx]", Shm, Tcp) {
  // The handshake deadline is far away: only evicting the half-open
  // connections lets the trusted source in.
  AttackTarget target(TestType::transport, false, 60000);
  Process attacker({TC_ATTACKER, "half-open", "--count", "64", "--hold", "8", "--key",
                    trusted_key_hex(), "--port", std::to_string(target.port()), "--transport",
                    std::string(to_string(TestType::transport))});
  const auto holding = attacker.read_line_starting("half-open: holding", 60s);
  INFO(attacker.output());
  REQUIRE(holding.has_value());
  {
    const Ifunc counter = Ifunc::load(TC_COUNTER_BINARY);
    Worker worker{Context({.transport = TestType::transport})};
    Source source(worker);
    const auto start = std::chrono::steady_clock::now();  // the connect alone
    Channel channel = source.connect("127.0.0.1", target.port(), identified({}));
    const auto connected = std::chrono::steady_clock::now() - start;
    INFO("connected after "
         << std::chrono::duration_cast<std::chrono::milliseconds>(connected).count() << " ms");
    // Sanitized builds run several times slower: the bound there is looser.
    CHECK(connected < (kAddressSanitized ? 5s : 1s));
    for (int i = 0; i < 20; ++i) (void)send(channel, counter, uint64_t{1});
    channel.flush();
    channel.close();
  }
  CHECK(attacker.running());  // the flood was still there while we connected
  (void)attacker.read_rest(30s);
  REQUIRE(attacker.wait(10s).has_value());
  REQUIRE(target.alive());
  const TargetReport report = target.report();
  CHECK(report.counter == 20);
  for (uint64_t word : report.canary) CHECK(word == kCanary);
}

TEMPLATE_TEST_CASE("junk Active Messages from peers without a key are not kept", "[attack][ucx]",
                   Shm, Tcp) {
  AttackTarget target(TestType::transport);
  target.honest_work(1);  // the target's own memory settles first (code loaded, rings)
  const TargetReport before = target.report();
  const std::size_t megabytes = env_or("THREECHAINS_ATTACK_JUNK_MB", 512);
  const std::string output =
      attack(target, TestType::transport,
             {"junk-am", "--bytes", std::to_string(megabytes) + "M", "--size", "1M"}, 240s);
  INFO(output);
  const TargetReport after = target.report();
  INFO("peak RSS " << before.peak_rss_kb << " kB before, " << after.peak_rss_kb << " kB after");
  // The target is built like this test: under AddressSanitizer its RSS says
  // little (freed memory waits in quarantine).
  if (kAddressSanitized) {
    WARN("peak RSS not checked: AddressSanitizer keeps freed memory in quarantine");
  } else {
    CHECK(after.peak_rss_kb - before.peak_rss_kb <= 32 * 1024);
  }
  check_survived(target, 1);
}

TEMPLATE_TEST_CASE("a trusted peer cannot run code another peer loaded by naming its identity",
                   "[attack][ucx][identity]", Shm, Tcp) {
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  const Ifunc other = Ifunc::load(TC_COUNTER_BY_TWO);
  auto target = counter_target(TestType::transport, nullptr, {}, 3);
  // Peer A loads the counter and uses it.
  TestSource a(TestType::transport, target.port());
  CHECK(send(a.channel, counter, uint64_t{1}) == SendStatus::sent_with_code);
  a.channel.flush();
  // Peer B names A's code identity in a cached frame: it never showed that
  // code, so the target asks B for it, B has none, and the frame is dropped.
  {
    TestSource b(TestType::transport, target.port());
    std::vector<std::byte> frame(256);
    FrameBuilder builder(frame);
    REQUIRE(builder.begin(CodecId::bitcode, counter.id(), 1, 8, 0) == errc::ok);
    const uint64_t increment = 1000;
    builder.write_payload(std::as_bytes(std::span(&increment, 1)));
    frame.resize(builder.size());
    ChannelAccess::send_raw_frame(b.channel, frame);
    b.channel.flush();
    b.channel.close();
  }
  // Peer C sends other code under A's identity: refused, never A's code run
  // with C's payload.
  {
    TestSource c(TestType::transport, target.port());
    ChannelAccess::send_raw_frame(c.channel, frame_with_code(other, counter.id(), 100000));
    CHECK_THROWS_AS(c.channel.flush(), Error);  // the refusal comes back
    c.channel.close();
  }
  // A's own cached frames still run its code.
  CHECK(send(a.channel, counter, uint64_t{10}) == SendStatus::sent_cached);
  a.channel.close();
  const CounterResult result = target.result();
  INFO(result.first_error);
  CHECK(result.counter == 1 + 10);
}

// Code a frame carries sits in the peer's ring slot, which over shared memory
// the peer can keep writing after it committed the frame. The target takes
// one private copy before the digest, the signature check, the identity
// check and the load, so what was verified is what loads. The attacker here
// flips one byte of the code, over and over, from before the commit until
// the target answered: each attempt (a fresh target, so the code is new to
// it) must end with the code loaded and run as sent, or refused as
// tampered; never refused as code whose identity changed between two reads
// (what reading the slot twice gives), never another result.
TEST_CASE("code rewritten in its ring slot while the target checks it loads as verified or not at all",
          "[attack][ucx][identity]") {
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  constexpr int kAttempts = 24;
  int loaded = 0;
  int refused = 0;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    auto target = counter_target(Shm::transport);
    TestSource source(Shm::transport, target.port());
    std::byte* in_target = ChannelAccess::next_frame_in_target(source.channel);
    if (in_target == nullptr) {
      WARN("SKIP: this shared-memory channel does not write frames into the target's memory");
      source.channel.close();
      return;
    }
    const uint64_t increment = 7;
    const std::vector<std::byte> frame = frame_with_code(counter, counter.id(), increment);
    // A byte in the middle of the code: inside what the signature covers.
    const auto code_at = std::search(frame.begin(), frame.end(), counter.code().begin(),
                                     counter.code().end());
    REQUIRE(code_at != frame.end());
    const std::size_t victim =
        static_cast<std::size_t>(code_at - frame.begin()) + counter.code().size() / 2;
    std::atomic<bool> stop{false};
    std::thread flipper([&] {
      std::atomic_ref<std::byte> byte(in_target[victim]);
      while (!stop.load(std::memory_order_relaxed))
        byte.store(byte.load(std::memory_order_relaxed) ^ std::byte{0x5a}, std::memory_order_relaxed);
    });
    ChannelAccess::send_raw_frame(source.channel, frame);
    std::string outcome = "ran";
    try {
      source.channel.flush();
    } catch (const Error& error) {
      outcome = error.what();
    }
    stop = true;
    flipper.join();
    source.channel.close();
    const CounterResult result = target.result();
    INFO("attempt " << attempt << ": " << outcome << "; the target said: " << result.first_error);
    CHECK_THAT(std::string(result.first_error), !Catch::Contains("does not hash to its identity"));
    if (outcome == "ran") {
      CHECK(result.counter == increment);  // the signed code, as sent
      ++loaded;
    } else {
      CHECK(result.counter == 0);
      CHECK_THAT(outcome, Catch::Contains("refused"));
      ++refused;
    }
  }
  INFO(loaded << " attempts loaded the code, " << refused << " refused it as tampered");
  CHECK(loaded + refused == kAttempts);
}
