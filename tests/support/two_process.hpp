// Runs a Receiver in a real child process (fork before any UCX state exists in
// the child) and talks to it from the test process, as a source would.
#pragma once

#include "support/trust.hpp"

#include <threechains/threechains.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace threechains::test {

// Transport (and how frames travel) for templated tests.
struct Shm {  // direct stores into the mapped ring, chosen automatically
  static constexpr Transport transport = Transport::shared_memory;
  static constexpr Delivery delivery = Delivery::automatic;
};
struct Tcp {  // Active Messages, chosen automatically (RMA over tcp is emulated)
  static constexpr Transport transport = Transport::tcp;
  static constexpr Delivery delivery = Delivery::automatic;
};
struct TcpPut {  // the ring over tcp, forced
  static constexpr Transport transport = Transport::tcp;
  static constexpr Delivery delivery = Delivery::put;
};
struct ShmPut {  // puts into the ring over shared memory, forced
  static constexpr Transport transport = Transport::shared_memory;
  static constexpr Delivery delivery = Delivery::put;
};
struct ShmAm {  // Active Messages over shared memory, forced
  static constexpr Transport transport = Transport::shared_memory;
  static constexpr Delivery delivery = Delivery::active_message;
};

// Channel options for transport type T, with its delivery.
template <class T>
ChannelOptions options_for(ChannelOptions options = {}) {
  options.delivery = T::delivery;
  return options;
}

// The UCX context for transport type T: puts need RMA on both sides (off by
// default: ContextOptions::remote_memory_access).
template <class T>
ContextOptions context_for() {
  if constexpr (requires { T::delivery; }) {
    return {.transport = T::transport, .remote_memory_access = T::delivery == Delivery::put};
  } else {
    return {.transport = T::transport};
  }
}

// What a child target's body works with.
struct ChildContext {
  Receiver& receiver;
  int commands;                      // read end of the test's command pipe
  int acks;                          // write end of the pipe the test waits on
  std::vector<std::string>& errors;  // every error the Receiver reported

  // Tells the test that a command has been carried out.
  void ack() const {
    const char c = 'k';
    if (write(acks, &c, 1) != 1) throw std::runtime_error("ack pipe");
  }

  // Copies the first error into a fixed buffer of a Result.
  template <std::size_t N>
  void first_error(char (&out)[N]) const {
    std::snprintf(out, N, "%s", errors.empty() ? "" : errors.front().c_str());
  }
};

// Pipes between the test and its child target: the child sends its port, then a
// Result when done; the test can send the child one-byte commands.
template <class Result>
class ChildTarget {
  static_assert(std::is_trivially_copyable_v<Result>);

 public:
  // `body(context)` runs in the child after the Receiver is up and its port is
  // sent; it returns the Result to report.
  // `deferred`: the child waits, with no UCX state of its own, until start()
  // tells it which port to listen on (fork while the test process has no UCX
  // state yet, start later: UCX does not survive a fork of a process using it).
  ChildTarget(Transport transport, std::function<Result(ChildContext&)> body,
              ReceiverOptions options = {}, bool deferred = false)
      : ChildTarget(ContextOptions{.transport = transport}, std::move(body), std::move(options),
                    deferred) {}

  ChildTarget(ContextOptions context_options, std::function<Result(ChildContext&)> body,
              ReceiverOptions options = {}, bool deferred = false) {
    int to_parent[2];
    int to_child[2];
    int acks[2];
    if (pipe(to_parent) != 0 || pipe(to_child) != 0 || pipe(acks) != 0)
      throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork");
    if (pid_ == 0) {
      close(to_parent[0]);
      close(to_child[1]);
      close(acks[0]);
      int rc = 0;
      try {
        if (deferred) {
          uint16_t port = 0;
          if (!read_all(to_child[0], &port, sizeof(port), std::chrono::seconds(300)))
            throw std::runtime_error("never started");
          options.port = port;
        }
        std::vector<std::string> errors;
        options.on_error = [&errors](const Error& e) { errors.emplace_back(e.what()); };
        Worker worker{Context(context_options)};
        Receiver receiver(worker, secured(options));
        const uint16_t port = receiver.port();
        write_all(to_parent[1], &port, sizeof(port));
        ChildContext context{receiver, to_child[0], acks[1], errors};
        const Result result = body(context);
        write_all(to_parent[1], &result, sizeof(result));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child target: %s\n", e.what());
        rc = 1;
      }
      _exit(rc);
    }
    close(to_parent[1]);
    close(to_child[0]);
    close(acks[1]);
    from_child_ = to_parent[0];
    to_child_ = to_child[1];
    acks_ = acks[0];
    if (!deferred) wait_for_port();
  }

  // A deferred child: listen on `port` now (0: any) and report it.
  void start(uint16_t port) {
    write_all(to_child_, &port, sizeof(port));
    wait_for_port();
  }

  ChildTarget(const ChildTarget&) = delete;
  ChildTarget& operator=(const ChildTarget&) = delete;

  ~ChildTarget() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(from_child_);
    close(to_child_);
    close(acks_);
  }

  [[nodiscard]] uint16_t port() const noexcept { return port_; }
  // The child's process id (its serving thread's too): -1 once it is reaped.
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

  void command(char c) const { write_all(to_child_, &c, 1); }

  // Sends a command and waits until the child acknowledges it.
  void command_and_wait(char c) const {
    command(c);
    char ack = 0;
    if (!read_all(acks_, &ack, 1, std::chrono::seconds(60)))
      throw std::runtime_error("child did not acknowledge");
  }

  // Waits for an acknowledgement the child sent of its own accord.
  [[nodiscard]] bool wait_for_ack(std::chrono::seconds limit) const {
    char ack = 0;
    return read_all(acks_, &ack, 1, limit);
  }

  // Waits for the child's Result and its clean exit.
  [[nodiscard]] Result result(std::chrono::seconds limit = std::chrono::seconds(120)) {
    Result r{};
    const bool got = read_all(from_child_, &r, sizeof(r), limit);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    if (!got) throw std::runtime_error("child target sent no result");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw std::runtime_error("child target failed");
    return r;
  }

  // In the child: waits up to `limit` for a command byte while polling the Receiver.
  static char wait_command(const ChildContext& context,
                           std::chrono::seconds limit = std::chrono::seconds(60)) {
    Receiver& receiver = context.receiver;
    const int fd = context.commands;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      for (int i = 0; i < 256; ++i) receiver.poll();
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) == 1) {
        char c = 0;
        if (read(fd, &c, 1) == 1) return c;
      }
    }
    throw std::runtime_error("child target: no command came");
  }

  // Kills the child at once (SIGKILL: no goodbye, no cleanup) and reaps it.
  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  // In the child: serves until `sources` sources have left (or `limit` passes).
  static void serve_until_closed(Receiver& receiver, uint64_t sources = 1,
                                 std::chrono::seconds limit = std::chrono::seconds(100)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    receiver.run([&] {
      if (receiver.stats().peers_closed >= sources) return true;
      // The clock every round: an idle Receiver sleeps between rounds.
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("child target: the source never closed");
      }
      return false;
    });
  }

 private:
  static void write_all(int fd, const void* data, std::size_t size) {
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = write(fd, p, size);
      if (n <= 0) throw std::runtime_error("pipe write");
      p += n;
      size -= static_cast<std::size_t>(n);
    }
  }

  static bool read_all(int fd, void* data, std::size_t size, std::chrono::seconds limit) {
    auto* p = static_cast<char*>(data);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (size > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left.count())) != 1) return false;
      const ssize_t n = read(fd, p, size);
      if (n <= 0) return false;
      p += n;
      size -= static_cast<std::size_t>(n);
    }
    return true;
  }

  void wait_for_port() {
    if (!read_all(from_child_, &port_, sizeof(port_), std::chrono::seconds(30))) {
      throw std::runtime_error("child target did not report its port");
    }
  }

  pid_t pid_ = -1;
  int from_child_ = -1;
  int to_child_ = -1;
  int acks_ = -1;
  uint16_t port_ = 0;
};

// A source in the test process, connected to a child target.
struct TestSource {
  TestSource(Transport transport, uint16_t port, ChannelOptions options = {})
      : TestSource(ContextOptions{.transport = transport}, port, std::move(options)) {}
  TestSource(const ContextOptions& context, uint16_t port, ChannelOptions options = {})
      : worker(Context(context)),
        source(worker),
        channel(source.connect("127.0.0.1", port, identified(options))) {}
  Worker worker;
  Source source;
  Channel channel;
};

}  // namespace threechains::test
