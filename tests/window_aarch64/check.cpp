// threechains-window-aarch64-check: the window tier's machinery on an
// aarch64 CPU (run under qemu-aarch64 by the x86_64 test
// window.aarch64_runs_window_code, tests/window_aarch64/CMakeLists.txt).
//
// Kernels in IR are optimised for this CPU with the window's features
// (+reserve-x21, no SVE), shaped, linked by JITLink into a window, accepted
// by the aarch64 verifier, and run through run_window_code (the trampoline
// that puts the window's base in x21):
//  - saxpy, a pointer chase and a sum over negative indices compute what
//    the same IR compiled natively computes;
//  - a store to a page the window never handed out is a trap naming its
//    offset, and a store aimed outside the window (any upper half) lands
//    in it, leaving a canary outside untouched;
//  - an endless loop is stopped by the watchdog after its budget;
//  - window code that changes every callee-saved register leaves the
//    host's as they were;
//  - after all of that, an honest call computes again;
//  - mutants of the JIT's code that the verifier accepts run without
//    touching canaries outside the window (the verifier's differential test);
//  - given a counter container (argv[1]), a JitCache with the window tier
//    loads it confined, through the compile worker, into a window, and it
//    counts there (THREECHAINS_COMPILE_WORKER must name a worker that runs:
//    under qemu-user, a script that starts it under qemu, run.sh).
// Prints one line per check; exits 1 at the first that fails.
#include "confine/pass.hpp"
#include "confine/verify_aarch64.hpp"
#include "confine/window.hpp"
#include "confine/window_traps.hpp"
#include "jit/host_description.hpp"
#include "jit/host_optimiser.hpp"
#include "jit/window_memory.hpp"

#include <threechains/threechains.hpp>

#include <llvm/AsmParser/Parser.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/MapperJITLinkMemoryManager.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/TargetParser/SubtargetFeature.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace tc = threechains;
using tc::confined::Window;
using tc::confined::WindowCode;
using tc::confined::WindowFault;
using tc::confined::WindowTrap;

namespace {

constexpr const char* kKernels = R"(
define void @saxpy(ptr noalias %x, ptr noalias %y, i64 %n) {
entry:
  %empty = icmp eq i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %xp = getelementptr inbounds float, ptr %x, i64 %i
  %yp = getelementptr inbounds float, ptr %y, i64 %i
  %xv = load float, ptr %xp
  %yv = load float, ptr %yp
  %ax = fmul float 2.0, %xv
  %s = fadd float %ax, %yv
  store float %s, ptr %yp
  %next = add nuw i64 %i, 1
  %end = icmp eq i64 %next, %n
  br i1 %end, label %done, label %loop
done:
  ret void
}
define i64 @chase(ptr %next, i64 %at, i64 %steps) {
entry:
  br label %loop
loop:
  %s = phi i64 [ 0, %entry ], [ %s.next, %loop ]
  %a = phi i64 [ %at, %entry ], [ %a.next, %loop ]
  %p = getelementptr inbounds i64, ptr %next, i64 %a
  %a.next = load i64, ptr %p
  %s.next = add i64 %s, 1
  %end = icmp uge i64 %s.next, %steps
  br i1 %end, label %done, label %loop
done:
  ret i64 %a.next
}
define i64 @backward(ptr %end, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %sum = phi i64 [ 0, %entry ], [ %sum.next, %loop ]
  %minus = sub i64 0, %i
  %p = getelementptr inbounds i64, ptr %end, i64 %minus
  %v = load i64, ptr %p
  %sum.next = add i64 %sum, %v
  %i.next = add i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret i64 %sum.next
}
define void @poke(ptr %p, i64 %v) {
  store volatile i64 %v, ptr %p
  ret void
}
define void @spin(ptr %p) {
entry:
  br label %loop
loop:
  %v = load volatile i64, ptr %p
  %w = add i64 %v, 1
  store volatile i64 %w, ptr %p
  br label %loop
}
)";

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}
[[noreturn]] void fail(const std::string& why) {
  std::printf("FAILED: %s\n", why.c_str());
  std::exit(1);
}
template <class T>
T checked(llvm::Expected<T> value, const char* what) {
  if (!value) fail(std::string(what) + ": " + llvm::toString(value.takeError()));
  return std::move(*value);
}

std::unique_ptr<llvm::Module> parse(llvm::LLVMContext& context) {
  llvm::SMDiagnostic error;
  std::unique_ptr<llvm::Module> module = llvm::parseAssemblyString(kKernels, error, context);
  if (!module) fail("the kernels do not parse: " + error.getMessage().str());
  return module;
}

llvm::orc::JITTargetMachineBuilder host(bool window) {
  llvm::orc::JITTargetMachineBuilder builder = checked(tc::describe_host(2), "this host");
  if (window)
    builder.addFeatures(llvm::SubtargetFeatures(tc::kAarch64WindowFeatures).getFeatures());
  return builder;
}

// Window code that sets every callee-saved register the verifier lets it
// write (x19, x20, x22-x29) and returns: the host's must survive it.
std::vector<uint32_t> clobbering_code() {
  std::vector<uint32_t> words;
  for (const uint32_t reg : {19U, 20U, 22U, 23U, 24U, 25U, 26U, 27U, 28U, 29U})
    words.push_back(0xd2800000U | (0x5a5U << 5) | reg);  // movz xN, #0x5a5
  words.push_back(0x6f00e408U);  // movi v8.2d, #0 (a callee-saved d register)
  words.push_back(0xd65f03c0U);  // ret
  words.push_back(0xd4200020U);  // brk #1: llvm.trap's lowering (its own entry)
  return words;
}

// Reads the general registers it starts with into the window at its first
// argument's low 32 bits, x N at 8N (all but x9, the address, x21, the base,
// and x30, the return address): add x9, x21, w0, uxtw; str xN, [x9, #8N]...; ret.
std::vector<uint32_t> register_reader() {
  std::vector<uint32_t> words = {0x8b2042a9U};
  for (uint32_t n = 0; n < 30; ++n)
    if (n != 9 && n != 21) words.push_back(0xf9000000U | (n << 10) | (9U << 5) | n);
  words.push_back(0xd65f03c0U);
  return words;
}

// The verifier's differential test: the JIT's code with a few words
// changed (a bit flipped, a word copied from elsewhere in the code, a
// random word, a load's or store's base register or offset extension
// changed), verified; what it accepts runs, in a child process, from
// each entry with pointers into a canary block outside the window for
// arguments, under a budget. The block changed, its value returned, a
// fault at an address outside the window, or a child killed by a fault no
// trap took, is code the verifier should have refused.
void check_mutants(const Window& window, const tc::confined::CodeRange& range,
                   const std::vector<uint64_t>& entries) {
  constexpr int kMutants = 200;
  constexpr uint64_t kCanary = 0x5a5a5a5a5a5a5a5aULL;
  std::vector<uint32_t> original(range.bytes.size() / 4);
  std::memcpy(original.data(), range.bytes.data(), original.size() * 4);
  std::mt19937_64 random(33);
  int accepted = 0;
  int escaped = 0;
  std::string first_escape;
  for (int m = 0; m < kMutants; ++m) {
    std::vector<uint32_t> mutant = original;
    const int changes = 1 + static_cast<int>(random() % 3);
    for (int c = 0; c < changes; ++c) {
      uint32_t& word = mutant[random() % mutant.size()];
      const bool memory = (word & 0x0a000000U) == 0x08000000U;  // a load or store
      switch (random() % 5) {
        case 0:
          word ^= uint32_t{1} << (random() % 32);
          break;
        case 1:
          word = original[random() % original.size()];
          break;
        case 2:
          word = static_cast<uint32_t>(random());
          break;
        case 3:  // what a compromised compiler would do: another base register
          if (memory) word = (word & ~(0x1fU << 5)) | (static_cast<uint32_t>(random() % 31) << 5);
          break;
        default:  // or another extension of the offset register
          if (memory) word = (word & ~(0x7U << 13)) | (static_cast<uint32_t>(random() % 8) << 13);
          break;
      }
    }
    const tc::confined::CodeRange changed{
        range.address, std::span<const std::byte>(reinterpret_cast<const std::byte*>(mutant.data()),
                                                  mutant.size() * 4)};
    const tc::confined::Verdict verdict = tc::confined::verify_window_code_aarch64(
        {{&changed, 1}, entries, reinterpret_cast<uint64_t>(window.base())});
    if (!verdict.accepted) continue;
    ++accepted;
    std::fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
      const std::size_t page = tc::confined::page_size();
      const uintptr_t begin = range.address / page * page;
      const uintptr_t end = (range.address + range.bytes.size() + page - 1) / page * page;
      auto* const pages = reinterpret_cast<void*>(begin);
      if (mprotect(pages, end - begin, PROT_READ | PROT_WRITE) != 0) _exit(4);
      std::memcpy(reinterpret_cast<void*>(range.address), mutant.data(), mutant.size() * 4);
      __builtin___clear_cache(reinterpret_cast<char*>(begin), reinterpret_cast<char*>(end));
      if (mprotect(pages, end - begin, PROT_READ | PROT_EXEC) != 0) _exit(4);
      // The canary: 16 MiB outside the window, the code handed pointers
      // into its middle, so that an access at any offset a mutant forms
      // from them within 8 MiB lands in it; a read of it shows in what
      // the code returns.
      constexpr std::size_t kBlock = std::size_t{16} << 20;
      auto* const block = static_cast<uint64_t*>(
          mmap(nullptr, kBlock, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      if (block == MAP_FAILED) _exit(4);
      std::fill(block, block + kBlock / 8, kCanary);
      const auto middle = reinterpret_cast<uint64_t>(block + kBlock / 16);
      bool intact = true;
      for (const uint64_t entry : entries) {
        uint64_t result = 0;
        const std::optional<WindowTrap> trap = tc::confined::run_window_code(
            window, WindowCode{reinterpret_cast<const void*>(entry), verdict.stack_bytes}, result,
            middle, middle + 64, 8, std::chrono::milliseconds(20));
        // A fault of window code at an address outside the window and its
        // guards (aarch64 has no fault that names no address: a
        // misaligned exclusive names its own) is an access the verifier
        // let out, caught only because nothing was mapped there: a page
        // fault is WindowFault::outside, an alignment fault general.
        intact =
            intact && result != kCanary &&
            !(trap && (trap->fault == WindowFault::general || trap->fault == WindowFault::outside));
      }
      for (std::size_t i = 0; i < kBlock / 8; ++i) intact = intact && block[i] == kCanary;
      _exit(intact ? 0 : 3);
    }
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (waitpid(child, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(child, SIGKILL);
        (void)waitpid(child, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const bool killed_by_us = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if ((WIFEXITED(status) && WEXITSTATUS(status) != 0) || (WIFSIGNALED(status) && !killed_by_us)) {
      if (escaped++ == 0)
        first_escape = "mutant " + std::to_string(m) + ": status " + std::to_string(status);
    }
  }
  check(escaped == 0, std::to_string(kMutants) +
                          " mutants of the JIT's code: " + std::to_string(accepted) +
                          " accepted by the verifier, " + std::to_string(escaped) +
                          " of them escaped or crashed the host " + first_escape);
}

// The window tier as a Receiver uses it: a JitCache with
// ConfinementOptions::window_tier loads the counter (a fat bitcode
// container) confined, the compile worker compiling it for this CPU; the
// code runs in a window, counts in memory exposed to windows, and a
// target_args outside it is a trap that leaves that memory alone.
void check_jit_cache(const char* container) {
  tc::JitOptions options;
  options.confinement.window_tier = true;
  options.confinement.time_budget = std::chrono::milliseconds(200);
  tc::JitCache cache(options);
  const tc::Ifunc counter = tc::Ifunc::load(container);
  try {
    (void)cache.load(counter.id(), counter.codec(), counter.code(), tc::Confine::yes);
  } catch (const tc::Error& e) {
    check(false, std::string("a JitCache loads the counter confined: ") + e.what());
    return;
  }
  const tc::CachedIfunc* const loaded = cache.find_ifunc(counter.id());
  check(loaded != nullptr && cache.in_window(*loaded),
        "a JitCache with the window tier runs the confined counter in a window " +
            cache.window_refusals().last);
  if (loaded == nullptr || !cache.in_window(*loaded)) return;
  auto* const count =
      reinterpret_cast<uint64_t*>(cache.allocate_exposed("counter", 8, true).data());
  alignas(16) uint64_t increment = 5;
  bool ran = true;
  for (int k = 0; k < 3; ++k)
    ran = ran && !cache.invoke(*loaded, &increment, sizeof(increment), count).has_value();
  check(ran && *count == 15, "it counts in memory exposed to windows (" + std::to_string(*count) +
                                 " for 15)");
  uint64_t outside = 1234;
  const std::optional<tc::ConfinedTrap> trap =
      cache.invoke(*loaded, &increment, sizeof(increment), &outside);
  check(trap && trap->reason == tc::TrapReason::out_of_bounds && outside == 1234,
        "target_args outside the exposed memory is a trap, and that memory is untouched");
  check(!cache.invoke(*loaded, &increment, sizeof(increment), count).has_value() && *count == 20,
        "and it counts on after the trap");
}

}  // namespace

int main(int argc, char** argv) {
#if !defined(__aarch64__)
  (void)argc;
  (void)argv;
  std::puts("SKIP: this program checks the window tier on aarch64");
  return 0;
#else
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto window = std::make_unique<Window>();
  tc::jit::WindowMemoryMapper* mapper = nullptr;  // owned by the JIT's memory manager
  auto shaped_jit =
      checked(llvm::orc::LLJITBuilder()
                  .setJITTargetMachineBuilder(host(true))
                  .setObjectLinkingLayerCreator([&](llvm::orc::ExecutionSession& session) {
                    auto linked = std::make_unique<tc::jit::WindowMemoryMapper>(*window);
                    mapper = linked.get();
                    return std::make_unique<llvm::orc::ObjectLinkingLayer>(
                        session, std::make_unique<llvm::orc::MapperJITLinkMemoryManager>(
                                     std::size_t{1} << 20, std::move(linked)));
                  })
                  .create(),
              "LLJIT into the window");
  auto native_jit =
      checked(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(host(false)).create(), "LLJIT");
  {
    auto context = std::make_unique<llvm::LLVMContext>();
    std::unique_ptr<llvm::Module> module = parse(*context);
    tc::HostOptimiser(checked(host(true).createTargetMachine(), "target"), 2).run(*module);
    tc::shape_for_window(*module, "kernels");
    if (auto error = shaped_jit->addIRModule(
            llvm::orc::ThreadSafeModule(std::move(module), std::move(context))))
      fail(llvm::toString(std::move(error)));
  }
  {
    auto context = std::make_unique<llvm::LLVMContext>();
    std::unique_ptr<llvm::Module> module = parse(*context);
    tc::HostOptimiser(checked(host(false).createTargetMachine(), "target"), 2).run(*module);
    if (auto error = native_jit->addIRModule(
            llvm::orc::ThreadSafeModule(std::move(module), std::move(context))))
      fail(llvm::toString(std::move(error)));
  }
  std::vector<uint64_t> entries;
  for (const char* name : {"saxpy", "chase", "poke", "spin", "backward"})
    entries.push_back(checked(shaped_jit->lookup(name), name).getValue());

  // The clobbering code, hand-written, in a page of the window of its own.
  std::vector<uint32_t> words = clobbering_code();
  const std::size_t reader_at = words.size();
  for (const uint32_t word : register_reader()) words.push_back(word);
  std::span<std::byte> page = window->allocate(words.size() * 4, true);
  std::memcpy(page.data(), words.data(), words.size() * 4);
  __builtin___clear_cache(reinterpret_cast<char*>(page.data()),
                          reinterpret_cast<char*>(page.data() + words.size() * 4));
  if (mprotect(page.data(), tc::confined::page_size(), PROT_READ | PROT_EXEC) != 0)
    fail("mprotect");
  const auto clobber = reinterpret_cast<uint64_t>(page.data());

  std::vector<tc::confined::CodeRange> code = mapper->executable_code();
  code.push_back({clobber, std::span<const std::byte>(page.data(), words.size() * 4)});
  const uint64_t breakpoint = clobber + (reader_at - 1) * 4;
  const uint64_t reader = clobber + reader_at * 4;
  std::vector<uint64_t> all = entries;
  all.push_back(clobber);
  all.push_back(breakpoint);
  all.push_back(reader);
  const tc::confined::Verdict verdict = tc::confined::verify_window_code_aarch64(
      {code, all, reinterpret_cast<uint64_t>(window->base())});
  check(verdict.accepted, "the aarch64 verifier accepts the shaped kernels " + verdict.refusal);
  if (!verdict.accepted) return 1;
  const auto code_at = [&](uint64_t entry) {
    return WindowCode{reinterpret_cast<const void*>(entry), verdict.stack_bytes};
  };

  // saxpy and the chase, against the native build of the same IR.
  constexpr std::size_t kN = 1000;
  auto* x = reinterpret_cast<float*>(window->allocate(kN * 4, true).data());
  auto* y = reinterpret_cast<float*>(window->allocate(kN * 4, true).data());
  std::vector<float> expected(kN);
  for (std::size_t i = 0; i < kN; ++i) {
    x[i] = static_cast<float>(i) * 0.5F;
    y[i] = expected[i] = 1.0F + static_cast<float>(i);
  }
  using Saxpy = void (*)(const float*, float*, uint64_t);
  reinterpret_cast<Saxpy>(checked(native_jit->lookup("saxpy"), "saxpy").getValue())(
      x, expected.data(), kN);
  uint64_t result = 0;
  auto trap = tc::confined::run_window_code(*window, code_at(entries[0]), result,
                                            reinterpret_cast<uint64_t>(x),
                                            reinterpret_cast<uint64_t>(y), kN);
  check(!trap && std::equal(y, y + kN, expected.begin()),
        "saxpy in the window computes what it computes natively");

  constexpr std::size_t kEntries = 4096;
  auto* next = reinterpret_cast<uint64_t*>(window->allocate(kEntries * 8, true).data());
  for (std::size_t i = 0; i < kEntries; ++i) next[i] = (i * 2053 + 7) % kEntries;
  using Chase = uint64_t (*)(const uint64_t*, uint64_t, uint64_t);
  const uint64_t native_chase = reinterpret_cast<Chase>(
      checked(native_jit->lookup("chase"), "chase").getValue())(next, 1, 100000);
  trap = tc::confined::run_window_code(*window, code_at(entries[1]), result,
                                       reinterpret_cast<uint64_t>(next), 1, 100000);
  check(!trap && result == native_chase, "the chase in the window ends where it ends natively");

  // Negative indices (p[-i]) take the indexed shape's sign extension.
  using Backward = uint64_t (*)(const uint64_t*, uint64_t);
  const uint64_t native_backward = reinterpret_cast<Backward>(
      checked(native_jit->lookup("backward"), "backward").getValue())(next + kEntries - 1, 1000);
  trap = tc::confined::run_window_code(*window, code_at(entries[4]), result,
                                       reinterpret_cast<uint64_t>(next + kEntries - 1), 1000);
  check(!trap && result == native_backward,
        "negative indices in the window reach what they reach natively");

  // A store to a page the window never handed out: a trap at its offset.
  constexpr uint64_t kUnmapped = uint64_t{3} << 30;  // 3 GiB: the shared half, nothing mapped
  trap = tc::confined::run_window_code(*window, code_at(entries[2]), result,
                                       reinterpret_cast<uint64_t>(window->base()) + kUnmapped, 1);
  check(
      trap && trap->fault == WindowFault::access && trap->offset == static_cast<int64_t>(kUnmapped),
      "a store to an unmapped page of the window is a trap at its offset");

  // A store aimed at a canary outside the window lands inside it.
  auto canary = std::make_unique<uint64_t>(0xc0ffee);
  const auto canary_address = reinterpret_cast<uint64_t>(canary.get());
  trap = tc::confined::run_window_code(*window, code_at(entries[2]), result, canary_address, 666);
  check(*canary == 0xc0ffee,
        "a store aimed outside the window leaves the canary outside alone (" +
            std::string(trap ? "it trapped at a window offset" : "it landed in the window") + ")");
  check(!trap || trap->offset == static_cast<int64_t>(canary_address & 0xffffffffU),
        "and what it reached is the window at the pointer's low 32 bits");

  // An endless loop: the watchdog stops it.
  auto* counter = reinterpret_cast<uint64_t*>(window->allocate(8, true).data());
  const auto start = std::chrono::steady_clock::now();
  trap = tc::confined::run_window_code(*window, code_at(entries[3]), result,
                                       reinterpret_cast<uint64_t>(counter), 0, 0,
                                       std::chrono::milliseconds(50));
  const auto took = std::chrono::steady_clock::now() - start;
  check(trap && trap->fault == WindowFault::time && *counter > 0,
        "an endless loop is stopped by the watchdog after its budget (" +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) +
            " ms for 50)");

  // Callee-saved registers: the host's survive code that sets them all.
  uint64_t kept19 = 0;
  uint64_t kept28 = 0;
  {
    register uint64_t x19 asm("x19") = 0x1919;
    register uint64_t x28 asm("x28") = 0x2828;
    asm volatile("" : "+r"(x19), "+r"(x28));
    trap = tc::confined::run_window_code(*window, code_at(clobber), result);
    asm volatile("" : "+r"(x19), "+r"(x28));
    kept19 = x19;
    kept28 = x28;
  }
  check(!trap && kept19 == 0x1919 && kept28 == 0x2828,
        "code that sets every callee-saved register leaves the host's as they were");

  // brk (what llvm.trap, which the shape puts before every unreachable,
  // becomes) raises SIGTRAP: a trap, and the thread goes on (helper-19:
  // it ended the process).
  trap = tc::confined::run_window_code(*window, code_at(breakpoint), result);
  check(trap && trap->fault == WindowFault::illegal, "brk is a trap, not the host's end");

  // Runs of calls with one way in (run_window_calls, as a Receiver runs a
  // ring's frames): each call its own arguments, a trap stops the run at
  // its call, and none after it runs.
  {
    auto* cells = reinterpret_cast<uint64_t*>(window->allocate(64, true).data());
    std::vector<tc::confined::WindowCall> calls = {
        {reinterpret_cast<uint64_t>(cells), 11, 0, 0},
        {reinterpret_cast<uint64_t>(cells + 1), 12, 0, 0},
        {reinterpret_cast<uint64_t>(window->base()) + kUnmapped, 13, 0, 0},
        {reinterpret_cast<uint64_t>(cells + 3), 14, 0, 0}};
    std::size_t returned = 0;
    trap = tc::confined::run_window_calls(*window, code_at(entries[2]), calls, returned);
    check(trap && trap->fault == WindowFault::access && returned == 2 && cells[0] == 11 &&
              cells[1] == 12 && cells[3] == 0,
          "a run of calls makes each, stops at the one that traps, and makes none after it");
    std::vector<tc::confined::WindowCall> chases(5);
    for (uint64_t k = 0; k < chases.size(); ++k)
      chases[k] = {reinterpret_cast<uint64_t>(next), k * 100, 1000 + k, 0};
    trap = tc::confined::run_window_calls(*window, code_at(entries[1]), chases, returned);
    bool same = !trap && returned == chases.size();
    for (uint64_t k = 0; k < chases.size(); ++k)
      same = same &&
             chases[k].result ==
                 reinterpret_cast<Chase>(checked(native_jit->lookup("chase"), "chase").getValue())(
                     next, k * 100, 1000 + k);
    check(same, "each call of a run returns what it returns natively");
    // Under a budget (the watch's address passes through the trampoline's
    // registers): every call finds its arguments, its entry (x16, the
    // branch's register) and nothing else.
    auto* seen = reinterpret_cast<uint64_t*>(window->allocate(3 * 256, true).data());
    std::memset(seen, 0x77, 3 * 256);
    std::vector<tc::confined::WindowCall> reads(3);
    for (uint64_t k = 0; k < reads.size(); ++k)
      reads[k] = {reinterpret_cast<uint64_t>(seen + 32 * k), 100 + k, 200 + k, 0};
    trap = tc::confined::run_window_calls(*window, code_at(reader), reads, returned,
                                          std::chrono::seconds(10));
    bool clean = !trap && returned == reads.size();
    for (uint64_t k = 0; k < reads.size(); ++k) {
      for (uint32_t n = 0; n < 30; ++n) {
        if (n == 9 || n == 21) continue;
        const uint64_t expected = n == 0    ? reads[k].a0
                                  : n == 1  ? reads[k].a1
                                  : n == 2  ? reads[k].a2
                                  : n == 16 ? reader
                                            : 0;
        if (seen[32 * k + n] != expected) {
          std::printf("  call %lu: x%u = %#lx\n", static_cast<unsigned long>(k), n,
                      static_cast<unsigned long>(seen[32 * k + n]));
          clean = false;
        }
      }
    }
    check(clean, "every call of a run finds only its arguments and its entry in the registers");
  }

  // And an honest call again, after the traps.
  for (std::size_t i = 0; i < kN; ++i) y[i] = expected[i] = 3.0F;
  reinterpret_cast<Saxpy>(checked(native_jit->lookup("saxpy"), "saxpy").getValue())(
      x, expected.data(), kN);
  trap = tc::confined::run_window_code(*window, code_at(entries[0]), result,
                                       reinterpret_cast<uint64_t>(x), reinterpret_cast<uint64_t>(y),
                                       kN);
  check(!trap && std::equal(y, y + kN, expected.begin()), "after the traps, saxpy computes again");
  check_mutants(*window, code.front(), entries);
  if (argc > 1) check_jit_cache(argv[1]);
  std::printf("%s\n", failures == 0 ? "window tier on aarch64: all checks passed"
                                    : "window tier on aarch64: checks failed");
  return failures == 0 ? 0 : 1;
#endif
}
