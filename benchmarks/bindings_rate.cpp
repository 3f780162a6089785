// threechains-bench-bindings: what the C API costs per send, against the C++
// API, in one run: one Receiver (on its progress thread), two channels to it
// from one Worker — one opened through <threechains/threechains.h>, one through
// the C++ API — and rounds of N 8-byte sends of the cached counter ifunc,
// alternating between them. Prints the median per-send time of each and their
// ratio; --json appends one line.
#include "bench_util.hpp"

#include <threechains/threechains.h>
#include <threechains/threechains.hpp>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace tc = threechains;
using Clock = std::chrono::steady_clock;

namespace {

void check(threechains_status status) {
  if (status != THREECHAINS_OK) throw std::runtime_error(threechains_last_error());
}

}  // namespace

int main(int argc, char** argv) try {
  std::string transport = "shm";
  uint64_t sends = 1000000;
  int rounds = 5;
  std::string json;
  CLI::App app{"The C API's cost per send, against the C++ API, in one run"};
  app.add_option("--transport", transport, "shm or tcp");
  app.add_option("-n", sends, "sends per round");
  app.add_option("--rounds", rounds, "rounds per API (alternating)");
  app.add_option("--json", json, "append one JSON line");
  CLI11_PARSE(app, argc, argv);

  uint64_t counter = 0;
  const tc::KeyPair key = tc::KeyPair::load(THREECHAINS_DEV_KEY);
  tc::ReceiverOptions options;
  options.trust.allow_peer(key.public_key()).allow_native_code_signer(key.public_key());
  options.target_args = &counter;
  tc::Receiver receiver(tc::Worker(tc::Context({.transport = tc::parse_transport(transport)})),
                        options);
  receiver.start();

  // The C side: its own handles, as a C program has them.
  threechains_context* context = nullptr;
  threechains_worker* worker = nullptr;
  threechains_keypair* c_key = nullptr;
  threechains_source* source = nullptr;
  threechains_channel* c_channel = nullptr;
  threechains_ifunc* c_ifunc = nullptr;
  check(threechains_context_create(transport.c_str(), &context));
  check(threechains_worker_create(context, &worker));
  check(threechains_keypair_load(THREECHAINS_DEV_KEY, &c_key));
  check(threechains_source_create(worker, &source));
  threechains_channel_options c_options;
  threechains_channel_options_init(&c_options);
  c_options.identity = c_key;
  check(threechains_source_connect(source, "127.0.0.1", receiver.port(), &c_options, &c_channel));
  check(threechains_ifunc_load(THREECHAINS_BENCH_BINARY, &c_ifunc));

  // The C++ side.
  tc::Source cxx_source(tc::Worker(tc::Context({.transport = tc::parse_transport(transport)})));
  tc::Channel channel = cxx_source.connect("127.0.0.1", receiver.port(), {.identity = key});
  const tc::Ifunc ifunc = tc::Ifunc::load(THREECHAINS_BENCH_BINARY);

  const uint64_t one = 1;
  check(threechains_channel_send(c_channel, c_ifunc, &one, sizeof(one)));  // code goes once
  check(threechains_channel_flush(c_channel));
  (void)tc::send(channel, ifunc, one);
  channel.flush();

  std::vector<double> c_us;
  std::vector<double> cxx_us;
  for (int round = 0; round < rounds; ++round) {
    auto start = Clock::now();
    for (uint64_t i = 0; i < sends; ++i) check(threechains_channel_send(c_channel, c_ifunc, &one, 8));
    check(threechains_channel_flush(c_channel));
    c_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                   double(sends));
    start = Clock::now();
    for (uint64_t i = 0; i < sends; ++i) (void)tc::send(channel, ifunc, one);
    channel.flush();
    cxx_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                     double(sends));
  }
  check(threechains_channel_close(c_channel));
  channel.close();
  threechains_channel_destroy(c_channel);
  threechains_ifunc_destroy(c_ifunc);
  threechains_source_destroy(source);
  threechains_keypair_destroy(c_key);
  threechains_worker_destroy(worker);
  threechains_context_destroy(context);
  receiver.stop();

  const uint64_t expected = 2 + 2 * sends * static_cast<uint64_t>(rounds);
  const double c = bench::median(c_us);
  const double cxx = bench::median(cxx_us);
  fmt::print("{} 8 B cached sends, median of {} rounds of {}: C API {:.3f} us, C++ API {:.3f} us, "
             "C/C++ {:.2f}x; counter {} (expected {})\n",
             transport, rounds, sends, c, cxx, c / cxx, counter, expected);
  if (!json.empty()) {
    if (std::FILE* out = std::fopen(json.c_str(), "a")) {
      fmt::print(out,
                 "{{\"bench\":\"bindings\",\"transport\":\"{}\",\"sends\":{},\"rounds\":{},"
                 "\"c_api_us\":{:.4f},\"cxx_api_us\":{:.4f},\"ratio\":{:.3f}}}\n",
                 transport, sends, rounds, c, cxx, c / cxx);
      std::fclose(out);
    }
  }
  return counter == expected ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "threechains-bench-bindings: %s\n", e.what());
  return 1;
}
