// The smallest complete ThreeChains program: a Receiver on one thread, a Source
// on another, each with its own UCX context, talking over tcp on loopback.
#include <threechains/threechains.hpp>

#include "adder.h"

#include <atomic>
#include <cstdio>
#include <thread>

namespace tc = threechains;

int main() {
  int64_t total = 0;
  std::atomic<uint16_t> port{0};
  std::atomic<bool> done{false};
  std::thread target([&] {
    tc::Worker worker(tc::Context({.transport = tc::Transport::tcp}));
    // Only sources holding our key connect; only code it signed runs.
    const tc::PublicKey key = tc::KeyPair::load(CONSUMER_KEY).public_key();
    tc::Receiver receiver(worker, {.trust = tc::Trust().allow_peer(key).allow_native_code_signer(key),
                                   .target_args = &total});
    port = receiver.port();
    receiver.run([&] { return receiver.stats().peers_closed >= 1; });
    done = true;
  });
  while (port == 0) std::this_thread::yield();

  tc::Worker worker(tc::Context({.transport = tc::Transport::tcp}));
  tc::Source source(worker);
  tc::Channel channel =
      source.connect("127.0.0.1", port, {.identity = tc::KeyPair::load(CONSUMER_KEY)});
  // Bitcode for the first third, relocatable objects for the second, and an
  // image pre-linked at build time for the last: each made from two sources.
  const tc::Ifunc adder = tc::Ifunc::load(ADDER_CONTAINER);
  const tc::Ifunc adder_binary = tc::Ifunc::load(ADDER_BINARY_CONTAINER);
  const tc::Ifunc adder_prelinked = tc::Ifunc::load(ADDER_PRELINKED_CONTAINER);
  for (int64_t i = 1; i <= 100; ++i)
    (void)tc::send(channel, i <= 33 ? adder : i <= 66 ? adder_binary : adder_prelinked, i);
  channel.close();
  target.join();
  const int64_t expected = 5050 * ADDER_FACTOR;
  std::printf("consumer: total = %lld (expected %lld)\n", static_cast<long long>(total),
              static_cast<long long>(expected));
  return total == expected && done ? 0 : 1;
}
