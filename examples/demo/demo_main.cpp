// threechains-demo: a source process sends the counter ifunc N times to a
// target process, over shared memory and then over tcp, and prints what it
// cost: first call (code sent + JIT), cached latency and message rate, frame
// sizes. The target checks that its counter ends at exactly N.
//
//   threechains-demo                 # driver: starts both processes per transport
//   threechains-demo --role target   # (what the driver starts)
//   threechains-demo --role source
#include <threechains/threechains.hpp>

#include <fmt/core.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace tc = threechains;
using Clock = std::chrono::steady_clock;

namespace {

double micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

int run_target(tc::Transport transport, uint64_t expect, int port_fd) {
  tc::Worker worker(tc::Context({.transport = transport}));
  uint64_t counter = 0;
  // Secured: sources must prove the build's development key, which also
  // signed the counter ifunc (docs/security.md).
  const tc::PublicKey key = tc::KeyPair::load(THREECHAINS_DEV_KEY).public_key();
  tc::Receiver receiver(worker, {.trust = tc::Trust().allow_peer(key).allow_code_signer(key),
                                 .target_args = &counter});
  const std::string port = std::to_string(receiver.port()) + "\n";
  if (write(port_fd, port.data(), port.size()) != static_cast<ssize_t>(port.size())) return 3;
  close(port_fd);
  receiver.run([&] { return receiver.stats().peers_closed >= 1; });
  const auto& stats = receiver.stats();
  fmt::print(
      "  target: counter = {} (expected {}) {}; {} frames dispatched, {} code load(s), JIT {:.3f} "
      "ms\n",
      counter, expect, counter == expect ? "OK" : "MISMATCH", stats.frames_dispatched,
      stats.code_loads, std::chrono::duration<double, std::milli>(stats.total_load_time).count());
  std::fflush(stdout);
  return counter == expect ? 0 : 1;
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

  // Cached ping-pong: send, wait for the credit that says it ran.
  const uint64_t rest = total - 1;
  const uint64_t pingpongs = std::min<uint64_t>(rest / 10, 20000);
  start = Clock::now();
  for (uint64_t i = 0; i < pingpongs; ++i) {
    (void)tc::send(channel, counter, one);
    channel.flush();
  }
  const double cached_latency =
      pingpongs ? micros(Clock::now() - start) / double(pingpongs) / 2 : 0;
  const std::size_t cached_size = channel.stats().last_frame_size;

  // Streaming: as fast as the ring's credits allow.
  const uint64_t streamed = rest - pingpongs;
  start = Clock::now();
  for (uint64_t i = 0; i < streamed; ++i) (void)tc::send(channel, counter, one);
  channel.flush();
  const double rate =
      streamed ? double(streamed) / std::chrono::duration<double>(Clock::now() - start).count() : 0;

  fmt::print("  source: connect {:.1f} us (UCX wire-up and the Ed25519 handshake)\n", connect_us);
  fmt::print(
      "  source: first call {:.1f} us round trip (code {} B sent, JIT on the target inside)\n",
      first_rtt, counter.code().size());
  fmt::print("  source: cached latency {:.3f} us (half round trip, {} ping-pongs)\n",
             cached_latency, pingpongs);
  fmt::print("  source: cached message rate {:.2f} M msg/s ({} frames, ring of {} slots)\n",
             rate / 1e6, streamed, channel.slots());
  fmt::print("  source: frame size full {} B, cached {} B (8 B payload); {} frames sent in all\n",
             full_size, cached_size, channel.stats().frames_sent);
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
    if (role == "target") return run_target(tc::parse_transport(transport_name), n, port_fd);
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
