// The target the attacker tests aim at: a Receiver that trusts one key (for
// peers and code), counts with the counter ifunc, and keeps three canaries
// that no peer may read or write. Public API only, so the same source builds
// against any version of the library (what the notes' before/after runs did).
//
//   threechains-attack-target --transport shm|tcp --trust KEY.pub [--anyone yes]
//                             [--handshake-timeout-ms N] [--rma yes]
//                             [--confined yes|window] [--compile-time-limit-ms N]
//                             [--helper-cpus 0,2,...]
//   (--anyone: Trust::anyone(), a development Receiver that grants at once;
//    --rma: its context does RMA, so it puts credits where a source asks;
//    --confined: the key's code runs confined, compiled in a worker process;
//    yes: the counter is exposed by address, so the checked tier; window: the
//    counter lies in allocate_exposed memory, so the window tier)
//   prints "port P" and "canary 0xADDRESS", then serves; on stdin:
//     report   prints "report canary0 canary1 canary2 counter peers_connected
//              peers_refused frames_dispatched frames_rejected code_refused
//              rss_kb peak_rss_kb"
//     quit     exits 0
//   EOF on stdin exits too. Every line is flushed at once.
#include <threechains/threechains.hpp>

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace tc = threechains;

namespace {

constexpr uint64_t kCanary = 0x600d600d600d600dULL;
// volatile: the canaries are read from memory each time, as an attacker
// would have left them.
volatile uint64_t g_canary[3] = {kCanary, kCanary, kCanary};
uint64_t g_own_counter = 0;
// The counter the ifunc adds to: g_own_counter, or (--confined window) a
// word of allocate_exposed memory.
uint64_t* g_counter = &g_own_counter;

// The kB of a /proc/self/status field (VmRSS, VmHWM).
long status_kb(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::strlen(field) + 1));
  }
  return -1;
}

void print_report(const tc::Receiver& receiver) {
  const tc::ReceiverStats& stats = receiver.stats();
  std::printf(
      "report %" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
      " %" PRIu64 " %" PRIu64 " %ld %ld\n",
      g_canary[0], g_canary[1], g_canary[2], *g_counter,
      static_cast<uint64_t>(stats.peers_connected), static_cast<uint64_t>(stats.peers_refused),
      static_cast<uint64_t>(stats.frames_dispatched), static_cast<uint64_t>(stats.frames_rejected),
      static_cast<uint64_t>(stats.code_refused), status_kb("VmRSS:"), status_kb("VmHWM:"));
  std::fflush(stdout);
}

// A line from stdin if one is ready; "quit" on EOF.
bool read_command(std::string& command) {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  if (::poll(&p, 1, 0) != 1) return false;
  static std::string pending;
  char buffer[256];
  const ssize_t n = read(STDIN_FILENO, buffer, sizeof(buffer));
  if (n <= 0) {
    command = "quit";
    return true;
  }
  pending.append(buffer, static_cast<std::size_t>(n));
  const std::size_t end = pending.find('\n');
  if (end == std::string::npos) return false;
  command = pending.substr(0, end);
  pending.erase(0, end + 1);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string transport = "shm";
  std::string trust;
  bool anyone = false;
  bool rma = false;  // ContextOptions::remote_memory_access (credits by put)
  long handshake_timeout_ms = 0;  // 0: the default
  bool confined = false;          // the key's code runs confined (allow_code_signer)
  bool window = false;            // ... with its counter in allocate_exposed memory
  long compile_time_limit_ms = 0;  // 0: the default (ConfinementOptions::compile_time_limit)
  std::vector<int> helper_cpus;    // JitOptions::helper_cpus
  bool spin_only = false;  // --progress spin: never sleep (ProgressOptions::sleep_when_idle)
  long spin_us = -1;       // --progress sleep-N: spin N us before sleeping (-1: the default)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--transport") transport = argv[i + 1];
    else if (flag == "--trust") trust = argv[i + 1];
    else if (flag == "--anyone") anyone = std::string(argv[i + 1]) == "yes";
    else if (flag == "--handshake-timeout-ms") handshake_timeout_ms = std::stol(argv[i + 1]);
    else if (flag == "--rma") rma = std::string(argv[i + 1]) == "yes";
    else if (flag == "--confined") {
      window = std::string(argv[i + 1]) == "window";
      confined = window || std::string(argv[i + 1]) == "yes";
    } else if (flag == "--compile-time-limit-ms")
      compile_time_limit_ms = std::stol(argv[i + 1]);
    else if (flag == "--helper-cpus") {
      const std::string list = argv[i + 1];
      for (std::size_t at = 0; at < list.size();) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        helper_cpus.push_back(std::stoi(list.substr(at, comma - at)));
        at = comma + 1;
      }
    } else if (flag == "--progress") {
      const std::string policy = argv[i + 1];
      spin_only = policy == "spin";
      if (policy.rfind("sleep-", 0) == 0) {
        char* end = nullptr;
        spin_us = std::strtol(policy.c_str() + 6, &end, 10);
        if (end == policy.c_str() + 6 || *end != '\0' || spin_us < 0) {
          std::fprintf(stderr, "--progress %s: sleep-N takes microseconds\n", policy.c_str());
          return 2;
        }
      }
    }
  }
  if (trust.empty()) {
    std::fprintf(stderr, "usage: %s --transport shm|tcp --trust KEY.pub\n", argv[0]);
    return 2;
  }
  try {
    const tc::PublicKey key = tc::PublicKey::load(trust);
    tc::ReceiverOptions options;
    options.trust = anyone     ? tc::Trust::anyone()
                    : confined ? tc::Trust().allow_peer(key).allow_code_signer(key)
                               : tc::Trust().allow_peer(key).allow_native_code_signer(key);
    if (confined) options.target_args_bytes = sizeof(*g_counter);
    if (compile_time_limit_ms > 0)
      options.jit.confinement.compile_time_limit = std::chrono::milliseconds(compile_time_limit_ms);
    options.jit.helper_cpus = helper_cpus;
    options.target_args = g_counter;
    options.progress.sleep_when_idle = !spin_only;
    if (spin_us >= 0) options.progress.spin = std::chrono::microseconds(spin_us);
    if (handshake_timeout_ms > 0)
      options.limits.handshake_timeout = std::chrono::milliseconds(handshake_timeout_ms);
    options.on_error = [](const tc::Error&) {};  // refusals are the point; the report counts them
    tc::Worker worker(tc::Context(
        {.transport = tc::parse_transport(transport), .remote_memory_access = rma}));
    tc::Receiver receiver(worker, options);
    if (window) {
      g_counter = reinterpret_cast<uint64_t*>(
          receiver.cache().allocate_exposed("counter", sizeof(*g_counter), true).data());
      receiver.set_target_args(g_counter, sizeof(*g_counter));
    }
    std::printf("port %u\ncanary %p\n", static_cast<unsigned>(receiver.port()),
                static_cast<void*>(const_cast<uint64_t*>(g_canary)));
    std::fflush(stdout);
    bool done = false;
    auto next_look = std::chrono::steady_clock::now();
    receiver.run([&] {
      // stdin once a millisecond (rounds come fast while spinning, slowly
      // once the Receiver sleeps: the clock, not a round count).
      const auto now = std::chrono::steady_clock::now();
      if (now < next_look) return false;
      next_look = now + std::chrono::milliseconds(1);
      std::string command;
      while (!done && read_command(command)) {
        if (command == "report") print_report(receiver);
        if (command == "quit") done = true;
      }
      return done;
    });
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "attack target: %s\n", error.what());
    return 1;
  }
}
