// A mesh of Node processes for tests: the test process is rank 0, forked
// children are the others; ports go round by pipes, then every rank connects
// to every other through UCX's listener.
#pragma once

#include "support/two_process.hpp"

#include <threechains/node.hpp>

namespace threechains::test {

template <class Report>
class Mesh {
  static_assert(std::is_trivially_copyable_v<Report>);

 public:
  // `prepare(node)` runs on every rank before it connects (frames may arrive
  // as soon as it does: expose objects there). `child(node, commands_fd)` runs
  // on ranks 1.. once connected and returns their Report; it should serve
  // (node.poll) until a command arrives.
  Mesh(int64_t ranks, Transport transport, std::function<void(Node&)> prepare,
       std::function<Report(Node&, int)> child, NodeOptions options = {})
      : ranks_(ranks) {
    for (int64_t r = 1; r < ranks; ++r) {
      int up[2];
      int down[2];
      if (pipe(up) != 0 || pipe(down) != 0) throw std::runtime_error("pipe");
      const pid_t pid = fork();
      if (pid == 0) {
        close(up[0]);
        close(down[1]);
        int rc = 0;
        try {
          Node node(Worker(Context({.transport = transport})), r, ranks, secured(options));
          const uint16_t port = node.port();
          write_all(up[1], &port, sizeof(port));
          std::vector<uint16_t> ports(static_cast<std::size_t>(ranks));
          read_all(down[0], ports.data(), ports.size() * sizeof(uint16_t));
          prepare(node);
          node.connect(addresses(ports));
          const Report report = child(node, down[0]);
          node.close();
          write_all(up[1], &report, sizeof(report));
        } catch (const std::exception& e) {
          std::fprintf(stderr, "mesh rank %lld: %s\n", static_cast<long long>(r), e.what());
          rc = 1;
        }
        _exit(rc);
      }
      close(up[1]);
      close(down[0]);
      children_.push_back({pid, up[0], down[1]});
    }
    node_.emplace(Worker(Context({.transport = transport})), 0, ranks, secured(options));
    std::vector<uint16_t> ports{node_->port()};
    for (const Child& c : children_) {
      uint16_t port = 0;
      read_all(c.from, &port, sizeof(port));
      ports.push_back(port);
    }
    for (const Child& c : children_) write_all(c.to, ports.data(), ports.size() * sizeof(uint16_t));
    prepare(*node_);
    node_->connect(addresses(ports));
  }

  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;
  ~Mesh() {
    for (const Child& c : children_) {
      if (c.pid > 0) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, nullptr, 0);
      }
      close(c.from);
      close(c.to);
    }
  }

  [[nodiscard]] Node& node() { return *node_; }

  // Tells every child to finish, closes rank 0, and collects the reports.
  std::vector<Report> finish() {
    for (const Child& c : children_) {
      const char q = 'q';
      write_all(c.to, &q, 1);
    }
    node_->close();
    std::vector<Report> reports;
    for (Child& c : children_) {
      Report r{};
      // Keep this rank's worker going: the children's endpoints close with a
      // handshake that needs it.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      for (;;) {
        pollfd p{c.from, POLLIN, 0};
        if (::poll(&p, 1, 0) == 1) break;
        if (std::chrono::steady_clock::now() > deadline)
          throw std::runtime_error("a mesh rank sent no report");
        node_->worker().progress();
      }
      read_all(c.from, &r, sizeof(r));
      int status = 0;
      waitpid(c.pid, &status, 0);
      c.pid = -1;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw std::runtime_error("a mesh rank failed");
      reports.push_back(r);
    }
    return reports;
  }

  // In a child: serve until the test says finish.
  static void serve_until_told(Node& node, int commands) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    auto next_look = std::chrono::steady_clock::now();
    node.run([&] {
      // The pipe once a millisecond (rounds come fast while spinning, and
      // slowly once the Node sleeps: the clock, not a round count).
      const auto now = std::chrono::steady_clock::now();
      if (now < next_look) return false;
      next_look = now + std::chrono::milliseconds(1);
      if (now > deadline)
        throw std::runtime_error("never told to finish");
      pollfd p{commands, POLLIN, 0};
      return ::poll(&p, 1, 0) == 1;
    });
  }

 private:
  struct Child {
    pid_t pid;
    int from;
    int to;
  };

  static std::vector<NodeAddress> addresses(const std::vector<uint16_t>& ports) {
    std::vector<NodeAddress> out;
    for (uint16_t p : ports) out.push_back({"127.0.0.1", p});
    return out;
  }
  static void write_all(int fd, const void* data, std::size_t size) {
    if (write(fd, data, size) != static_cast<ssize_t>(size))
      throw std::runtime_error("mesh pipe write");
  }
  static void read_all(int fd, void* data, std::size_t size) {
    auto* p = static_cast<char*>(data);
    while (size > 0) {
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, 60000) != 1) throw std::runtime_error("mesh pipe: nothing came");
      const ssize_t n = read(fd, p, size);
      if (n <= 0) throw std::runtime_error("mesh pipe read");
      p += n;
      size -= static_cast<std::size_t>(n);
    }
  }

  int64_t ranks_;
  std::vector<Child> children_;
  std::optional<Node> node_;
};

}  // namespace threechains::test
