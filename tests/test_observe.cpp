// Debuggers and profilers see JIT'd ifuncs (issue 23, item 1): a target run
// as an operator would (threechains-observed: a Receiver with a source child,
// JIT options from the environment) under perf and gdb themselves.
#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

struct CommandResult {
  int status = -1;
  std::string output;  // stdout and stderr together
};

// Runs `command` through the shell, as an operator would type it.
CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  std::size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, got);
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

bool have_program(const std::string& name) {
  return run_command("command -v " + name + " >/dev/null").status == 0;
}

// Every command is bounded: a hang fails the test, not ctest's timeout.
const std::string kBounded = "timeout 120 ";

std::string observed(const std::string& container, int calls, int steps) {
  return std::string(TC_OBSERVED) + " --container " + container + " --calls " +
         std::to_string(calls) + " --steps " + std::to_string(steps);
}

// The jitdump files under `directory` (ORC writes $JITDUMPDIR/.debug/jit/*/jit-PID.dump).
std::vector<std::filesystem::path> jitdumps_under(const std::filesystem::path& directory) {
  std::vector<std::filesystem::path> found;
  if (!std::filesystem::exists(directory)) return found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("jit-") && name.ends_with(".dump")) found.push_back(entry.path());
  }
  return found;
}

// What a jitdump file holds, read by its specification (perf's
// tools/perf/Documentation/jitdump-specification.txt), not by LLVM's code.
struct Jitdump {
  bool header_ok = false;
  std::vector<std::string> loaded;  // JIT_CODE_LOAD names with their code present
  std::vector<uint64_t> indexes;    // their code indexes (perf inject names files by them)
  int closes = 0;                   // JIT_CODE_CLOSE records
  bool closed = false;              // the last record is JIT_CODE_CLOSE
};

template <class T>
T read_at(const std::string& bytes, std::size_t offset) {
  T value{};
  if (offset + sizeof(T) <= bytes.size()) std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

Jitdump read_jitdump(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Jitdump dump;
  constexpr uint32_t kMagic = 0x4A695444;  // "JiTD", written in host order
  if (bytes.size() < 40 || read_at<uint32_t>(bytes, 0) != kMagic) return dump;
  dump.header_ok = read_at<uint32_t>(bytes, 4) == 1;
  std::size_t offset = read_at<uint32_t>(bytes, 8);  // the header's own size
  while (offset + 16 <= bytes.size()) {
    const auto id = read_at<uint32_t>(bytes, offset);
    const auto size = read_at<uint32_t>(bytes, offset + 4);
    if (size < 16 || offset + size > bytes.size()) break;
    if (id ==
        0) {  // JIT_CODE_LOAD: header (16), pid, tid, vma, code_addr, code_size, index, name, code
      const auto code_size = read_at<uint64_t>(bytes, offset + 40);
      const std::size_t name_at = offset + 56;
      const std::size_t name_end = bytes.find('\0', name_at);
      if (name_end != std::string::npos && name_end + 1 + code_size == offset + size &&
          code_size > 0) {
        dump.loaded.push_back(bytes.substr(name_at, name_end - name_at));
        dump.indexes.push_back(read_at<uint64_t>(bytes, offset + 48));
      }
    }
    if (id == 3) ++dump.closes;  // JIT_CODE_CLOSE
    dump.closed = id == 3;
    offset += size;
  }
  return dump;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

TEST_CASE("observe: THREECHAINS_JIT_PERF writes a jitdump naming the ifunc's functions",
          "[observe]") {
  const std::string codec = GENERATE(std::string("binary"), std::string("bitcode"));
  const std::string container = codec == "binary" ? TC_SPIN_BINARY : TC_SPIN_BITCODE;
  threechains::test::TempDir directory("tc-jitdump");
  const std::string env = "JITDUMPDIR=" + directory.path().string() + " ";

  // Off by default: no file at all.
  const CommandResult quiet = run_command(env + kBounded + observed(container, 3, 100));
  INFO(quiet.output);
  REQUIRE(quiet.status == 0);
  REQUIRE(jitdumps_under(directory.path()).empty());

  const CommandResult traced =
      run_command(env + "THREECHAINS_JIT_PERF=1 " + kBounded + observed(container, 3, 100));
  INFO(traced.output);
  REQUIRE(traced.status == 0);
  const auto dumps = jitdumps_under(directory.path());
  REQUIRE(dumps.size() == 1);  // one per process (the source JITs nothing)
  const Jitdump dump = read_jitdump(dumps.front());
  CHECK(dump.header_ok);
  INFO(codec << " code loads: " << dump.loaded.size());
  CHECK(contains(dump.loaded, "spin_main"));
  CHECK(contains(dump.loaded, "spin_steps"));  // a static function: named too
  CHECK(dump.closed);                          // the last cache closed the file when it went
}

TEST_CASE("observe: caches of one process share its jitdump without repeating code indexes",
          "[observe]") {
  // Two JitCaches at once, asked by JitOptions::perf_support (not the
  // environment), each loading the same ifunc: perf inject names a function's
  // file by its code index, so a repeated index would overwrite one with another.
  threechains::test::TempDir directory("tc-jitdump");
  const CommandResult ran =
      run_command("JITDUMPDIR=" + directory.path().string() + " " + kBounded + TC_OBSERVED +
                  " --container " + TC_SPIN_BINARY + " --caches 2 --steps 100");
  INFO(ran.output);
  REQUIRE(ran.status == 0);
  const auto dumps = jitdumps_under(directory.path());
  REQUIRE(dumps.size() == 1);
  const Jitdump dump = read_jitdump(dumps.front());
  CHECK(std::count(dump.loaded.begin(), dump.loaded.end(), "spin_main") == 2);
  std::vector<uint64_t> indexes = dump.indexes;
  std::sort(indexes.begin(), indexes.end());
  CHECK(std::adjacent_find(indexes.begin(), indexes.end()) == indexes.end());
  CHECK(dump.closes == 1);  // by the last cache, not the first
  CHECK(dump.closed);
}

TEST_CASE("observe: gdb stops in an ifunc by name when THREECHAINS_JIT_DEBUG is set", "[observe]") {
  if (!have_program("gdb")) {
    WARN("SKIP: gdb not installed (Debian package gdb; scripts/install-deps.sh installs it)");
    return;
  }
  // Can gdb run a program here at all (ptrace may be refused: a container's seccomp)?
  const CommandResult probe = run_command(kBounded + "gdb -batch -nx -ex run --args true");
  if (probe.output.find("exited normally") == std::string::npos) {
    WARN("SKIP: gdb cannot run a program here (ptrace refused?): " << probe.output);
    return;
  }
  const std::string codec = GENERATE(std::string("binary"), std::string("bitcode"));
  const std::string container = codec == "binary" ? TC_SPIN_BINARY : TC_SPIN_BITCODE;
  // Stop at the first call, show where, then let the target finish. A
  // sanitizer's leak check cannot run under ptrace: off, so the target exits
  // as it would.
  const std::string gdb =
      "ASAN_OPTIONS=detect_leaks=0 " + kBounded +
      "gdb -batch -nx -ex 'set breakpoint pending on' -ex 'break spin_steps' -ex run "
      "-ex 'bt 2' -ex delete -ex continue --args ";
  const CommandResult stopped =
      run_command("THREECHAINS_JIT_DEBUG=1 " + gdb + observed(container, 3, 10));
  INFO(stopped.output);
  CHECK(stopped.output.find("Breakpoint 1, ") != std::string::npos);
  CHECK(stopped.output.find("spin_main") != std::string::npos);  // the caller, in bt
  CHECK(stopped.output.find("observed: 3 of 3 calls ran") != std::string::npos);

  // The control: without registration gdb never finds the function.
  const CommandResult missed = run_command(gdb + observed(container, 3, 10));
  INFO(missed.output);
  CHECK(missed.output.find("Breakpoint 1, ") == std::string::npos);
  CHECK(missed.output.find("observed: 3 of 3 calls ran") != std::string::npos);
}

TEST_CASE("observe: perf report names the ifunc's functions", "[observe]") {
  if (!have_program("perf")) {
    WARN(
        "SKIP: perf not installed (Debian package linux-perf; scripts/install-deps.sh installs "
        "it)");
    return;
  }
  threechains::test::TempDir directory("tc-perf");
  const std::string data = (directory.path() / "perf.data").string();
  const CommandResult probe =
      run_command(kBounded + "perf record -e cpu-clock -o " + data + " -- true");
  if (probe.status != 0) {
    WARN("SKIP: perf cannot record here (perf_event_open refused?): " << probe.output);
    return;
  }
  // -k 1: the jitdump's CLOCK_MONOTONIC timestamps, so perf inject can match them.
  const CommandResult recorded = run_command(
      "JITDUMPDIR=" + directory.path().string() + " THREECHAINS_JIT_PERF=1 " + kBounded +
      "perf record -k 1 -e cpu-clock -o " + data + " -- " + observed(TC_SPIN_BITCODE, 40, 2000000));
  INFO(recorded.output);
  REQUIRE(recorded.status == 0);
  const std::string injected = (directory.path() / "perf.jit.data").string();
  const CommandResult inject =
      run_command(kBounded + "perf inject --jit -i " + data + " -o " + injected);
  INFO(inject.output);
  REQUIRE(inject.status == 0);
  const CommandResult report = run_command(kBounded + "perf report -i " + injected +
                                           " --stdio --sort sym 2>/dev/null | head -20");
  INFO(report.output);
  CHECK(report.output.find("spin_steps") != std::string::npos);
}
