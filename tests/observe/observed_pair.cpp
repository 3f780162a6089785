// A target process with a source child: what tests/test_observe.cpp runs
// under gdb and perf. The target is this process (so a debugger started on it
// stops in its ifuncs); the source is forked before either side touches UCX.
//
//   threechains-observed --container spin.tcc --calls 200 --steps 100000
//
// JitOptions come from the environment (THREECHAINS_JIT_DEBUG,
// THREECHAINS_JIT_PERF), as a deployed target's would.
#include <threechains/threechains.hpp>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace tc = threechains;

namespace {

int run_source(int port_pipe, const std::string& container, uint64_t calls, uint64_t steps) {
  uint16_t port = 0;
  if (read(port_pipe, &port, sizeof(port)) != sizeof(port)) return 3;  // the target never started
  tc::Worker worker(tc::Context({.transport = tc::Transport::shared_memory}));
  tc::Source source(worker);
  tc::Channel channel =
      source.connect("127.0.0.1", port, {.identity = tc::KeyPair::load(TC_DEV_KEY)});
  const tc::Ifunc spin = tc::Ifunc::load(container);
  for (uint64_t i = 0; i < calls; ++i) (void)tc::send(channel, spin, steps);
  channel.flush();
  channel.close();
  return 0;
}

// The source child: its pid, and its exit status once reaped.
struct SourceChild {
  pid_t pid = -1;
  bool reaped = false;
  int status = 0;
  bool gone() {
    if (!reaped) reaped = waitpid(pid, &status, WNOHANG) == pid;
    return reaped;
  }
  bool succeeded() {
    if (!reaped) reaped = waitpid(pid, &status, 0) == pid;
    return reaped && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
};

int run_target(int port_pipe, uint64_t calls, SourceChild& source) {
  tc::Worker worker(tc::Context({.transport = tc::Transport::shared_memory}));
  const tc::PublicKey key = tc::KeyPair::load(TC_DEV_KEY).public_key();
  uint64_t sum = 0;
  tc::Receiver receiver(worker, {.trust = tc::Trust().allow_peer(key).allow_native_code_signer(key),
                                 .target_args = &sum});
  const uint16_t port = receiver.port();
  if (write(port_pipe, &port, sizeof(port)) != sizeof(port)) return 3;
  // Until the source said goodbye; or it is gone without (it failed before
  // connecting), or a minute passed: a test waits for this process.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  receiver.run([&] {
    return receiver.stats().peers_closed >= 1 || source.gone() ||
           std::chrono::steady_clock::now() > deadline;
  });
  const auto& stats = receiver.stats();
  std::printf("observed: %llu of %llu calls ran, %llu code load(s), sum %llu\n",
              static_cast<unsigned long long>(stats.frames_dispatched),
              static_cast<unsigned long long>(calls),
              static_cast<unsigned long long>(stats.code_loads),
              static_cast<unsigned long long>(sum));
  std::fflush(stdout);  // before an exit that may not flush (a sanitizer's, under gdb)
  return stats.frames_dispatched == calls ? 0 : 1;
}

// No UCX: `caches` JitCaches in this process at once, each asked for perf
// support by JitOptions (not the environment), each loading and calling the
// ifunc: what one jitdump shared by several caches looks like.
int run_local(const std::string& container, uint64_t caches, uint64_t steps) {
  const tc::Ifunc spin = tc::Ifunc::load(container);
  std::vector<tc::JitCache> jits;
  for (uint64_t k = 0; k < caches; ++k) jits.emplace_back(tc::JitOptions{.perf_support = true});
  uint64_t sum = 0;
  for (tc::JitCache& jit : jits) {
    const tc::LoadResult loaded = jit.load(spin.id(), spin.codec(), spin.code());
    loaded.entry(&steps, sizeof(steps), &sum);
  }
  std::printf("observed: %llu caches ran it, sum %llu\n", static_cast<unsigned long long>(caches),
              static_cast<unsigned long long>(sum));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string container;
  uint64_t calls = 100;
  uint64_t steps = 100000;
  uint64_t caches = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--container")
      container = argv[i + 1];
    else if (flag == "--calls")
      calls = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--steps")
      steps = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--caches")
      caches = std::strtoull(argv[i + 1], nullptr, 10);
    else {
      std::fprintf(stderr, "threechains-observed: unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  if (container.empty()) {
    std::fprintf(stderr, "usage: threechains-observed --container X.tcc [--calls N] [--steps M]\n");
    return 2;
  }
  if (caches != 0) {
    try {
      return run_local(container, caches, steps);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "threechains-observed (local): %s\n", e.what());
      return 1;
    }
  }
  int fds[2];
  if (pipe(fds) != 0) return 2;
  SourceChild source{.pid = fork()};
  if (source.pid < 0) return 2;
  if (source.pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a target killed (by gdb, say) takes its source along
    close(fds[1]);
    int rc = 1;
    try {
      rc = run_source(fds[0], container, calls, steps);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "threechains-observed (source): %s\n", e.what());
    }
    _exit(rc);
  }
  close(fds[0]);
  int rc = 1;
  try {
    rc = run_target(fds[1], calls, source);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "threechains-observed (target): %s\n", e.what());
  }
  close(fds[1]);  // a source still waiting for the port gives up
  return rc == 0 && source.succeeded() ? 0 : 1;
}
