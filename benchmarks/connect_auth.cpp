// threechains-bench-connect: what authentication adds to opening a channel.
// Two Receivers in this process, each served by its progress thread: one
// Trust::anyone() (no challenge: HELLO, WELCOME) and one that trusts a key
// (HELLO, CHALLENGE, PROOF, WELCOME: a round trip and an Ed25519 sign and
// verify more). A Source connects to each in turn and closes again, for each
// transport; medians and their ratio, side by side in one run, and one JSON
// line per transport on stderr.
#include <threechains/threechains.hpp>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <vector>

namespace tc = threechains;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Measure the cost of the authenticated handshake at connect"};
  int rounds = 40;
  std::vector<std::string> transports{"shm", "tcp"};
  app.add_option("-n,--rounds", rounds, "connects to each Receiver");
  app.add_option("--transports", transports, "shm, tcp");
  bool spin = false;
  app.add_flag("--spin", spin, "the Receivers' threads spin instead of sleeping when idle");
  CLI11_PARSE(app, argc, argv);

  const tc::KeyPair key = tc::KeyPair::generate();
  fmt::print("{:<6} {:>16} {:>16} {:>8}\n", "", "anyone() us", "authenticated us", "ratio");
  for (const std::string& name : transports) {
    const tc::Transport transport = tc::parse_transport(name);
    const tc::ProgressOptions progress{.sleep_when_idle = !spin};
    tc::Receiver open_door(tc::Worker(tc::Context({.transport = transport})),
                           {.trust = tc::Trust::anyone(), .progress = progress});
    tc::Receiver guarded(tc::Worker(tc::Context({.transport = transport})),
                         {.trust = tc::Trust().allow_peer(key.public_key()), .progress = progress});
    open_door.start();
    guarded.start();
    tc::Worker worker(tc::Context({.transport = transport}));
    tc::Source source(worker);
    std::vector<double> plain;
    std::vector<double> authenticated;
    const auto connect_us = [&](const tc::Receiver& receiver, const tc::ChannelOptions& options) {
      const auto start = std::chrono::steady_clock::now();
      tc::Channel channel = source.connect("127.0.0.1", receiver.port(), options);
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                                  start)
                            .count();
      channel.close();
      return us;
    };
    for (int i = 0; i < rounds; ++i) {  // taking turns: the machine's noise hits both
      plain.push_back(connect_us(open_door, {}));
      authenticated.push_back(connect_us(guarded, {.identity = key}));
    }
    open_door.stop();
    guarded.stop();
    const double a = median(plain);
    const double b = median(authenticated);
    fmt::print("{:<6} {:>16.1f} {:>16.1f} {:>7.2f}x\n", name, a, b, b / a);
    fmt::print(stderr,
               "{{\"bench\":\"connect\",\"transport\":\"{}\",\"anyone_us\":{:.1f},"
               "\"authenticated_us\":{:.1f},\"rounds\":{}}}\n",
               name, a, b, rounds);
  }
  return 0;
}
