// The compile worker's clock, driven directly (and, at the end, the
// JitCache's preparation of large confined containers for it): a worker whose CPU time
// stands still is stopped as blocked (the code's fault: refused), one that
// gets too little CPU to finish is given up without blaming its code. The
// worker is real (threechains-compile-worker compiling heavy); what it is
// denied, the test takes away with SIGSTOP, through a pidfd so that a
// signal never reaches a process that reused its number.
#include "jit/compile_worker.hpp"
#include "jit/container_images.hpp"
#include "support/temp_dir.hpp"
#include "support/threads.hpp"

#include <threechains/container.hpp>
#include <threechains/error.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace threechains;
using namespace std::chrono_literals;

std::vector<std::byte> heavy_bitcode() {
  std::ifstream file(TC_HEAVY, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto* bytes = reinterpret_cast<const std::byte*>(text.data());
  for (ParsedImage& image : parse_container({bytes, text.size()})) {
    if (image.kind == CodecId::bitcode && same_target(image.triple, host_triple()))
      return std::move(image.bytes);
  }
  FAIL("no bitcode image for this host in " << TC_HEAVY);
  return {};
}

// A compile worker this process started, as a pidfd; -1 while there is none.
int our_worker() {
  for (const std::filesystem::directory_entry& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream comm(entry.path() / "comm");
    std::string name;
    if (!std::getline(comm, name) || name != "threechains-com") continue;
    std::ifstream status(entry.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("PPid:", 0) != 0) continue;
      if (std::stol(line.substr(5)) != getpid()) break;
      const pid_t pid = static_cast<pid_t>(std::stol(entry.path().filename().string()));
      return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    }
  }
  return -1;
}

bool signal_worker(int pidfd, int signal) {
  return syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0) == 0;
}

// Submits heavy, finds its worker, hands it to `deny` on a thread of its own
// (which returns once `over` is set), and polls until the compile ends.
template <typename Deny>
CompileWorkers::Outcome compile_denied(CompileWorkers& workers, Deny deny) {
  const std::vector<std::byte> bitcode = heavy_bitcode();
  workers.submit(1, workers.prepare("heavy", bitcode));
  std::vector<std::pair<uint64_t, CompileWorkers::Outcome>> finished = workers.poll();
  int pidfd = -1;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (pidfd < 0 && finished.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
    pidfd = our_worker();
  }
  REQUIRE(pidfd >= 0);
  std::atomic<bool> over{false};
  std::thread denier([&] { deny(pidfd, over); });
  while (finished.empty()) {
    std::this_thread::sleep_for(10ms);
    finished = workers.poll();
  }
  over.store(true);
  denier.join();
  close(pidfd);
  REQUIRE(finished.size() == 1);
  return std::move(finished.front().second);
}

CompileWorkers::Settings settings() {
  CompileWorkers::Settings settings;
  settings.time_limit = 400ms;  // heavy needs seconds
  return settings;
}

}  // namespace

TEST_CASE("a compile worker that stops using CPU is stopped as blocked, and its code refused",
          "[confinement][limits][compile]") {
  CompileWorkers workers(settings());
  const CompileWorkers::Outcome outcome =
      compile_denied(workers, [](int pidfd, const std::atomic<bool>& /*over*/) {
        CHECK(signal_worker(pidfd, SIGSTOP));  // and never again
      });
  REQUIRE(outcome.error.has_value());
  INFO(outcome.error->what() << " after " << std::chrono::duration_cast<std::chrono::milliseconds>(outcome.took).count() << " ms");
  CHECK(outcome.error->is(errc::code_refused));
  CHECK_THAT(outcome.error->what(), Catch::Contains("(blocked)"));
  CHECK_FALSE(outcome.target_failed);
  // Not before 4x its limit on the clock; soon after its CPU time has
  // stood still for its limit.
  CHECK(outcome.took >= 1600ms);
  CHECK(outcome.took < 3000ms);
}

TEST_CASE("a compile worker the machine starves is given up at 16x its limit, without blame",
          "[confinement][limits][compile]") {
  CompileWorkers workers(settings());
  // 3 ms of every 100 on a CPU: its CPU time grows, too slowly to finish.
  const CompileWorkers::Outcome outcome =
      compile_denied(workers, [](int pidfd, const std::atomic<bool>& over) {
        while (!over.load() && signal_worker(pidfd, SIGSTOP)) {
          std::this_thread::sleep_for(97ms);
          if (!signal_worker(pidfd, SIGCONT)) break;
          std::this_thread::sleep_for(3ms);
        }
        (void)signal_worker(pidfd, SIGCONT);
      });
  REQUIRE(outcome.error.has_value());
  INFO(outcome.error->what() << " after " << std::chrono::duration_cast<std::chrono::milliseconds>(outcome.took).count() << " ms");
  CHECK(outcome.error->is(errc::timeout));
  CHECK_THAT(outcome.error->what(), Catch::Contains("too busy to finish the compile") &&
                                        Catch::Contains("the code is not refused"));
  CHECK(outcome.target_failed);  // nothing banned, no trap counted
  CHECK(outcome.took >= 6400ms);
  CHECK(outcome.took < 8000ms);
}

// A large confined container (big_table: over 256 KiB, compiling in
// milliseconds) is checked, inflated, parsed and written out for its worker
// on the JitCache's preparation thread, not on the thread that loads it:
// start_load returns at once whatever the container holds, and what became
// of it (linked, found in the object store, refused) comes from finish_loads.
namespace {

// The first batch finish_loads hands back (a test of "answered once" needs
// the batch, not one load's answer: tests/support/finish_loads.hpp).
std::vector<JitCache::FinishedLoad> finish_within(JitCache& cache, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<JitCache::FinishedLoad> finished;
  while (finished.empty() && std::chrono::steady_clock::now() < deadline) {
    finished = cache.finish_loads();
    if (finished.empty()) std::this_thread::sleep_for(1ms);
  }
  return finished;
}

}  // namespace

TEST_CASE("a large confined container is prepared beside the thread that loads it",
          "[jit][compile]") {
  const Ifunc big = Ifunc::load(TC_BIG_TABLE);
  REQUIRE(big.code().size() >= std::size_t{64} << 10);
  const test::TempDir dir("prepared-aside");
  const JitOptions options{.code_cache_directory = (dir.path() / "objects").string()};
  {
    JitCache cache(options);
    CHECK_FALSE(cache.start_load(big.id(), big.codec(), big.code(), Confine::yes).has_value());
    CHECK(cache.loading(big.id()));
    const std::vector<JitCache::FinishedLoad> finished = finish_within(cache, 120s);
    REQUIRE(finished.size() == 1);
    INFO((finished[0].error ? finished[0].error->what() : "linked"));
    REQUIRE(finished[0].result.has_value());
    CHECK_FALSE(finished[0].result->from_code_cache);
    CHECK(finished[0].result->name == "big_table");
    CHECK(cache.find_ifunc(big.id()) != nullptr);
  }
  SECTION("a restarted cache finds its object in the store, beside the thread too") {
    JitCache restarted(options);
    // Before: the store was looked up, and the object linked, inside start_load.
    CHECK_FALSE(restarted.start_load(big.id(), big.codec(), big.code(), Confine::yes).has_value());
    const std::vector<JitCache::FinishedLoad> finished = finish_within(restarted, 60s);
    REQUIRE(finished.size() == 1);
    REQUIRE(finished[0].result.has_value());
    CHECK(finished[0].result->from_code_cache);
    CHECK(restarted.find_ifunc(big.id()) != nullptr);
  }
  SECTION("machine code is refused from finish_loads, not thrown by start_load") {
    const Ifunc binary = Ifunc::load(TC_BIG_TABLE_BINARY);
    REQUIRE(binary.code().size() >= std::size_t{64} << 10);
    JitCache cache;
    // Before: parsed in start_load, which threw this at once.
    CHECK_FALSE(cache.start_load(binary.id(), binary.codec(), binary.code(), Confine::yes).has_value());
    const std::vector<JitCache::FinishedLoad> finished = finish_within(cache, 60s);
    REQUIRE(finished.size() == 1);
    REQUIRE(finished[0].error.has_value());
    CHECK(finished[0].error->is(errc::code_refused));
    CHECK_THAT(finished[0].error->what(), Catch::Contains("only bitcode runs confined"));
    CHECK_FALSE(finished[0].target_failed);
    // As load() refuses it at once: not a failed compile, which a Receiver
    // would count against the code and its key.
    CHECK(finished[0].before_compile);
    CHECK_FALSE(cache.loading(binary.id()));
  }
  SECTION("a load evicted while it is prepared, and started again, is answered once") {
    JitCache cache;
    CHECK_FALSE(cache.start_load(big.id(), big.codec(), big.code(), Confine::yes).has_value());
    (void)cache.evict(big.id());
    CHECK_FALSE(cache.loading(big.id()));
    CHECK_FALSE(cache.start_load(big.id(), big.codec(), big.code(), Confine::yes).has_value());
    const std::vector<JitCache::FinishedLoad> finished = finish_within(cache, 120s);
    REQUIRE(finished.size() == 1);
    REQUIRE(finished[0].result.has_value());
    CHECK(cache.find_ifunc(big.id()) != nullptr);
    std::this_thread::sleep_for(200ms);  // a stale answer, had one come, is ignored
    CHECK(cache.finish_loads().empty());
  }
}

// A small confined container goes the same way: parsing it, keying it for
// the store and writing the worker's job took the thread that loads
// 90-111 us of CPU for the counter's, every other peer waiting
// (threechains-bench-compile-end, 2026-11-30; 9.5-11 us after).
TEST_CASE("a small confined container is prepared beside the thread that loads it too",
          "[jit][compile]") {
  JitCache cache;
  SECTION("machine code is refused from finish_loads, not thrown by start_load") {
    const Ifunc binary = Ifunc::load(TC_COUNTER_BINARY);
    REQUIRE(binary.code().size() < std::size_t{64} << 10);
    // Before: parsed in start_load, which threw this at once.
    CHECK_FALSE(
        cache.start_load(binary.id(), binary.codec(), binary.code(), Confine::yes).has_value());
    CHECK(cache.loading(binary.id()));
    const std::vector<JitCache::FinishedLoad> finished = finish_within(cache, 60s);
    REQUIRE(finished.size() == 1);
    REQUIRE(finished[0].error.has_value());
    CHECK(finished[0].error->is(errc::code_refused));
    CHECK_THAT(finished[0].error->what(), Catch::Contains("only bitcode runs confined"));
    CHECK(finished[0].before_compile);  // not counted against the code
    CHECK_FALSE(finished[0].target_failed);
    CHECK_FALSE(cache.loading(binary.id()));
  }
  SECTION("bitcode compiles and links from there") {
    const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
    REQUIRE(counter.code().size() < std::size_t{64} << 10);
    CHECK_FALSE(
        cache.start_load(counter.id(), counter.codec(), counter.code(), Confine::yes).has_value());
    const std::vector<JitCache::FinishedLoad> finished = finish_within(cache, 120s);
    REQUIRE(finished.size() == 1);
    INFO((finished[0].error ? finished[0].error->what() : "linked"));
    REQUIRE(finished[0].result.has_value());
    CHECK(finished[0].result->name == "counter");
    CHECK(cache.find_ifunc(counter.id()) != nullptr);
  }
}

// The worker of a confined compile is started, watched and reaped on a
// thread of its own (tc-compiles): posix_spawn holds its caller until the
// worker has exec'd, 0.12-1.1 ms of the serving thread's wall clock per
// compile beyond its CPU time on the 2-core VM (threechains-bench-compile-end:
// start_load 316-325 us in an A/B, 1238 us in a first run, before; 84-90 us
// after), and looking at the worker and reading its object were system
// calls and copies on that thread. A compile cancelled, or a cache
// dropped, while its worker starts or runs leaves no worker behind,
// running or unreaped, whether the cache is polled or not.
namespace {

// This process's children that are compile workers (a zombie included).
int compile_workers_alive() {
  int alive = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // "pid (comm) state ppid ...": comm may hold spaces, so from its last ')'.
    const std::size_t open = line.find('(');
    const std::size_t close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    const std::string comm = line.substr(open + 1, close - open - 1);
    char state = 0;
    int parent = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &parent) != 2) continue;
    if (parent == getpid() && comm.starts_with("threechains-com")) ++alive;
  }
  return alive;
}

}  // namespace

TEST_CASE("a compile worker starts beside the thread that loads, and none outlives its compile",
          "[jit][compile]") {
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  REQUIRE(compile_workers_alive() == 0);
  SECTION("started by tc-compiles, and linked as ever") {
    JitCache cache;
    CHECK_FALSE(cache.start_load(counter.id(), counter.codec(), counter.code(), Confine::yes));
    const std::vector<JitCache::FinishedLoad> finished = finish_within(cache, 60s);
    REQUIRE(finished.size() == 1);
    REQUIRE(finished[0].result.has_value());
    // It named itself before it took its first job. Before: posix_spawn on
    // this thread, and no such thread.
    CHECK(test::has_thread("tc-compiles"));
    CHECK(cache.find_ifunc(counter.id()) != nullptr);
    CHECK(compile_workers_alive() == 0);
  }
  SECTION(
      "cancelled while its worker starts: stopped and reaped, and a new load is answered once") {
    JitCache cache;
    CHECK_FALSE(cache.start_load(counter.id(), counter.codec(), counter.code(), Confine::yes));
    (void)cache.evict(counter.id());  // most likely while tc-compiles starts its worker
    CHECK_FALSE(cache.loading(counter.id()));
    CHECK_FALSE(cache.start_load(counter.id(), counter.codec(), counter.code(), Confine::yes));
    const std::vector<JitCache::FinishedLoad> finished = finish_within(cache, 60s);
    REQUIRE(finished.size() == 1);
    REQUIRE(finished[0].result.has_value());
    std::this_thread::sleep_for(200ms);  // a stale answer, had one come, is ignored
    CHECK(cache.finish_loads().empty());
    CHECK(compile_workers_alive() == 0);
  }
  SECTION("evicted while its worker runs, with no load after and no poll: stopped and reaped") {
    JitCache cache;
    CHECK_FALSE(cache.start_load(counter.id(), counter.codec(), counter.code(), Confine::yes));
    std::this_thread::sleep_for(20ms);  // started by now, most likely; compiling for ~100 ms
    (void)cache.evict(counter.id());
    // tc-compiles kills and reaps it, polled or not. (6180c4b, which
    // started workers aside but watched them from finish_loads, left this
    // one compiling unwatched and then a zombie: with no load pending,
    // nobody looked. This failed there.)
    const auto start = std::chrono::steady_clock::now();
    while (compile_workers_alive() != 0 && std::chrono::steady_clock::now() < start + 10s)
      std::this_thread::sleep_for(5ms);
    CHECK(compile_workers_alive() == 0);
    // What tc-compiles hands back for it is taken and dropped: nothing for
    // the cancelled load, and then no compile in progress.
    const auto reaped = std::chrono::steady_clock::now();
    while (cache.compiles_in_progress() && std::chrono::steady_clock::now() < reaped + 10s) {
      CHECK(cache.finish_loads().empty());
      std::this_thread::sleep_for(1ms);
    }
    CHECK_FALSE(cache.compiles_in_progress());
  }
  SECTION("a cancelled compile's worker is killed at once, polled or not") {
    // heavy compiles for seconds: its worker outlives the wait below only
    // if the cancel does not reach tc-compiles (with give_up ignored it
    // does, and this fails). Before tc-compiles, cancel() killed the worker
    // itself, on the serving thread: this guards that the kill stays prompt.
    const Ifunc heavy = Ifunc::load(TC_HEAVY);
    JitOptions options;
    options.confinement.compile_time_limit = 60s;
    JitCache cache(options);
    CHECK_FALSE(cache.start_load(heavy.id(), heavy.codec(), heavy.code(), Confine::yes));
    const auto started = std::chrono::steady_clock::now();
    while (compile_workers_alive() == 0 && std::chrono::steady_clock::now() < started + 10s) {
      CHECK(cache.finish_loads().empty());  // a large container: prepared aside, then submitted
      std::this_thread::sleep_for(1ms);
    }
    REQUIRE(compile_workers_alive() == 1);
    (void)cache.evict(heavy.id());
    const auto cancelled = std::chrono::steady_clock::now();
    while (compile_workers_alive() != 0 && std::chrono::steady_clock::now() < cancelled + 1500ms)
      std::this_thread::sleep_for(5ms);
    CHECK(compile_workers_alive() == 0);
  }
  SECTION("a cache dropped while its worker starts stops it") {
    {
      JitCache cache;
      CHECK_FALSE(cache.start_load(counter.id(), counter.codec(), counter.code(), Confine::yes));
    }
    CHECK(compile_workers_alive() == 0);
  }
}
