// threechains-bench-window: what the window shape of issue 33 costs the code
// it confines, on this CPU, against the same code unconfined.
//
// The kernels (benchmarks/kernels/saxpy.c and chase.c) are compiled by clang
// to bitcode, optimised here by the host optimiser the target uses
// (HostOptimiser, level 2, this CPU), then cloned: one copy is compiled as it
// is, the other after shape_for_window (confine/pass.hpp) rewrote every
// access to `%gs:(low 32 bits of the pointer)`. Both are compiled in this
// process by LLJIT for this host and run, interleaved round by round, on the
// same arrays in one confinement window (confine/window.hpp) with %gs set to
// its base. What it prints, per figure, is the shaped time over the native
// time: the price of the shape itself. It is not yet what a JitCache runs
// (no fuel, no traps, no data stack in the window: pass.hpp says what is
// missing); threechains-bench-confine measures today's confined tier.
//
// Also a call of the smallest body (benchmarks/kernels/bump.c): native,
// shaped, through a bare six-register save (the floor of any call that
// keeps the host's registers), through the trampoline alone (its clears
// added), inside run_in_window, and through run_window_code with and
// without a budget (what an invocation adds): the fixed cost of an
// invocation, piece by piece, against issue 33's +3 ns; and
// the cost of writing the %gs base (what switching between two keys'
// windows would cost per invocation) and of GsBase::use when it need not.
//
// The shaped copies are linked into the window and run only once the
// window verifier (confine/verify_x86.hpp) has accepted them; what that
// costs is printed beside what compiling and linking them cost.
#include "confine/pass.hpp"
#include "confine/verify_x86.hpp"
#include "confine/window.hpp"
#include "confine/window_traps.hpp"
#include "jit/host_description.hpp"
#include "jit/host_optimiser.hpp"
#include "jit/window_memory.hpp"

#include "bench_util.hpp"

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/MapperJITLinkMemoryManager.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace tc = threechains;

namespace {

using Saxpy = void (*)(float, const float*, float*, std::size_t);
using Chase = uint64_t (*)(const uint64_t*, uint64_t, uint64_t);
using Bump = void (*)(uint64_t*, uint64_t);

// The floor of any call that keeps the host's callee-saved registers from
// the code it calls, as the trampoline does (its six pushes and pops and
// the pad), and nothing else: no clears, no stack zeroing. What the
// trampoline costs beyond this is its clears (window_traps.cpp).
extern "C" uint64_t bench_saves_only(uint64_t entry, uint64_t a0, uint64_t a1);
asm(R"(
  .text
  .p2align 4
  .type bench_saves_only, @function
bench_saves_only:
  pushq %rbx
  pushq %rbp
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  movq %rdi, %r10
  movq %rsi, %rdi
  movq %rdx, %rsi
  callq *%r10
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbp
  popq %rbx
  retq
  .size bench_saves_only, .-bench_saves_only
)");

template <class T>
T checked(llvm::Expected<T> value, const std::string& what) {
  if (!value) throw std::runtime_error(what + ": " + llvm::toString(value.takeError()));
  return std::move(*value);
}

void check(llvm::Error error, const std::string& what) {
  if (error) throw std::runtime_error(what + ": " + llvm::toString(std::move(error)));
}

// The kernel at `path`, optimised for this host, twice: as it is, to `jit`,
// and window-shaped with "_window" after every function's name, to
// `window_jit`.
void add_kernel(llvm::orc::LLJIT& jit, llvm::orc::LLJIT& window_jit, const std::string& path,
                const std::string& name) {
  auto context = std::make_unique<llvm::LLVMContext>();
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) throw std::runtime_error("cannot read " + path);
  std::unique_ptr<llvm::Module> native =
      checked(llvm::parseBitcodeFile((*buffer)->getMemBufferRef(), *context), path);
  tc::HostOptimiser optimiser(
      checked(checked(tc::describe_host(2), "describe the host").createTargetMachine(),
              "a target machine"),
      2);
  (void)optimiser.run(*native);
  std::unique_ptr<llvm::Module> shaped = llvm::CloneModule(*native);
  for (llvm::Function& f : *shaped)
    if (!f.isDeclaration()) f.setName(f.getName() + "_window");
  tc::shape_for_window(*shaped, name);
  llvm::orc::ThreadSafeContext shared(std::move(context));
  check(jit.addIRModule(llvm::orc::ThreadSafeModule(std::move(native), shared)), path);
  check(window_jit.addIRModule(llvm::orc::ThreadSafeModule(std::move(shaped), shared)), path);
}

template <class F>
double ns_per(F&& run, double units) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
             .count() /
         units;
}

// A single cycle through all `n` entries (Sattolo's shuffle), in `table`.
void make_cycle(std::span<uint64_t> table, std::mt19937_64& random) {
  std::vector<uint64_t> order(table.size());
  std::iota(order.begin(), order.end(), 0);
  for (std::size_t i = order.size() - 1; i > 0; --i)
    std::swap(order[i], order[std::uniform_int_distribution<std::size_t>(0, i - 1)(random)]);
  for (std::size_t i = 0; i < order.size(); ++i) table[order[i]] = order[(i + 1) % order.size()];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the window shape (issue 33) against native code, on this CPU"};
  int rounds = 11;
  std::size_t n = 4096;
  std::size_t small_entries = std::size_t{1} << 12;  // 32 KiB: the L1/L2
  std::size_t large_entries = std::size_t{1} << 22;  // 32 MiB: memory
  uint64_t steps = uint64_t{1} << 20;
  std::string json;
  app.add_option("-r,--rounds", rounds, "rounds (both variants interleaved in each)");
  app.add_option("-n,--elements", n, "floats per saxpy array");
  app.add_option("--small", small_entries, "entries of the small chase table");
  app.add_option("--large", large_entries, "entries of the large chase table");
  app.add_option("--steps", steps, "loads per chase");
  app.add_option("--json", json, "append one JSON line per figure to this file");
  CLI11_PARSE(app, argc, argv);
#if !defined(__x86_64__)
  std::puts("SKIP: the window shape is built for x86-64's %gs so far");
  return 0;
#else
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto jit = checked(llvm::orc::LLJITBuilder()
                         .setJITTargetMachineBuilder(checked(tc::describe_host(2), "the host"))
                         .create(),
                     "LLJIT");
  tc::confined::Window window;
  tc::jit::WindowMemoryMapper* mapper = nullptr;  // owned by window_jit's memory manager
  auto window_jit =
      checked(llvm::orc::LLJITBuilder()
                  .setJITTargetMachineBuilder(checked(tc::describe_host(2), "the host"))
                  .setObjectLinkingLayerCreator([&](llvm::orc::ExecutionSession& session) {
                    auto linked_in_window = std::make_unique<tc::jit::WindowMemoryMapper>(window);
                    mapper = linked_in_window.get();
                    return std::make_unique<llvm::orc::ObjectLinkingLayer>(
                        session, std::make_unique<llvm::orc::MapperJITLinkMemoryManager>(
                                     std::size_t{1} << 20, std::move(linked_in_window)));
                  })
                  .create(),
              "LLJIT linking into the window");
  add_kernel(*jit, *window_jit, THREECHAINS_BENCH_SAXPY_BC, "saxpy");
  add_kernel(*jit, *window_jit, THREECHAINS_BENCH_CHASE_BC, "chase");
  add_kernel(*jit, *window_jit, THREECHAINS_BENCH_BUMP_BC, "bump");
  const auto find = [&](const char* name) { return checked(jit->lookup(name), name).getValue(); };
  const auto find_window = [&](const char* name) {
    return checked(window_jit->lookup(name), name).getValue();
  };
  const auto saxpy = reinterpret_cast<Saxpy>(find("saxpy"));
  const auto chase = reinterpret_cast<Chase>(find("chase"));
  const auto bump = reinterpret_cast<Bump>(find("bump"));
  std::vector<uint64_t> entries;
  const double compile_ms =
      ns_per(
          [&] {
            for (const char* name : {"saxpy_window", "chase_window", "bump_window"})
              entries.push_back(find_window(name));
          },
          1) /
      1e6;
  const auto saxpy_window = reinterpret_cast<Saxpy>(entries[0]);
  const auto chase_window = reinterpret_cast<Chase>(entries[1]);
  const auto bump_window = reinterpret_cast<Bump>(entries[2]);

  // Nothing shaped runs before the verifier has read all of it, where it runs.
  const std::vector<tc::confined::CodeRange> code = mapper->executable_code();
  const tc::confined::VerifierInput to_verify{code, entries,
                                              reinterpret_cast<uint64_t>(window.base())};
  tc::confined::Verdict verdict;
  std::vector<double> verify_us;
  for (int r = 0; r < rounds; ++r)
    verify_us.push_back(
        ns_per([&] { verdict = tc::confined::verify_window_code_x86_64(to_verify); }, 1) / 1e3);
  if (!verdict) {
    std::fprintf(stderr, "the verifier refused the shaped kernels: %s\n", verdict.refusal.c_str());
    return 1;
  }
  std::size_t code_bytes = 0;
  for (const tc::confined::CodeRange& range : code) code_bytes += range.bytes.size();
  auto as_floats = [](std::span<std::byte> bytes) {
    return std::span(reinterpret_cast<float*>(bytes.data()), bytes.size() / sizeof(float));
  };
  auto as_words = [](std::span<std::byte> bytes) {
    return std::span(reinterpret_cast<uint64_t*>(bytes.data()), bytes.size() / 8);
  };
  const std::span<float> x = as_floats(window.allocate(n * sizeof(float), true));
  const std::span<float> y_native = as_floats(window.allocate(n * sizeof(float), true));
  const std::span<float> y_window = as_floats(window.allocate(n * sizeof(float), true));
  const std::span<uint64_t> small = as_words(window.allocate(small_entries * 8, true));
  const std::span<uint64_t> large = as_words(window.allocate(large_entries * 8, true));
  const std::span<uint64_t> counters = as_words(window.allocate(10 * 8, true));
  std::fill(x.begin(), x.end(), 1.5F);
  std::mt19937_64 random(33);
  make_cycle(small, random);
  make_cycle(large, random);
  tc::confined::GsBase::use(window.base());

  // A call of the smallest body: directly, shaped, and shaped inside
  // run_in_window (what turns its faults into traps: a setjmp and two
  // thread-local writes) through call_window_code (which keeps the host's
  // callee-saved registers), each through a pointer, as a dispatcher calls.
  constexpr int kCalls = 1 << 22;
  struct BumpCall {
    Bump function;
    uint64_t* counter;
    uint64_t stack_bytes;
  };
  BumpCall trapped{bump_window, &counters[2], verdict.stack_bytes};
  const auto call_trapped = [](void* c) {
    auto* call = static_cast<BumpCall*>(c);
    (void)tc::confined::call_window_code(
        {reinterpret_cast<const void*>(call->function), call->stack_bytes},
        reinterpret_cast<uint64_t>(call->counter), 1);
  };
  std::vector<double> call_native_ns, call_window_ns, call_trapped_ns, call_direct_ns,
      call_watched_ns, call_saves_ns, call_trampoline_ns;
  constexpr std::array<std::size_t, 3> kRunLengths = {4, 8, 32};
  std::array<std::vector<double>, kRunLengths.size()> call_runs_ns;
  // The trampoline alone: call_window_code kCalls times inside one
  // run_in_window, so that nothing per invocation but the trampoline (and
  // its stack check) is in the figure.
  const auto trampoline_calls = [](void* c) {
    auto* call = static_cast<BumpCall*>(c);
    const tc::confined::WindowCode code{reinterpret_cast<const void*>(call->function),
                                        call->stack_bytes};
    for (int k = 0; k < kCalls; ++k)
      (void)tc::confined::call_window_code(code, reinterpret_cast<uint64_t>(call->counter), 1);
  };
  BumpCall trampolined{bump_window, &counters[5], verdict.stack_bytes};
  const tc::confined::WindowCode bump_code{reinterpret_cast<const void*>(bump_window),
                                           verdict.stack_bytes};
  const auto calls_of = [&](Bump function, uint64_t* counter) {
    return ns_per(
        [&] {
          Bump volatile through = function;  // a call through a pointer, not inlined
          for (int c = 0; c < kCalls; ++c) through(counter, 1);
        },
        kCalls);
  };

  const int saxpy_calls = std::max<int>(1, static_cast<int>((uint64_t{1} << 24) / n));
  std::vector<double> saxpy_native_ns, saxpy_window_ns, small_native_ns, small_window_ns,
      large_native_ns, large_window_ns;
  uint64_t ends[4] = {0, 0, 0, 0};
  for (int r = 0; r < rounds; ++r) {
    const double elements = static_cast<double>(saxpy_calls) * static_cast<double>(n);
    saxpy_native_ns.push_back(ns_per(
        [&] {
          for (int c = 0; c < saxpy_calls; ++c) saxpy(0.5F, x.data(), y_native.data(), n);
        },
        elements));
    saxpy_window_ns.push_back(ns_per(
        [&] {
          for (int c = 0; c < saxpy_calls; ++c) saxpy_window(0.5F, x.data(), y_window.data(), n);
        },
        elements));
    const auto steps_d = static_cast<double>(steps);
    small_native_ns.push_back(
        ns_per([&] { ends[0] = chase(small.data(), ends[0], steps); }, steps_d));
    small_window_ns.push_back(
        ns_per([&] { ends[1] = chase_window(small.data(), ends[1], steps); }, steps_d));
    large_native_ns.push_back(
        ns_per([&] { ends[2] = chase(large.data(), ends[2], steps); }, steps_d));
    large_window_ns.push_back(
        ns_per([&] { ends[3] = chase_window(large.data(), ends[3], steps); }, steps_d));
    call_native_ns.push_back(calls_of(bump, &counters[0]));
    call_window_ns.push_back(calls_of(bump_window, &counters[1]));
    call_saves_ns.push_back(ns_per(
        [&] {
          auto volatile through = &bench_saves_only;
          const auto entry = reinterpret_cast<uint64_t>(bump_window);
          const auto counter = reinterpret_cast<uint64_t>(&counters[6]);
          for (int c = 0; c < kCalls; ++c) (void)through(entry, counter, 1);
        },
        kCalls));
    call_trampoline_ns.push_back(ns_per(
        [&] {
          if (tc::confined::run_in_window(window, trampoline_calls, &trampolined))
            throw std::runtime_error("the shaped counter trapped");
        },
        kCalls));
    call_trapped_ns.push_back(ns_per(
        [&] {
          for (int c = 0; c < kCalls; ++c)
            if (tc::confined::run_in_window(window, call_trapped, &trapped))
              throw std::runtime_error("the shaped counter trapped");
        },
        kCalls));
    call_direct_ns.push_back(ns_per(
        [&] {
          uint64_t result = 0;
          for (int c = 0; c < kCalls; ++c)
            if (tc::confined::run_window_code(window, bump_code, result,
                                              reinterpret_cast<uint64_t>(&counters[3]), 1))
              throw std::runtime_error("the shaped counter trapped");
        },
        kCalls));
    // The same under a budget: the watchdog's two stores around the call
    // (window_watchdog.hpp), as the confined tier runs it.
    call_watched_ns.push_back(ns_per(
        [&] {
          uint64_t result = 0;
          for (int c = 0; c < kCalls; ++c)
            if (tc::confined::run_window_code(window, bump_code, result,
                                              reinterpret_cast<uint64_t>(&counters[4]), 1, 0,
                                              std::chrono::milliseconds(10)))
              throw std::runtime_error("the shaped counter trapped");
        },
        kCalls));
    // Runs of calls with one way in (run_window_calls, as the Receiver runs
    // a ring's frames for one code), under the same budget: 4, 8 (what a
    // Receiver takes at least from a ring of 16 or more) and 32 (the most).
    for (std::size_t b = 0; b < kRunLengths.size(); ++b) {
      const std::size_t length = kRunLengths[b];
      std::vector<tc::confined::WindowCall> run(
          length, {reinterpret_cast<uint64_t>(&counters[7 + b]), 1, 0, 0});
      call_runs_ns[b].push_back(ns_per(
          [&] {
            for (int c = 0; c < kCalls; c += static_cast<int>(length)) {
              std::size_t returned = 0;
              if (tc::confined::run_window_calls(window, bump_code, run, returned,
                                                 std::chrono::milliseconds(10)))
                throw std::runtime_error("the shaped counter trapped");
            }
          },
          kCalls));
    }
  }
  if (counters[7] != counters[8] || counters[8] != counters[9] || counters[7] != counters[0]) {
    std::fprintf(stderr, "the counters of runs of calls differ\n");
    return 1;
  }
  if (counters[0] != counters[1] || counters[1] != counters[2] || counters[2] != counters[3] ||
      counters[3] != counters[4] || counters[4] != counters[5] || counters[5] != counters[6]) {
    std::fprintf(stderr, "the counters differ\n");
    return 1;
  }
  if (!std::equal(y_native.begin(), y_native.end(), y_window.begin()) || ends[0] != ends[1] ||
      ends[2] != ends[3]) {
    std::fprintf(stderr,
                 "the window-shaped kernels computed something else than the native ones\n");
    return 1;
  }

  // %gs writes: alternating between two bases, every use() writes.
  constexpr int kSwitches = 1 << 20;
  tc::confined::Window other;
  const double switch_ns = ns_per(
      [&] {
        for (int k = 0; k < kSwitches; ++k)
          tc::confined::GsBase::use((k & 1) != 0 ? window.base() : other.base());
      },
      kSwitches);
  const double same_ns = ns_per(
      [&] {
        for (int k = 0; k < kSwitches; ++k) {
          tc::confined::GsBase::use(window.base());
          asm volatile("" ::: "memory");  // one use() per iteration, not one per loop
        }
      },
      kSwitches);
  tc::confined::GsBase::use(window.base());

  struct Figure {
    const char* name;
    const char* unit;
    double native;
    double shaped;
  };
  const Figure figures[] = {
      {"saxpy", "ns/element", bench::median(saxpy_native_ns), bench::median(saxpy_window_ns)},
      {"chase, small table", "ns/step", bench::median(small_native_ns),
       bench::median(small_window_ns)},
      {"chase, large table", "ns/step", bench::median(large_native_ns),
       bench::median(large_window_ns)},
      {"counter call", "ns/call", bench::median(call_native_ns), bench::median(call_window_ns)},
      {"counter, saves only", "ns/call", bench::median(call_native_ns),
       bench::median(call_saves_ns)},
      {"counter, trampoline", "ns/call", bench::median(call_native_ns),
       bench::median(call_trampoline_ns)},
      {"counter call, trapped", "ns/call", bench::median(call_native_ns),
       bench::median(call_trapped_ns)},
      {"counter, run_window_code", "ns/call", bench::median(call_native_ns),
       bench::median(call_direct_ns)},
      {"counter, with a budget", "ns/call", bench::median(call_native_ns),
       bench::median(call_watched_ns)},
      {"counter, runs of 4", "ns/call", bench::median(call_native_ns),
       bench::median(call_runs_ns[0])},
      {"counter, runs of 8", "ns/call", bench::median(call_native_ns),
       bench::median(call_runs_ns[1])},
      {"counter, runs of 32", "ns/call", bench::median(call_native_ns),
       bench::median(call_runs_ns[2])},
  };
  fmt::print("{:<22} {:>10} {:>10} {:>8}  ({} rounds, median; n = {}, tables {} and {} entries)\n",
             "", "native", "window", "ratio", rounds, n, small_entries, large_entries);
  std::FILE* out = json.empty() ? stderr : std::fopen(json.c_str(), "a");
  for (const Figure& f : figures) {
    fmt::print("{:<22} {:>10.4f} {:>10.4f} {:>7.3f}x  {}\n", f.name, f.native, f.shaped,
               f.shaped / f.native, f.unit);
    fmt::print(out,
               "{{\"bench\":\"window\",\"figure\":\"{}\",\"unit\":\"{}\",\"native\":{:.4f},"
               "\"window\":{:.4f},\"ratio\":{:.3f},\"rounds\":{},\"n\":{}}}\n",
               f.name, f.unit, f.native, f.shaped, f.shaped / f.native, rounds, n);
  }
  fmt::print(
      "%gs base written: {:.2f} ns a switch; GsBase::use with the base already set: {:.2f} ns\n",
      switch_ns, same_ns);
  fmt::print(out,
             "{{\"bench\":\"window\",\"figure\":\"gs switch\",\"unit\":\"ns\",\"write\":{:.3f},"
             "\"unchanged\":{:.3f}}}\n",
             switch_ns, same_ns);
  const double verify_median_us = bench::median(verify_us);
  fmt::print(
      "verifier: {} instructions ({} entries, {} bytes of shaped code) read in {:.1f} us "
      "(median); compiling and linking them took {:.1f} ms (the verifier: {:.2f}% of that)\n",
      verdict.instructions, entries.size(), code_bytes, verify_median_us, compile_ms,
      100.0 * verify_median_us / (compile_ms * 1e3));
  fmt::print(
      out,
      "{{\"bench\":\"window\",\"figure\":\"verifier\",\"unit\":\"us\",\"verify\":{:.2f},"
      "\"instructions\":{},\"code_bytes\":{},\"compile_and_link_ms\":{:.2f},\"rounds\":{}}}\n",
      verify_median_us, verdict.instructions, code_bytes, compile_ms, rounds);
  if (out != stderr) std::fclose(out);
  return 0;
#endif
}
