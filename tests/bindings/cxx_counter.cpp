// The counter ifunc through the C++ API: the other side of the Python tests,
// and (cross-built) the aarch64 target of the heterogeneous test.
//   cxx_counter target TRANSPORT PUBKEY FRAMES PORTFILE
//   cxx_counter source TRANSPORT CONTAINER KEY FRAMES PORT
#include <threechains/threechains.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace tc = threechains;

namespace {

int target(const std::string& transport, const std::string& public_key, uint64_t frames,
           const std::string& port_file) {
  uint64_t counter = 0;
  tc::ReceiverOptions options;
  const tc::PublicKey key = tc::PublicKey::load(public_key);
  options.trust.allow_peer(key).allow_native_code_signer(key);
  options.target_args = &counter;
  uint64_t errors = 0;
  uint64_t refusals = 0;
  options.on_error = [&](const tc::Error& e) {
    ++errors;
    refusals += e.is(tc::errc::peer_refused) ? 1 : 0;
    std::fprintf(stderr, "c++ target error: %s\n", e.what());
  };
  tc::Receiver receiver(tc::Worker(tc::Context({.transport = tc::parse_transport(transport)})),
                        std::move(options));
  std::ofstream(port_file + ".tmp") << receiver.port() << "\n";
  std::rename((port_file + ".tmp").c_str(), port_file.c_str());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  receiver.run([&] {
    const tc::ReceiverStats& s = receiver.stats();
    return (s.frames_dispatched >= frames && s.peers_closed >= 1) ||
           std::chrono::steady_clock::now() > deadline;
  });
  const tc::ReceiverStats& s = receiver.stats();
  const uint64_t expected = frames * (frames + 1) / 2;
  std::printf(
      "c++ target (%s): counter %llu (expected %llu), %llu frames run, %llu load(s), "
      "last load %.0f us\n",
      tc::host_triple().c_str(), static_cast<unsigned long long>(counter),
      static_cast<unsigned long long>(expected),
      static_cast<unsigned long long>(s.frames_dispatched),
      static_cast<unsigned long long>(s.code_loads),
      std::chrono::duration<double, std::micro>(s.last_load_time).count());
  // Every source of this target (C++, Python) first tries a key it does not
  // trust: refused, and reported to on_error.
  return counter == expected && s.frames_dispatched == frames && s.code_loads == 1 &&
                 errors == refusals && refusals == s.peers_refused && refusals >= 1
             ? 0
             : 1;
}

int source(const std::string& transport, const std::string& container, const std::string& key,
           uint64_t frames, uint16_t port) {
  tc::Source source(tc::Worker(tc::Context({.transport = tc::parse_transport(transport)})));
  tc::ChannelOptions options;
  try {  // a key the target does not trust: refused (its on_error sees it)
    (void)source.connect("127.0.0.1", port, options);
    std::fprintf(stderr, "c++ source: a channel without the trusted key was not refused\n");
    return 1;
  } catch (const tc::Error& e) {
    if (!e.is(tc::errc::peer_refused)) throw;
  }
  options.identity = tc::KeyPair::load(key);
  tc::Channel channel = source.connect("127.0.0.1", port, options);
  const tc::Ifunc ifunc = tc::Ifunc::load(container);
  // The first frame carries the code: sent and run (the target compiles or
  // links it first) before the rest, which go cached.
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  (void)tc::send(channel, ifunc, uint64_t{1});
  channel.flush();
  const auto first = clock::now();
  for (uint64_t i = 2; i <= frames; ++i) (void)tc::send(channel, ifunc, i);
  channel.flush();
  const auto rest = clock::now();
  channel.close();
  const auto us = [](clock::duration d) {
    return std::chrono::duration<double, std::micro>(d).count();
  };
  std::printf(
      "c++ source: %llu frames of '%s' (%s) sent; the first (with its code, "
      "run before the rest) %.0f us, then %.2f us per cached frame (pipelined)\n",
      static_cast<unsigned long long>(frames), ifunc.name().c_str(), tc::to_string(ifunc.codec()),
      us(first - start), frames > 1 ? us(rest - first) / static_cast<double>(frames - 1) : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "target" && argc == 6) {
    return target(argv[2], argv[3], std::strtoull(argv[4], nullptr, 10), argv[5]);
  }
  if (mode == "source" && argc == 7) {
    return source(argv[2], argv[3], argv[4], std::strtoull(argv[5], nullptr, 10),
                  static_cast<uint16_t>(std::atoi(argv[6])));
  }
  std::fprintf(stderr,
               "usage: cxx_counter target TRANSPORT PUBKEY FRAMES PORTFILE\n"
               "       cxx_counter source TRANSPORT CONTAINER KEY FRAMES PORT\n");
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "cxx_counter: %s\n", e.what());
  return 1;
}
