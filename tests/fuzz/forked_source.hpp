// For fuzz_control: the Receiver in this (the fuzzing) process, the source
// in a child process, as in real use. The child holds the authenticated
// Channel and makes the unauthenticated connections; the parent sends it each
// input over a pipe and polls the Receiver until the child says it is done.
//
// Why not both in one process, as live_link.hpp does for fuzz_receive: UCX
// 1.13 names an fd's async handler by the fd's number, process-wide, and
// keeps missed events by that number. With two workers in one process and a
// connection made and closed per input, a closed fd's number is soon reused by
// the other worker, and a stale missed event then reaches a handler of the
// other worker's async context: UCX aborts (`handler->async == async`). A
// process with one worker (every real target) cannot get there.
#pragma once

#include "engine/protocol.hpp"
#include "engine/testing.hpp"

#include "receiver_options.hpp"

#include <threechains/threechains.hpp>

#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

namespace threechains::fuzz {

// The child's side: a Source with one authenticated Channel to the parent's
// Receiver, and a fresh key-less endpoint per unauthenticated input.
class SourceProcess {
 public:
  SourceProcess(const KeyPair& key, uint16_t port)
      : key_(key),
        port_(port),
        worker_(Context({.transport = Transport::shared_memory})),
        source_(worker_) {}

  // Sends one Active Message (id, header, body) on the channel or, when
  // `unauthenticated`, on a new connection that never proves a key; then
  // progresses until the source has nothing in flight (bounded).
  void send(bool unauthenticated, unsigned id, std::span<const uint8_t> header,
            std::span<const uint8_t> body) {
    try {
      // A key-less connection lasts from one HELLO to the next, so that a
      // PROOF (or anything else) can follow a HELLO on the same candidate. A
      // HELLO whose reserved word is not 0 names the trusted key: the target
      // then challenges it, and the PROOF after it reaches the signature check.
      // UCX reads the header and body until the send completes: they live
      // here, and a send still pending from the last input is cancelled first.
      if (in_flight_) {
        in_flight_->cancel(worker_);
        in_flight_.reset();
      }
      header_.assign(header.begin(), header.end());
      body_.assign(body.begin(), body.end());
      if (unauthenticated && id == detail::kAmHello && header_.size() == sizeof(detail::Hello)) {
        detail::Hello hello;
        std::memcpy(&hello, header_.data(), sizeof(hello));
        if (hello.reserved != 0) {
          std::memcpy(hello.key, key_.public_key().bytes().data(), sizeof(hello.key));
          hello.flags |= detail::kHelloHasKey;
          std::memcpy(header_.data(), &hello, sizeof(hello));
        }
      }
      const bool fresh = unauthenticated && (id == detail::kAmHello || !unauthenticated_ ||
                                             unauthenticated_->failed());
      const Endpoint& endpoint = !unauthenticated ? channel().endpoint()
                                 : fresh          ? fresh_unauthenticated()
                                                  : *unauthenticated_;
      Request request =
          endpoint.am_send(id, header_.data(), header_.size(), body_.data(), body_.size());
      for (int round = 0; round < 100000 && request.reap() == UCS_INPROGRESS; ++round)
        worker_.progress();
      if (request.reap() == UCS_INPROGRESS) in_flight_.emplace(std::move(request));
    } catch (const Error&) {  // the endpoint is gone: ensure_connected() sees to it
    }
    settle();
  }

  // A second, trusted connection whose HELLO asks for credits by put with
  // `rkey` as its credit word's rkey (the word's own if empty) and the word
  // moved by `shift`, signed and proven as usual: what reaches the target's
  // rkey checks and UCX's unpack, which only a proven peer can reach.
  void handshake_with_credit(std::span<const uint8_t> rkey, int64_t shift) {
    std::optional<std::vector<std::byte>> bytes;
    if (!rkey.empty()) bytes.emplace(reinterpret_cast<const std::byte*>(rkey.data()),
                                     reinterpret_cast<const std::byte*>(rkey.data()) + rkey.size());
    HandshakeAccess::override_hello_credit(std::move(bytes), shift);
    try {
      Channel extra = source_.connect("127.0.0.1", port_,
                                      {.slots = 2, .slot_size = 4096, .identity = key_});
      HandshakeAccess::clear_hello_credit();
      extra.close();
    } catch (const Error&) {  // refused: the point
    }
    HandshakeAccess::clear_hello_credit();
  }

  // A new connection if the last input ended this one; `receiver_has_one_peer`
  // is the parent's view. Code refusals the source heard are taken (flush
  // throws them) so they do not pile up.
  void ensure_connected(bool receiver_has_one_peer) {
    if (receiver_has_one_peer && channel_ && channel_->frames_in_flight() == 0) {
      try {
        channel_->flush(std::chrono::milliseconds(0));
        return;
      } catch (const Error&) {  // a refusal (taken), or the link is gone
        return;                 // the parent saw the peer still there
      }
    }
    channel_.reset();
    channel_.emplace(source_.connect("127.0.0.1", port_,
                                     {.slots = 4, .slot_size = 8192, .identity = key_}));
  }

 private:
  Channel& channel() {
    if (!channel_) ensure_connected(false);
    return *channel_;
  }

  const Endpoint& fresh_unauthenticated() {
    unauthenticated_.reset();  // force-closed when its last copy goes
    unauthenticated_.emplace(Endpoint::connect(worker_, "127.0.0.1", port_));
    return *unauthenticated_;
  }

  void settle() {
    for (int round = 0; round < 256; ++round) {
      if (!channel_) return;
      try {
        channel_->progress();
      } catch (const Error&) {
        return;
      }
      if (channel_->frames_in_flight() == 0 && round > 4) return;
    }
  }

  const KeyPair& key_;
  uint16_t port_;
  Worker worker_;
  Source source_;
  std::optional<Channel> channel_;
  std::optional<Endpoint> unauthenticated_;
  std::vector<uint8_t> header_;  // the last input's, while UCX may still read them
  std::vector<uint8_t> body_;
  std::optional<Request> in_flight_;
};

// The parent's side: owns the Receiver and the child.
class ForkedSource {
 public:
  ForkedSource() : key_(KeyPair::generate()) {
    int to_child[2];
    int to_parent[2];
    if (pipe(to_child) != 0 || pipe(to_parent) != 0) die("pipe");
    // Fork before either side has touched UCX: the child starts clean.
    child_ = fork();
    if (child_ < 0) die("fork");
    if (child_ == 0) {
      close(to_child[1]);
      close(to_parent[0]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      serve(to_child[0], to_parent[1]);  // never returns
    }
    close(to_child[0]);
    close(to_parent[1]);
    to_child_ = to_child[1];
    from_child_ = to_parent[0];
    // RMA on the Receiver's side: the superset, where a proven peer's credit
    // rkey is unpacked (deliver_credit); the pre-authentication paths are
    // the same code either way.
    target_worker_.emplace(
        Context({.transport = Transport::shared_memory, .remote_memory_access = true}));
    receiver_.emplace(*target_worker_, fuzz_receiver_options(key_));
    const uint16_t port = receiver_->port();
    write_all(to_child_, &port, sizeof(port));
    wait_for_child();  // it has connected (the handshake needed our polls)
  }
  ForkedSource(const ForkedSource&) = delete;
  ForkedSource& operator=(const ForkedSource&) = delete;
  ~ForkedSource() {
    close(to_child_);  // the child exits on end of input
    waitpid(child_, nullptr, 0);
  }

  Receiver& receiver() { return *receiver_; }

  // One trusted handshake whose credit rkey and address shift are the input's.
  void deliver_credit(std::span<const uint8_t> rkey, int64_t shift) {
    const std::array<uint32_t, 4> head = {kCredit, static_cast<uint32_t>(shift),
                                          static_cast<uint32_t>(static_cast<uint64_t>(shift) >> 32),
                                          static_cast<uint32_t>(rkey.size())};
    write_all(to_child_, head.data(), sizeof(head));
    write_all(to_child_, rkey.data(), rkey.size());
    wait_for_child();
    for (int round = 0; round < 64; ++round) receiver_->poll();
  }

  // One input: the child sends it while this process polls the Receiver;
  // then a few more polls, and the child reconnects if the input ended the
  // connection.
  void deliver(bool unauthenticated, unsigned id, std::span<const uint8_t> header,
               std::span<const uint8_t> body) {
    const std::array<uint32_t, 4> head = {kSend, (unauthenticated ? 1u : 0u) | (id << 2),
                                          static_cast<uint32_t>(header.size()),
                                          static_cast<uint32_t>(body.size())};
    write_all(to_child_, head.data(), sizeof(head));
    write_all(to_child_, header.data(), header.size());
    write_all(to_child_, body.data(), body.size());
    wait_for_child();
    for (int round = 0; round < 64; ++round) receiver_->poll();
    const std::array<uint32_t, 4> ensure = {kEnsure, receiver_->peers() == 1 ? 1u : 0u, 0, 0};
    write_all(to_child_, ensure.data(), sizeof(ensure));
    wait_for_child();
  }

 private:
  static constexpr uint32_t kSend = 1;
  static constexpr uint32_t kEnsure = 2;
  static constexpr uint32_t kCredit = 3;

  [[noreturn]] static void die(const char* what) {
    std::perror(what);
    std::abort();
  }

  static void write_all(int fd, const void* data, std::size_t size) {
    const auto* at = static_cast<const uint8_t*>(data);
    while (size > 0) {
      const ssize_t n = write(fd, at, size);
      if (n <= 0) die("write to the other side of the fuzz link");
      at += n;
      size -= static_cast<std::size_t>(n);
    }
  }
  // False at end of input (the parent went away).
  static bool read_all(int fd, void* data, std::size_t size) {
    auto* at = static_cast<uint8_t*>(data);
    while (size > 0) {
      const ssize_t n = read(fd, at, size);
      if (n == 0) return false;
      if (n < 0) die("read from the other side of the fuzz link");
      at += n;
      size -= static_cast<std::size_t>(n);
    }
    return true;
  }

  // Polls the Receiver until the child answers (a crashed child is a bug on
  // the source side: abort, so that libFuzzer keeps the input).
  void wait_for_child() {
    pollfd readable{.fd = from_child_, .events = POLLIN, .revents = 0};
    for (;;) {
      for (int round = 0; round < 16; ++round)
        if (receiver_) receiver_->poll();
      if (::poll(&readable, 1, receiver_ ? 0 : -1) > 0) break;
    }
    uint8_t done = 0;
    if (!read_all(from_child_, &done, 1) || done != 1) {
      std::fprintf(stderr, "fuzz link: the source process died\n");
      std::abort();
    }
  }

  [[noreturn]] void serve(int in, int out) {
    uint16_t port = 0;
    if (!read_all(in, &port, sizeof(port))) _exit(0);
    SourceProcess source(key_, port);
    source.ensure_connected(false);
    const uint8_t done = 1;
    write_all(out, &done, 1);
    std::vector<uint8_t> bytes;
    for (;;) {
      std::array<uint32_t, 4> head{};
      if (!read_all(in, head.data(), sizeof(head))) _exit(0);
      if (head[0] == kSend) {
        bytes.resize(std::size_t{head[2]} + head[3]);
        if (!read_all(in, bytes.data(), bytes.size())) _exit(0);
        const std::span<const uint8_t> all(bytes);
        source.send((head[1] & 1) != 0, head[1] >> 2, all.first(head[2]), all.subspan(head[2]));
      } else if (head[0] == kCredit) {
        bytes.resize(head[3]);
        if (!read_all(in, bytes.data(), bytes.size())) _exit(0);
        const auto shift = static_cast<int64_t>(uint64_t{head[1]} | (uint64_t{head[2]} << 32));
        source.handshake_with_credit(bytes, shift);
      } else {
        source.ensure_connected(head[1] != 0);
      }
      write_all(out, &done, 1);
    }
  }

  KeyPair key_;
  pid_t child_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::optional<Worker> target_worker_;
  std::optional<Receiver> receiver_;
};

}  // namespace threechains::fuzz
