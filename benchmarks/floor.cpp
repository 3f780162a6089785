#include "floor.hpp"

#include "bench_util.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <utility>
#include <vector>

namespace bench {

namespace {

using Clock = std::chrono::steady_clock;

struct alignas(64) Line {
  std::atomic<uint64_t> value;
};

void reap(pid_t child) {
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

// Memory both sides of a floor see: an anonymous shared mapping, unmapped
// when the measurement ends, however it ends.
class SharedPages {
 public:
  explicit SharedPages(std::size_t bytes)
      : bytes_(bytes),
        data_(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) {
    if (data_ == MAP_FAILED) throw std::runtime_error("mmap");
  }
  SharedPages(const SharedPages&) = delete;
  SharedPages& operator=(const SharedPages&) = delete;
  ~SharedPages() { munmap(data_, bytes_); }
  [[nodiscard]] void* data() const noexcept { return data_; }

 private:
  std::size_t bytes_;
  void* data_;
};

// The other side of a floor: a forked child that runs `body` and exits with
// what it returns; killed and reaped with this object unless finish() reaped
// it first. It dies with the driver too.
class Partner {
 public:
  template <class Body>
  explicit Partner(Body&& body) : pid_(fork()) {
    if (pid_ < 0) throw std::runtime_error("fork");
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      _exit(body());
    }
  }
  Partner(const Partner&) = delete;
  Partner& operator=(const Partner&) = delete;
  ~Partner() {
    if (pid_ > 0) reap(pid_);
  }
  // Whether it still runs (it can only stop by exiting or dying); one that
  // stopped is reaped here, so that no later kill can reach a recycled pid.
  [[nodiscard]] bool alive() noexcept {
    if (waitpid(pid_, nullptr, WNOHANG) == 0) return true;
    pid_ = -1;
    return false;
  }
  // Waits for it to exit; true if it exited with 0.
  [[nodiscard]] bool finish() noexcept {
    int status = 0;
    const bool reaped = pid_ > 0 && waitpid(std::exchange(pid_, -1), &status, 0) > 0;
    return reaped && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  // Kills it now.
  void stop() noexcept {
    if (pid_ > 0) reap(std::exchange(pid_, -1));  // never kill(-1): that is every process
  }

 private:
  pid_t pid_;
};

}  // namespace

double cache_line_floor_us(uint64_t iterations, int rounds) {
  const SharedPages memory(2 * sizeof(Line));
  // One line each way, as a ring's commit word and its credit line.
  auto* ping = new (memory.data()) Line{};
  auto* pong = new (static_cast<Line*>(memory.data()) + 1) Line{};
  const uint64_t total = iterations * static_cast<uint64_t>(rounds);
  Partner partner([&] {
    for (uint64_t i = 1; i <= total; ++i) {
      while (ping->value.load(std::memory_order_acquire) != i) {
      }
      pong->value.store(i, std::memory_order_release);
    }
    return 0;
  });
  std::vector<double> one_way;
  uint64_t n = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    for (uint64_t i = 0; i < iterations; ++i) {
      ++n;
      ping->value.store(n, std::memory_order_release);
      while (pong->value.load(std::memory_order_acquire) != n) {
      }
    }
    one_way.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                      static_cast<double>(iterations) / 2);
  }
  partner.stop();
  return median(one_way);
}

double ring_rate_floor_mps(uint32_t window, uint64_t iterations, int rounds) {
  if (window == 0) throw std::invalid_argument("ring floor: a window of 0 slots");
  struct alignas(64) Slot {
    std::atomic<uint64_t> commit;
    uint64_t payload;
  };
  const SharedPages memory((window + 1) * sizeof(Slot));
  auto* slots = static_cast<Slot*>(memory.data());
  auto* consumed = new (slots + window) Line{};  // the consumer's count: the credit line
  for (uint32_t i = 0; i < window; ++i) new (slots + i) Slot{};
  const uint64_t total = iterations * static_cast<uint64_t>(rounds);
  Partner consumer([&] {
    uint64_t sum = 0;
    for (uint64_t i = 1; i <= total; ++i) {
      Slot& slot = slots[(i - 1) % window];
      while (slot.commit.load(std::memory_order_acquire) != i) {
      }
      sum += slot.payload;
      consumed->value.store(i, std::memory_order_release);
    }
    return sum == total ? 0 : 1;
  });
  // A consumer that died would leave us spinning: look for it now and then.
  uint64_t spins = 0;
  const auto wait_while = [&](auto&& busy) {
    while (busy()) {
      if ((++spins & 0xFFFFF) == 0 && !consumer.alive())
        throw std::runtime_error("ring floor: the consumer died");
    }
  };
  std::vector<double> rates;
  uint64_t n = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    for (uint64_t i = 0; i < iterations; ++i) {
      ++n;
      wait_while([&] { return n - consumed->value.load(std::memory_order_acquire) > window; });
      Slot& slot = slots[(n - 1) % window];
      slot.payload = 1;
      slot.commit.store(n, std::memory_order_release);
    }
    wait_while([&] { return consumed->value.load(std::memory_order_acquire) != n; });
    rates.push_back(static_cast<double>(iterations) /
                    std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  if (!consumer.finish()) throw std::runtime_error("ring floor: the consumer lost frames");
  return median(rates);
}

double tcp_loopback_floor_us(uint64_t iterations, int rounds) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    throw std::runtime_error("tcp floor: listen");
  const auto exchange = [](int fd, uint64_t& word, bool send_first) {
    const auto receive = [&] {
      std::size_t got = 0;
      while (got < sizeof(word)) {
        const ssize_t n =
            recv(fd, reinterpret_cast<char*>(&word) + got, sizeof(word) - got, MSG_DONTWAIT);
        if (n > 0)
          got += static_cast<std::size_t>(n);
        else if (n == 0)
          return false;
      }
      return true;
    };
    if (!send_first && !receive()) return false;
    if (send(fd, &word, sizeof(word), 0) != static_cast<ssize_t>(sizeof(word))) return false;
    return !send_first || receive();
  };
  const uint64_t total = iterations * static_cast<uint64_t>(rounds);
  Partner partner([&] {
    const int fd = accept(listener, nullptr, nullptr);
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint64_t word = 0;
    for (uint64_t i = 0; i < total; ++i)
      if (!exchange(fd, word, false)) break;
    return 0;
  });
  close(listener);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    throw std::runtime_error("tcp floor: connect");
  }
  std::vector<double> one_way;
  uint64_t word = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    for (uint64_t i = 0; i < iterations; ++i) {
      if (!exchange(fd, word, true)) {
        close(fd);
        throw std::runtime_error("tcp floor: the peer went away");
      }
      ++word;
    }
    one_way.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                      static_cast<double>(iterations) / 2);
  }
  close(fd);
  partner.stop();
  return median(one_way);
}

}  // namespace bench
