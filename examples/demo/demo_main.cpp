// threechains-demo: a source process sends the counter ifunc N times to a
// target process, over shared memory and then over tcp, and prints what it
// cost: first call (code sent + linked: the tiered container's object runs at
// once, its IR is compiled for the target's CPU in the background), cached
// latency and message rate, frame sizes; and, in the same run on the same
// connection, what a plain UCX Active Message with the same payload costs,
// with the ratios. The target checks that its counter ends at exactly N and
// that every AM arrived.
//
//   threechains-demo                 # driver: starts both processes per transport
//   threechains-demo --role target   # (what the driver starts)
//   threechains-demo --role source
#include <threechains/threechains.hpp>

#include <fmt/core.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace tc = threechains;
using Clock = std::chrono::steady_clock;

namespace {

constexpr unsigned kAmCount = 0x7F01;  // source -> target: the AM baseline's message
constexpr unsigned kAmAck = 0x7F02;    // target -> source: how many have arrived

// The AM baseline's target side: a handler that counts (as the counter ifunc
// does) and remembers where to acknowledge.
struct AmCounter {
  uint64_t count = 0;
  uint64_t acked = 0;
  ucp_ep_h reply = nullptr;
  uint64_t ack_value = 0;
  void* ack_request = nullptr;
};

ucs_status_t on_am_count(void* arg, const void*, std::size_t, void* data, std::size_t length,
                         const ucp_am_recv_param_t* param) {
  auto* am = static_cast<AmCounter*>(arg);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0) am->reply = param->reply_ep;
  uint64_t increment = 0;
  if (length >= sizeof(increment)) std::memcpy(&increment, data, sizeof(increment));
  am->count += increment;
  return UCS_OK;
}

// After a poll, from outside the handler: tell the source how many arrived
// (what the ring's credits tell a Channel).
void acknowledge(AmCounter& am) {
  if (am.count == am.acked || am.reply == nullptr) return;
  if (am.ack_request != nullptr && ucp_request_check_status(am.ack_request) == UCS_INPROGRESS)
    return;
  if (am.ack_request != nullptr) ucp_request_free(am.ack_request);
  am.ack_value = am.count;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  const ucs_status_ptr_t r =
      ucp_am_send_nbx(am.reply, kAmAck, &am.ack_value, sizeof(am.ack_value), nullptr, 0, &p);
  am.ack_request = UCS_PTR_IS_PTR(r) ? r : nullptr;
  am.acked = am.ack_value;
}

// The AM baseline's source side, on the Channel's own (authenticated) endpoint.
class AmBaseline {
 public:
  AmBaseline(const tc::Worker& worker, ucp_ep_h ep) : worker_(worker), ep_(ep) {
    worker_.set_am_handler(kAmAck, &on_ack, this);
  }
  ~AmBaseline() { worker_.set_am_handler(kAmAck, nullptr, nullptr); }
  AmBaseline(const AmBaseline&) = delete;
  AmBaseline& operator=(const AmBaseline&) = delete;

  void send(uint64_t value) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
    const ucs_status_ptr_t r =
        ucp_am_send_nbx(ep_, kAmCount, nullptr, 0, &value, sizeof(value), &p);
    if (UCS_PTR_IS_ERR(r)) tc::check(UCS_PTR_STATUS(r), "ucp_am_send_nbx");
    if (r != nullptr) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS) worker_.progress();
      ucp_request_free(r);
    }
    ++sent_;
  }
  // Waits until the target acknowledged all but `window` of what was sent.
  void wait(uint64_t window = 0) {
    while (acked_ + window < sent_) worker_.progress();
  }
  [[nodiscard]] uint64_t sent() const noexcept { return sent_; }

 private:
  static ucs_status_t on_ack(void* arg, const void* header, std::size_t length, void*, std::size_t,
                             const ucp_am_recv_param_t*) {
    if (length == sizeof(uint64_t))
      std::memcpy(&static_cast<AmBaseline*>(arg)->acked_, header, sizeof(uint64_t));
    return UCS_OK;
  }
  const tc::Worker& worker_;  // the source's, which outlives this baseline
  ucp_ep_h ep_;
  uint64_t sent_ = 0;
  uint64_t acked_ = 0;
};

double micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

int run_target(tc::Transport transport, uint64_t expect, uint64_t expect_am, int port_fd) {
  tc::Worker worker(tc::Context({.transport = transport}));
  uint64_t counter = 0;
  AmCounter am;
  worker.set_am_handler(kAmCount, &on_am_count, &am);
  // Secured: sources must prove the build's development key, which also
  // signed the counter ifunc (docs/security.md).
  const tc::PublicKey key = tc::KeyPair::load(THREECHAINS_DEV_KEY).public_key();
  tc::Receiver receiver(worker, {.trust = tc::Trust().allow_peer(key).allow_native_code_signer(key),
                                 .target_args = &counter});
  const std::string port = std::to_string(receiver.port()) + "\n";
  if (write(port_fd, port.data(), port.size()) != static_cast<ssize_t>(port.size())) return 3;
  close(port_fd);
  receiver.run([&] {
    acknowledge(am);
    return receiver.stats().peers_closed >= 1;
  });
  if (am.ack_request != nullptr) {
    while (ucp_request_check_status(am.ack_request) == UCS_INPROGRESS) worker.progress();
    ucp_request_free(am.ack_request);
  }
  worker.set_am_handler(kAmCount, nullptr, nullptr);
  const auto& stats = receiver.stats();
  const bool ok = counter == expect && am.count == expect_am;
  fmt::print(
      "  target: counter = {} (expected {}), AM baseline count = {} (expected {}) {}; {} frames "
      "dispatched, {} code load(s) in {:.3f} ms\n",
      counter, expect, am.count, expect_am, ok ? "OK" : "MISMATCH", stats.frames_dispatched,
      stats.code_loads, std::chrono::duration<double, std::milli>(stats.total_load_time).count());
  fmt::print("  target: the first call ran tier {} ({}); {}\n", stats.last_load_tier,
             stats.last_load_tier == 0 ? "the shipped object, linked on arrival"
                                       : "compiled here for this CPU",
             stats.promotions != 0 ? "then tier 1 (its IR compiled for this CPU in the "
                                     "background) took over"
             : receiver.cache().promotions_pending()
                 ? "tier 1 was still compiling in the background when the source left"
                 : "no tier 1 (the container has no IR for this host, or tiering is off)");
  for (const tc::IfuncStats& ifunc : receiver.ifunc_stats()) {
    fmt::print("  target: ifunc '{}' (code {:#x}): {} calls, {} payload bytes, {} ns a call "
               "(mean of {} timed), {} refused, {} trapped\n",
               ifunc.name, ifunc.code, ifunc.calls, ifunc.payload_bytes, ifunc.mean_time().count(),
               ifunc.timed_calls, ifunc.refusals, ifunc.traps);
  }
  std::fflush(stdout);
  return ok ? 0 : 1;
}

int run_source(tc::Transport transport, uint16_t port, uint64_t total,
               const std::string& container) {
  tc::Worker worker(tc::Context({.transport = transport}));
  tc::Source source(worker);
  const tc::KeyPair identity = tc::KeyPair::load(THREECHAINS_DEV_KEY);
  const auto connecting = Clock::now();
  tc::Channel channel = source.connect("127.0.0.1", port, {.identity = identity});
  const double connect_us = micros(Clock::now() - connecting);
  const tc::Ifunc counter = tc::Ifunc::load(container);
  const uint64_t one = 1;
  if (std::getenv("THREECHAINS_SHOW_LANES") != nullptr)
    fmt::print("{}", channel.endpoint().describe());

  // First call: the frame carries the code; the round trip includes the JIT.
  auto start = Clock::now();
  (void)tc::send(channel, counter, one);
  channel.flush();
  const double first_rtt = micros(Clock::now() - start);
  const std::size_t full_size = channel.stats().last_frame_size;

  // Cached figures, ifunc and plain UCX Active Messages on the same endpoint
  // (a handler that adds the payload to a counter, acknowledged after each
  // poll as the ring's credits are), taking turns over kRounds rounds so that
  // what else runs meanwhile (the target's tier-1 compile, a noisy neighbour)
  // falls on both; the median round is reported.
  constexpr uint64_t kRounds = 5;
  const uint64_t rest = total - 1;
  const uint64_t pingpongs = std::min<uint64_t>(rest / 10, 20000) / kRounds;
  const uint64_t streamed = (rest - pingpongs * kRounds) / kRounds;
  const uint64_t leftover = rest - (pingpongs + streamed) * kRounds;
  for (uint64_t i = 0; i < leftover; ++i) (void)tc::send(channel, counter, one);
  channel.flush();
  AmBaseline am(worker, channel.endpoint().handle());
  for (uint64_t i = 0; i < 1 + leftover; ++i) {  // as many as the ifunc had before
    am.send(one);
    am.wait();
  }
  std::vector<double> latency, am_latency, rate, am_rate;
  const auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  for (uint64_t round = 0; round < kRounds; ++round) {
    // Ping-pong: send, wait for the credit (the ack) that says it ran.
    start = Clock::now();
    for (uint64_t i = 0; i < pingpongs; ++i) {
      (void)tc::send(channel, counter, one);
      channel.flush();
    }
    latency.push_back(seconds_since(start) * 1e6 / double(std::max<uint64_t>(pingpongs, 1)) / 2);
    start = Clock::now();
    for (uint64_t i = 0; i < pingpongs; ++i) {
      am.send(one);
      am.wait();
    }
    am_latency.push_back(seconds_since(start) * 1e6 / double(std::max<uint64_t>(pingpongs, 1)) / 2);
    // Streaming: as fast as the ring's credits (the acks, same window) allow.
    start = Clock::now();
    for (uint64_t i = 0; i < streamed; ++i) (void)tc::send(channel, counter, one);
    channel.flush();
    rate.push_back(double(streamed) / seconds_since(start));
    start = Clock::now();
    for (uint64_t i = 0; i < streamed; ++i) {
      am.wait(channel.slots() - 1);
      am.send(one);
    }
    am.wait();
    am_rate.push_back(double(streamed) / seconds_since(start));
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double cached_latency = median(latency);
  const double amlat = median(am_latency);
  const double cached_rate = median(rate);
  const double amrate = median(am_rate);
  const std::size_t cached_size = channel.stats().last_frame_size;

  fmt::print("  source: connect {:.1f} us (UCX wire-up and the Ed25519 handshake)\n", connect_us);
  fmt::print(
      "  source: first call {:.1f} us round trip (code {} B sent; linked on the target inside)\n",
      first_rtt, counter.code().size());
  fmt::print("  source: cached latency {:.3f} us (half round trip, median of {} rounds of {})\n",
             cached_latency, kRounds, pingpongs);
  fmt::print(
      "  source: cached message rate {:.2f} M msg/s (median of {} rounds of {} frames, ring "
      "of {} slots)\n",
      cached_rate / 1e6, kRounds, streamed, channel.slots());
  fmt::print("  source: frame size full {} B, cached {} B (8 B payload); {} frames sent in all\n",
             full_size, cached_size, channel.stats().frames_sent);
  fmt::print(
      "  source: UCX Active Messages, same run and endpoint, taking turns: latency {:.3f} us, "
      "rate {:.2f} M msg/s ({} sent)\n",
      amlat, amrate / 1e6, am.sent());
  fmt::print(
      "  source: ifunc vs AM: latency {:.2f}x, rate {:.2f}x; first call {:.0f}x a cached AM round "
      "trip\n",
      cached_latency / amlat, cached_rate / amrate, first_rtt / (2 * amlat));
  std::fflush(stdout);
  channel.close();
  return 0;
}

// Runs one transport: starts the target, then the source, and waits for both.
int drive(const std::string& self, const std::string& transport, uint64_t n,
          const std::string& container) {
  fmt::print("== {} ==\n",
             transport == "shm" ? "shared memory (UCX posix/sysv)" : "tcp (UCX tcp over loopback)");
  std::fflush(stdout);
  int fds[2];
  if (pipe(fds) != 0) return 2;
  const pid_t target = fork();
  if (target == 0) {
    close(fds[0]);
    const std::string fd = std::to_string(fds[1]);
    const std::string expect = std::to_string(n);
    execl(self.c_str(), self.c_str(), "--role", "target", "--transport", transport.c_str(),
          "--port-fd", fd.c_str(), "-n", expect.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  char buffer[32] = {};
  const ssize_t got = read(fds[0], buffer, sizeof(buffer) - 1);
  close(fds[0]);
  if (got <= 0) {
    fmt::print(stderr, "demo: the target did not start\n");
    waitpid(target, nullptr, 0);
    return 2;
  }
  const std::string port = std::to_string(std::stoi(buffer));
  const pid_t source = fork();
  if (source == 0) {
    const std::string count = std::to_string(n);
    execl(self.c_str(), self.c_str(), "--role", "source", "--transport", transport.c_str(),
          "--port", port.c_str(), "-n", count.c_str(), "--container", container.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int source_status = 0;
  int target_status = 0;
  waitpid(source, &source_status, 0);
  waitpid(target, &target_status, 0);
  const bool ok = WIFEXITED(source_status) && WEXITSTATUS(source_status) == 0 &&
                  WIFEXITED(target_status) && WEXITSTATUS(target_status) == 0;
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ThreeChains demo: a source process sends the counter ifunc to a target process"};
  std::string role = "driver";
  std::string transport_name;
  uint16_t port = 0;
  int port_fd = -1;
  uint64_t n = 100000;
  std::string container = THREECHAINS_COUNTER_CONTAINER;
  app.add_option("--role", role, "driver, target or source")
      ->check(CLI::IsMember({"driver", "target", "source"}));
  app.add_option("--transport", transport_name, "shm or tcp (driver: both when omitted)");
  app.add_option("--port", port, "source: the target's port");
  app.add_option("--port-fd", port_fd, "target: write the listening port to this fd");
  app.add_option("-n,--count", n, "ifunc sends per transport")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  app.add_option("--container", container, "counter ifunc container (.tcc)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (role == "target") {
      // The source's AM baseline sends as many messages as ifunc calls.
      return run_target(tc::parse_transport(transport_name), n, n, port_fd);
    }
    if (role == "source")
      return run_source(tc::parse_transport(transport_name), port, n, container);
    const std::vector<std::string> transports = transport_name.empty()
                                                    ? std::vector<std::string>{"shm", "tcp"}
                                                    : std::vector<std::string>{transport_name};
    const tc::Ifunc counter = tc::Ifunc::load(container);
    fmt::print("counter ifunc: {} ({} B fat container: {} images)\n", container,
               counter.code().size(), counter.info().triples.size());
    int rc = 0;
    for (const std::string& t : transports) rc |= drive("/proc/self/exe", t, n, container);
    fmt::print("{}\n", rc == 0 ? "demo: OK" : "demo: FAILED");
    return rc;
  } catch (const std::exception& e) {
    fmt::print(stderr, "threechains-demo ({}): {}\n", role, e.what());
    return 1;
  }
}
