// threechains-bench-connect: what authentication adds to opening a channel.
// Two Receivers in this process, each served by its progress thread: one
// Trust::anyone() (no challenge: HELLO, WELCOME) and one that trusts a key
// (HELLO, CHALLENGE, PROOF, WELCOME: a round trip and an Ed25519 sign and
// verify more). A Source connects to each in turn and closes again, for each
// transport; medians and their ratio, side by side in one run, and one JSON
// line per transport on stderr.
//
// --many N: N channels to one Receiver (another process's would be the same
// handshakes; this one is served by its own thread), opened one after the
// other (Source::connect) and all at once (Source::connect_all, 4 and 64
// handshakes in flight), taking turns, --many-rounds times; milliseconds per
// channel, and the parallel ones as a multiple of the serial. The Receiver
// takes up to 64 unproven handshakes from this host (the default is 4: an
// operator raises ReceiverLimits::max_pending_per_address for a node that
// many peers connect to at once); rings are small (4 x 1 KiB), as idle peers'.
#include <threechains/threechains.hpp>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace tc = threechains;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

using Clock = std::chrono::steady_clock;

// Milliseconds per channel to open `n` channels to `port`: one by one
// (in_flight 0) or with connect_all. All are closed again afterwards.
double open_ms_per_channel(tc::Source& source, uint16_t port, int n, std::size_t in_flight,
                           const tc::ChannelOptions& options) {
  std::vector<tc::Channel> channels;
  const auto start = Clock::now();
  if (in_flight == 0) {
    for (int i = 0; i < n; ++i) channels.push_back(source.connect("127.0.0.1", port, options));
  } else {
    const std::vector<tc::ReceiverAddress> targets(static_cast<std::size_t>(n),
                                                   tc::ReceiverAddress{"127.0.0.1", port});
    channels = source.connect_all(targets, options, in_flight);
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count() / n;
  if (static_cast<int>(channels.size()) != n) throw std::runtime_error("channels missing");
  for (tc::Channel& channel : channels) channel.close();
  return ms;
}

int connect_many(const std::vector<std::string>& transports, int n, int rounds, bool spin,
                 const tc::ChannelOptions& ring) {
  const tc::KeyPair key = tc::KeyPair::generate();
  fmt::print("\n{} channels to one Receiver, ms per channel (median of {})\n", n, rounds);
  fmt::print("{:<6} {:>10} {:>14} {:>15} {:>10} {:>10}\n", "", "serial", "all, 4 at once",
             "all, 64 at once", "4 / serial", "64 / serial");
  for (const std::string& name : transports) {
    const tc::Transport transport = tc::parse_transport(name);
    tc::ReceiverOptions options{.trust = tc::Trust().allow_peer(key.public_key()),
                                .progress = {.sleep_when_idle = !spin}};
    options.limits.max_peers = static_cast<uint32_t>(n) + 16;
    options.limits.max_pending_handshakes = 64;
    options.limits.max_pending_per_address = 64;
    tc::Receiver receiver(tc::Worker(tc::Context({.transport = transport})), options);
    receiver.start();
    tc::Worker worker(tc::Context({.transport = transport}));
    tc::Source source(worker);
    tc::ChannelOptions channel = ring;
    channel.identity = key;
    std::vector<double> serial, four, sixty_four;
    for (int r = 0; r < rounds; ++r) {  // taking turns: the machine's noise hits all three
      serial.push_back(open_ms_per_channel(source, receiver.port(), n, 0, channel));
      four.push_back(open_ms_per_channel(source, receiver.port(), n, 4, channel));
      sixty_four.push_back(open_ms_per_channel(source, receiver.port(), n, 64, channel));
    }
    receiver.stop();
    const double s = median(serial), f = median(four), x = median(sixty_four);
    fmt::print("{:<6} {:>10.3f} {:>14.3f} {:>15.3f} {:>9.2f}x {:>9.2f}x\n", name, s, f, x, f / s,
               x / s);
    fmt::print(stderr,
               "{{\"bench\":\"connect_many\",\"transport\":\"{}\",\"channels\":{},"
               "\"serial_ms\":{:.3f},\"all4_ms\":{:.3f},\"all64_ms\":{:.3f},\"rounds\":{},"
               "\"slots\":{},\"slot_size\":{}}}\n",
               name, n, s, f, x, rounds, channel.slots, channel.slot_size);
  }
  return 0;
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
  int many = 0;
  int many_rounds = 3;
  app.add_option("--many", many, "also: N channels opened serially and all at once");
  app.add_option("--many-rounds", many_rounds, "rounds of --many (medians)");
  // Small rings by default (what connecting costs beyond the memory); a
  // Channel's own default is 16 slots of 128 KiB (--slots 16 --slot-kib 128).
  tc::ChannelOptions ring{.slots = 4, .slot_size = 1024};
  std::size_t slot_kib = 1;
  app.add_option("--slots", ring.slots, "ring slots each channel asks for (many)");
  app.add_option("--slot-kib", slot_kib, "KiB per slot (many)");
  CLI11_PARSE(app, argc, argv);
  ring.slot_size = slot_kib * 1024;
  if (many > 0) return connect_many(transports, many, many_rounds, spin, ring);

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
