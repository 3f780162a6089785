// threechains-confine-stress: a fuzzer of confinement itself. For each seed,
// llvm-stress writes a random well-formed IR function that loads and stores
// through its three pointer arguments and its locals, branches and loops at
// random. A wrapper makes it an ifunc whose first pointer is the payload, the
// second a canary array of this process and the third a canary on this
// thread's own stack (neither exposed). Loaded confined and run, it may
// return or trap, never change a canary or crash this process.
//
//   threechains-confine-stress [--seeds N | --seconds S] [--first F] [--size K]
//   threechains-confine-stress --unconfined ...   (the control: there the
//       same code must reach a canary, or the harness proves nothing)
//   threechains-confine-stress --window-tier ...  (ConfinementOptions::
//       window_tier: what takes the window shape runs in a window, verified;
//       how many did is printed, and none may be left if the shape is to be
//       tested at all)
#include <threechains/container.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IRReader/IRReader.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace tc = threechains;

namespace {

constexpr uint64_t kCanary = 0xc0ffee00c0ffee00ULL;
std::array<uint64_t, 1024> g_canary;  // a global of the target, not exposed

// llvm-stress's module for `seed`, as text.
std::string stress_ir(uint64_t seed, unsigned size) {
  char command[256];
  std::snprintf(command, sizeof(command), "%s -seed=%llu -size=%u -o -", THREECHAINS_LLVM_STRESS,
                static_cast<unsigned long long>(seed), size);
  std::FILE* pipe = popen(command, "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run llvm-stress");
  std::string text;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) text.append(buffer, n);
  if (pclose(pipe) != 0) throw std::runtime_error("llvm-stress failed");
  return text;
}

// --mutate: besides llvm-stress's function, stress_main works on its
// payload in a type a compiler chokes on, chosen per seed: integers wider
// than any register (up to 65536 bits: legalisation into millions of
// operations) or float formats this host has no instructions for
// (ppc_fp128 ends x86-64's code generator with a fatal error), through
// arithmetic, division and conversions. It goes through the compile worker;
// this process, the target, must come out of every seed alive, within the
// compile's time limit, canaries intact.
void add_odd_types(llvm::IRBuilder<>& b, llvm::Value* payload, uint64_t seed) {
  llvm::LLVMContext& context = b.getContext();
  static const std::array<unsigned, 6> kWidths{129, 256, 1000, 4096, 65536, 200};
  const unsigned kind = static_cast<unsigned>(seed % 11);
  llvm::Type* odd = nullptr;
  switch (kind) {
    case 0: odd = llvm::Type::getPPC_FP128Ty(context); break;
    case 1: odd = llvm::Type::getX86_FP80Ty(context); break;
    case 2: odd = llvm::Type::getFP128Ty(context); break;
    case 3: odd = llvm::Type::getBFloatTy(context); break;
    case 4: odd = llvm::Type::getHalfTy(context); break;
    default: odd = llvm::Type::getIntNTy(context, kWidths[(seed / 11) % kWidths.size()]);
  }
  llvm::Value* x = b.CreateLoad(odd, payload);
  llvm::Value* y = b.CreateLoad(odd, b.CreateConstGEP1_64(b.getInt8Ty(), payload, 64));
  llvm::Value* result = nullptr;
  if (odd->isIntegerTy()) {
    llvm::Value* sum = b.CreateMul(x, y);
    switch ((seed / 7) % 4) {
      case 0: result = b.CreateUDiv(sum, b.CreateOr(y, llvm::ConstantInt::get(odd, 1))); break;
      case 1: result = b.CreateShl(sum, b.CreateAnd(x, llvm::ConstantInt::get(odd, 255))); break;
      case 2: result = b.CreateUnaryIntrinsic(llvm::Intrinsic::ctpop, sum); break;
      default: result = b.CreateSIToFP(sum, b.getDoubleTy());
    }
  } else {
    llvm::Value* sum = b.CreateFMul(b.CreateFAdd(x, y), x);
    switch ((seed / 7) % 4) {
      case 0: result = b.CreateFPToSI(b.CreateFDiv(sum, y), b.getInt64Ty()); break;
      case 1: result = b.CreateFPToUI(sum, b.getInt128Ty()); break;
      case 2: result = b.CreateFPCast(b.CreateFPCast(sum, b.getFloatTy()), b.getDoubleTy()); break;
      default: result = b.CreateFRem(sum, y);
    }
  }
  b.CreateStore(result, b.CreateConstGEP1_64(b.getInt8Ty(), payload, 128));
}

// A container holding `ir` (text) as bitcode for this host, as ifunc `name`.
std::vector<std::byte> module_container(const std::string& ir, const std::string& name) {
  llvm::LLVMContext context;
  llvm::SMDiagnostic diagnostic;
  std::unique_ptr<llvm::Module> module =
      llvm::parseIR(llvm::MemoryBufferRef(ir, name), diagnostic, context);
  if (!module) throw std::runtime_error("IR does not parse: " + diagnostic.getMessage().str());
  module->setTargetTriple(llvm::Triple(llvm::sys::getProcessTriple()));
  llvm::SmallVector<char, 0> bitcode;
  llvm::raw_svector_ostream out(bitcode);
  llvm::WriteBitcodeToFile(*module, out);
  tc::IfuncLibrary library{name, {}, {}};
  const auto* bytes = reinterpret_cast<const std::byte*>(bitcode.data());
  library.images.push_back({llvm::sys::getProcessTriple(), tc::CodecId::bitcode,
                            std::vector<std::byte>(bytes, bytes + bitcode.size())});
  return tc::pack_container(library);
}

// The stress function wrapped as ifunc `stress`: stress_main(payload, size,
// args) calls it with (payload, &g_canary[512], args) and integers that
// depend on the seed.
std::vector<std::byte> stress_container(const std::string& ir, uint64_t seed, bool mutate) {
  llvm::LLVMContext context;
  llvm::SMDiagnostic diagnostic;
  std::unique_ptr<llvm::Module> module =
      llvm::parseIR(llvm::MemoryBufferRef(ir, "stress"), diagnostic, context);
  if (!module) throw std::runtime_error("llvm-stress IR does not parse");
  llvm::Function* generated = nullptr;
  for (llvm::Function& f : *module)
    if (!f.isDeclaration()) generated = &f;
  if (generated == nullptr) throw std::runtime_error("no function in llvm-stress IR");
  module->setTargetTriple(llvm::Triple(llvm::sys::getProcessTriple()));
  auto* ptr = llvm::PointerType::get(context, 0);
  auto* i64 = llvm::Type::getInt64Ty(context);
  auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(context), {ptr, i64, ptr}, false);
  auto* main =
      llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage, "stress_main", *module);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(context, "entry", main));
  std::vector<llvm::Value*> args;
  unsigned pointers = 0;
  for (llvm::Argument& parameter : generated->args()) {
    llvm::Type* t = parameter.getType();
    if (t->isPointerTy()) {
      llvm::Value* choice = main->getArg(0);
      if (pointers == 1) {
        choice = b.CreateIntToPtr(
            b.getInt64(reinterpret_cast<uintptr_t>(&g_canary[g_canary.size() / 2])), ptr);
      } else if (pointers >= 2) {
        choice = main->getArg(2);
      }
      ++pointers;
      args.push_back(choice);
    } else if (t->isIntegerTy()) {
      args.push_back(llvm::ConstantInt::get(t, seed * 0x9e3779b97f4a7c15ULL >> (args.size() * 7)));
    } else {
      args.push_back(llvm::Constant::getNullValue(t));
    }
  }
  b.CreateCall(generated, args);
  if (mutate) add_odd_types(b, main->getArg(0), seed);
  b.CreateRetVoid();
  llvm::SmallVector<char, 0> bitcode;
  llvm::raw_svector_ostream out(bitcode);
  llvm::WriteBitcodeToFile(*module, out);
  tc::IfuncLibrary library{"stress", {}, {}};
  library.images.push_back(
      {llvm::sys::getProcessTriple(), tc::CodecId::bitcode,
       std::vector<std::byte>(
           reinterpret_cast<const std::byte*>(bitcode.data()),
           reinterpret_cast<const std::byte*>(bitcode.data()) + bitcode.size())});
  return tc::pack_container(library);
}

// Hand-written attacks (from review) that must be refused at load or trap;
// CANARY stands for the canary array's address. Each is a whole module
// defining probe_main.
struct Attack {
  const char* what;
  bool refused;        // true: must be refused at load; false: must load and trap
  const char* reason;  // what the refusal or the trap must say
  const char* ir;
};

constexpr Attack kAttacks[] = {
    {"call of an integer made a pointer", false, "indirect call", R"(
define void @probe_main(ptr %p, i64 %n, ptr %a) {
  call void inttoptr (i64 CANARY to ptr)()
  ret void
})"},
    {"call into the middle of its own function", false, "indirect call", R"(
define internal void @f() {
  ret void
}
define void @probe_main(ptr %p, i64 %n, ptr %a) {
  call void getelementptr (i8, ptr @f, i64 3)()
  ret void
})"},
    {"an alias", true, "a global alias", R"(
define internal void @f() {
  ret void
}
@g = internal alias void (), ptr @f
define void @probe_main(ptr %p, i64 %n, ptr %a) {
  call void @g()
  ret void
})"},
    {"ghccc", true, "another calling convention", R"(
define internal ghccc void @f(i64 %x) {
  ret void
}
define void @probe_main(ptr %p, i64 %n, ptr %a) {
  call ghccc void @f(i64 1)
  ret void
})"},
    {"an entry point returning a large aggregate", true, "is not void(void*, size_t, void*)", R"(
define [4096 x i64] @probe_main(ptr %p, i64 %n, ptr %a) {
  ret [4096 x i64] zeroinitializer
})"},
    {"an indirect call of the wrong type", false, "indirect call", R"(
define internal [512 x i64] @big(i64 %x) {
  ret [512 x i64] zeroinitializer
}
@table = internal global ptr @big
define void @probe_main(ptr %p, i64 %n, ptr %a) {
  %f = load volatile ptr, ptr @table
  call void %f(ptr inttoptr (i64 CANARY to ptr))
  ret void
})"},
    {"a large by-value argument", true, "larger than 4 KiB", R"(
define internal void @f(ptr byval([65536 x i8]) %x) {
  ret void
}
define void @probe_main(ptr %p, i64 %n, ptr %a) {
  call void @f(ptr byval([65536 x i8]) %p)
  ret void
})"},
    {"locals whose sizes wrap", true, "larger than 1 GiB", R"(
define void @probe_main(ptr %p, i64 %n, ptr %a) {
  %b = alloca [18446742974197923840 x i8]
  %c = alloca [1099511631872 x i8]
  store volatile i8 1, ptr %c
  ret void
})"},
    {"a memset of poison length", false, "outside every region", R"(
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
define void @probe_main(ptr %p, i64 %n, ptr %a) {
  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 poison, i1 true)
  call void @llvm.memset.p0.i64(ptr inttoptr (i64 CANARY to ptr), i8 0, i64 8, i1 true)
  ret void
})"},
    {"a return address three frames up", true, "deeper than its own", R"(
declare ptr @llvm.returnaddress(i32)
define void @probe_main(ptr %p, i64 %n, ptr %a) {
  %r = call ptr @llvm.returnaddress(i32 3)
  store volatile ptr %r, ptr %p
  ret void
})"},
    {"a fixed-point division", true, "llvm.sdiv.fix", R"(
declare i32 @llvm.sdiv.fix.i32(i32, i32, i32)
define void @probe_main(ptr %p, i64 %n, ptr %a) {
  %d = call i32 @llvm.sdiv.fix.i32(i32 1, i32 0, i32 0)
  store volatile i32 %d, ptr %p
  ret void
})"},
    {"a scalable vector", true, "scalable vector", R"(
define void @probe_main(ptr %p, i64 %n, ptr %a) {
  %v = add <vscale x 4 x i32> zeroinitializer, zeroinitializer
  ret void
})"},
    {"an imported llvm.* global", true, "special global", R"(
@llvm.x = external global [64 x i8]
define void @probe_main(ptr %p, i64 %n, ptr %a) {
  store volatile i8 1, ptr @llvm.x
  ret void
})"},
    {"a direct call whose type is not its callee's", true, "not its callee's", R"(
define internal {[512 x i64]} @f() {
  ret {[512 x i64]} zeroinitializer
}
define void @probe_main(ptr %p, i64 %n, ptr %a) optnone noinline {
  call void @f(ptr inttoptr (i64 CANARY to ptr))
  ret void
})"},
    {"instrumentation calling a named function, and features this host may lack", false,
     "outside every region", R"(
define void @probe_main(ptr %p, i64 %n, ptr %a) #0 {
  store volatile i64 1, ptr inttoptr (i64 CANARY to ptr)
  ret void
}
attributes #0 = { "instrument-function-entry"="abort" "target-features"="+avx512f,+avx512bw,+amx-tile" }
)"},
};

// Runs each attack confined; true if every one did what it must. (In the
// window tier, an attack whose window object the verifier refuses is
// compiled again for the checked tier, and must do there what it must.)
bool run_attacks(tc::JitCache& cache) {
  bool all = true;
  for (const Attack& attack : kAttacks) {
    std::string ir = attack.ir;
    const std::string canary = std::to_string(reinterpret_cast<uintptr_t>(g_canary.data()));
    for (std::size_t at = ir.find("CANARY"); at != std::string::npos; at = ir.find("CANARY"))
      ir.replace(at, 6, canary);
    g_canary.fill(kCanary);
    std::string outcome;
    bool ok = false;
    try {
      const tc::Ifunc ifunc = tc::Ifunc::from_container(module_container(ir, "probe"));
      (void)cache.load(ifunc.id(), ifunc.codec(), ifunc.code(), tc::Confine::yes);
      alignas(64) std::array<std::byte, 256> payload{};
      const std::optional<tc::ConfinedTrap> trap =
          cache.invoke(*cache.find_ifunc(ifunc.id()), payload.data(), payload.size(), nullptr);
      (void)cache.evict(ifunc.id());
      outcome = trap ? "trapped: " + std::string(tc::to_string(trap->reason)) : "returned";
      ok = !attack.refused && trap.has_value() && outcome.find(attack.reason) != std::string::npos;
    } catch (const tc::Error& error) {
      outcome = std::string("refused: ") + error.context();
      ok = attack.refused && outcome.find(attack.reason) != std::string::npos;
    }
    const bool intact =
        std::all_of(g_canary.begin(), g_canary.end(), [](uint64_t w) { return w == kCanary; });
    if (!intact) outcome += "; A CANARY CHANGED";
    std::printf("  %-4s %s: %s\n", ok && intact ? "ok" : "FAIL", attack.what,
                outcome.substr(0, 140).c_str());
    all = all && ok && intact;
  }
  return all;
}

struct Tally {
  unsigned returned = 0;
  unsigned trapped = 0;
  unsigned refused = 0;
  unsigned escaped = 0;  // a canary changed
  unsigned stalled = 0;  // a load held this process past the compile's time limit
  unsigned in_window = 0;  // loaded in the window tier
  unsigned window_refused = 0;  // window objects the verifier refused, then loaded checked
  std::map<std::string, unsigned> reasons;
};

}  // namespace

int main(int argc, char** argv) {
  uint64_t first = 1;
  uint64_t seeds = 100;
  double seconds = 0;
  bool window_tier = false;
  unsigned size = 60;
  bool unconfined = false;
  bool mutate = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const auto next = [&] {
      if (i + 1 >= argc) throw std::runtime_error(flag + " needs a value");
      return std::string(argv[++i]);
    };
    if (flag == "--first")
      first = std::stoull(next());
    else if (flag == "--seeds")
      seeds = std::stoull(next());
    else if (flag == "--seconds")
      seconds = std::stod(next());
    else if (flag == "--size")
      size = static_cast<unsigned>(std::stoul(next()));
    else if (flag == "--unconfined")
      unconfined = true;
    else if (flag == "--mutate")
      mutate = true;
    else if (flag == "--window-tier")
      window_tier = true;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  // The control run writes through the canary pointers for real: it runs in
  // a child, so a crash there is its own.
  const tc::Confine confine = unconfined ? tc::Confine::no : tc::Confine::yes;
  // Odd seeds unoptimised (the code as llvm-stress wrote it), even seeds
  // through O2 (which turns much of its undefined behaviour into unreachable).
  tc::JitOptions options;
  options.tiering = tc::Tiering::ir_only;
  options.confinement.time_budget = std::chrono::milliseconds(2);
  options.confinement.window_tier = window_tier;
  options.optimisation_level = 0;
  tc::JitCache plain_cache(options);
  options.optimisation_level = 2;
  tc::JitCache optimising_cache(options);
  if (!unconfined) {
    std::printf("attacks from review, each refused or trapped, canaries intact:\n");
    if (!run_attacks(optimising_cache)) {
      std::printf("FAIL: an attack was not stopped\n");
      return 1;
    }
  }
  Tally tally;
  // A load, compile and all, may take 4x the compile worker's CPU limit on
  // the wall clock (where a blocked worker is stopped) and a second more
  // (the worker's start, the link); one the machine starves is given up
  // at 16x, with errc::timeout. Never longer.
  const auto check_stall = [&](uint64_t seed, std::chrono::steady_clock::time_point started,
                               bool starved = false) {
    const auto took = std::chrono::steady_clock::now() - started;
    const int factor = starved ? 16 : 4;
    if (took <= options.confinement.compile_time_limit * factor + std::chrono::seconds(1)) return;
    ++tally.stalled;
    std::fprintf(stderr, "STALL: seed %llu held this process %lld ms\n",
                 static_cast<unsigned long long>(seed),
                 static_cast<long long>(
                     std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  };
  const auto start = std::chrono::steady_clock::now();
  uint64_t seed = first;
  for (;; ++seed) {
    if (seconds > 0
            ? std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
                  seconds
            : seed >= first + seeds)
      break;
    tc::JitCache& cache = seed % 2 != 0 ? plain_cache : optimising_cache;
    const std::vector<std::byte> container = stress_container(stress_ir(seed, size), seed, mutate);
    const tc::Ifunc ifunc = tc::Ifunc::from_container(container);
    g_canary.fill(kCanary);
    volatile uint64_t stack_canary[64];
    for (volatile uint64_t& w : stack_canary) w = kCanary;
    alignas(64) std::array<std::byte, 4096> payload{};
    for (std::size_t k = 0; k < payload.size(); ++k) payload[k] = std::byte(k * 131 + seed);
    if (unconfined) {
      // The control: in a child, as it may crash; an escape is its exit code 3.
      const pid_t child = fork();
      if (child == 0) {
        // Crash quietly (UCX's handler would print a backtrace) and never spin.
        for (const int signal : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) std::signal(signal, SIG_DFL);
        alarm(1);
        try {
          (void)cache.load(ifunc.id(), ifunc.codec(), ifunc.code(), confine);
          (void)cache.invoke(*cache.find_ifunc(ifunc.id()), payload.data(), payload.size(),
                             const_cast<uint64_t*>(&stack_canary[32]));
        } catch (const tc::Error&) {
          _exit(4);
        }
        const bool hit = std::any_of(g_canary.begin(), g_canary.end(),
                                     [](uint64_t w) { return w != kCanary; }) ||
                         std::any_of(std::begin(stack_canary), std::end(stack_canary),
                                     [](uint64_t w) { return w != kCanary; });
        _exit(hit ? 3 : 0);
      }
      int status = 0;
      waitpid(child, &status, 0);
      if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
        ++tally.escaped;
      else if (WIFEXITED(status) && WEXITSTATUS(status) == 4)
        ++tally.refused;
      else if (WIFEXITED(status))
        ++tally.returned;
      else
        ++tally.trapped;  // a crash, in the control
      continue;
    }
    const auto load_started = std::chrono::steady_clock::now();
    const uint64_t window_refusals = cache.window_refusals().count;
    try {
      (void)cache.load(ifunc.id(), ifunc.codec(), ifunc.code(), confine);
      // A window object the verifier refused or that did not link in its
      // window (compiled again for the checked tier) is the window tier's
      // to mend: said in full, with the seed.
      if (cache.window_refusals().count != window_refusals) {
        ++tally.window_refused;
        std::fprintf(stderr, "NOTE: seed %llu: %s\n", static_cast<unsigned long long>(seed),
                     cache.window_refusals().last.c_str());
      }
    } catch (const tc::Error& error) {
      ++tally.refused;
      // The reason's kind, without the ifunc's name and what varies per seed.
      std::string reason = error.context();
      if (const std::size_t quote = reason.find("': "); quote != std::string::npos)
        reason.erase(0, quote + 3);
      ++tally.reasons[std::string("refused: ") + reason.substr(0, 70)];
      check_stall(seed, load_started, error.is(tc::errc::timeout));
      continue;
    }
    check_stall(seed, load_started);
    if (cache.in_window(*cache.find_ifunc(ifunc.id()))) ++tally.in_window;
    const std::optional<tc::ConfinedTrap> trap =
        cache.invoke(*cache.find_ifunc(ifunc.id()), payload.data(), payload.size(),
                     const_cast<uint64_t*>(&stack_canary[32]));
    (void)cache.evict(ifunc.id());
    if (trap) {
      ++tally.trapped;
      ++tally.reasons[std::string(tc::to_string(trap->reason))];
    } else {
      ++tally.returned;
    }
    const bool intact =
        std::all_of(g_canary.begin(), g_canary.end(), [](uint64_t w) { return w == kCanary; }) &&
        std::all_of(std::begin(stack_canary), std::end(stack_canary),
                    [](uint64_t w) { return w == kCanary; });
    if (!intact) {
      ++tally.escaped;
      std::fprintf(stderr, "ESCAPE: seed %llu changed a canary (llvm-stress -seed=%llu -size=%u)\n",
                   static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed),
                   size);
    }
  }
  const uint64_t ran = seed - first;
  std::printf(unconfined ? "%s: %llu seeds (%llu..%llu, size %u): %u returned, %u crashed or hung, "
                           "%u refused, %u escaped\n"
                         : "%s: %llu seeds (%llu..%llu, size %u): %u returned, %u trapped, %u "
                           "refused, %u escaped\n",
              unconfined ? "unconfined (control)" : "confined",
              static_cast<unsigned long long>(ran), static_cast<unsigned long long>(first),
              static_cast<unsigned long long>(seed - 1), size, tally.returned, tally.trapped,
              tally.refused, tally.escaped);
  for (const auto& [reason, count] : tally.reasons)
    std::printf("  %5u  %s\n", count, reason.c_str());
  if (window_tier) {
    std::printf("  %5u  loaded in the window tier (verified), the rest checked\n", tally.in_window);
    std::printf("  %5u  window objects the verifier refused (compiled again, checked)\n",
                tally.window_refused);
    if (tally.in_window == 0) {
      std::printf("FAIL: no seed took the window shape: the window tier went untested\n");
      return 1;
    }
  }
  if (unconfined) {
    // The harness proves something only if the same code, unconfined, hits a canary.
    if (tally.escaped == 0) {
      std::printf("FAIL: unconfined, no seed reached a canary: the harness would miss an escape\n");
      return 1;
    }
    return 0;
  }
  if (tally.stalled != 0) std::printf("FAIL: %u loads held the target past the compile's limit\n", tally.stalled);
  return tally.escaped == 0 && tally.stalled == 0 ? 0 : 1;
}
