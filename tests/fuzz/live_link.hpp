// For the fuzzers that go through a real connection: a Receiver and a Source
// in this process, each on its own UCX worker over shared memory, connected
// with a real handshake (a key generated per run; the Receiver trusts it for
// peers and code). Built once; reconnected when an input ends the connection.
// A second, unauthenticated connection is made afresh for inputs that play a
// peer with no key.
#pragma once

#include "engine/testing.hpp"

#include "receiver_options.hpp"

#include <threechains/threechains.hpp>

#include <cstdio>
#include <cstdlib>
#include <optional>

namespace threechains::fuzz {

class LiveLink {
 public:
  LiveLink()
      : key_(KeyPair::generate()),
        target_worker_(Context({.transport = Transport::shared_memory})),
        receiver_(target_worker_, fuzz_receiver_options(key_)),
        source_worker_(Context({.transport = Transport::shared_memory})),
        source_(source_worker_) {
    reconnect();
  }

  Receiver& receiver() { return receiver_; }
  Channel& channel() { return *channel_; }

  // A new connection to the Receiver that never proves a key (the one before
  // it goes): what a peer with no key has to send on.
  const Endpoint& unauthenticated() {
    unauthenticated_.reset();  // force-closed when its last copy goes
    unauthenticated_.emplace(Endpoint::connect(source_worker_, "127.0.0.1", receiver_.port()));
    return *unauthenticated_;
  }
  const Worker& source_worker() const { return source_worker_; }

  // Progresses both ends until the source has nothing in flight (bounded):
  // whatever an input started is finished before the next one.
  // (The source's engine, not just its worker: it answers the target's cache
  // misses from its progress.)
  void settle() {
    for (int round = 0; round < 256; ++round) {
      receiver_.poll();
      if (channel_) {
        try {
          channel_->progress();
        } catch (const Error&) {  // the link is gone: ensure_connected() sees to it
          return;
        }
        if (channel_->frames_in_flight() == 0 && round > 4) return;
      }
    }
  }

  // A new connection if the last input ended this one (a goodbye, a refusal,
  // a frame that can never be consumed); code refusals the source heard are
  // taken (flush throws them) so they do not pile up.
  void ensure_connected() {
    if (receiver_.peers() == 1 && channel_ && channel_->frames_in_flight() == 0) {
      try {
        channel_->flush(std::chrono::milliseconds(0));
        return;
      } catch (const Error&) {  // a refusal (taken), or the link is gone
        if (receiver_.peers() == 1) return;
      }
    }
    reconnect();
  }

 private:
  void reconnect() {
    if (std::getenv("THREECHAINS_FUZZ_TRACE") != nullptr)
      std::fprintf(stderr, "live link: reconnect (peers %zu, in flight %llu)\n", receiver_.peers(),
                   channel_ ? static_cast<unsigned long long>(channel_->frames_in_flight()) : 0ull);
    channel_.reset();
    // The Receiver answers the handshake from its own thread meanwhile.
    receiver_.start();
    try {
      channel_.emplace(source_.connect("127.0.0.1", receiver_.port(),
                                       {.slots = 4, .slot_size = 8192, .identity = key_}));
    } catch (...) {
      receiver_.stop();
      throw;
    }
    receiver_.stop();
  }

  KeyPair key_;
  Worker target_worker_;
  Receiver receiver_;
  Worker source_worker_;
  Source source_;
  std::optional<Channel> channel_;
  std::optional<Endpoint> unauthenticated_;
};

}  // namespace threechains::fuzz
