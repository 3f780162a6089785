// The window verifier for aarch64 (confine/verify_aarch64.hpp), on any
// host: what real LLVM emits for window-shaped code, compiled for aarch64
// and linked by JITLink into a window here (the verifier reads bytes; it
// runs none), is accepted; the same code unshaped, or with one check taken
// out by hand, is refused; and machine code that breaks each rule (words
// an attacker who controls the compiler would write, encodings from
// llvm-mc-22) is refused, naming the rule. Running window code on an Arm
// CPU is not here yet (docs/security.md, "The aarch64 verifier").
#include "confine/pass.hpp"
#include "confine/verify_aarch64.hpp"
#include "confine/window.hpp"
#include "jit/host_optimiser.hpp"
#include "jit/window_memory.hpp"
#include "window_test_ir.hpp"

#include <catch2/catch.hpp>

#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/MapperJITLinkMemoryManager.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/Orc/SelfExecutorProcessControl.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tc = threechains;
using tc::confined::CodeRange;
using tc::confined::Verdict;
using tc::confined::VerifierInput;
using tc::confined::Window;

namespace {

constexpr const char* kTriple = "aarch64-unknown-linux-gnu";

// A target machine for aarch64 `cpu`, keeping x21 for the window's base
// (and without SVE: the verifier accepts none of it) when `window`.
std::unique_ptr<llvm::TargetMachine> aarch64_machine(const char* cpu, bool window) {
  static const bool ready = [] {
    LLVMInitializeAArch64TargetInfo();
    LLVMInitializeAArch64Target();
    LLVMInitializeAArch64TargetMC();
    LLVMInitializeAArch64AsmPrinter();
    return true;
  }();
  (void)ready;
  std::string error;
  const llvm::Triple triple(kTriple);
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (target == nullptr) FAIL("no aarch64 target in this LLVM: " << error);
  return std::unique_ptr<llvm::TargetMachine>(target->createTargetMachine(
      triple, cpu, window ? tc::kAarch64WindowFeatures : "", llvm::TargetOptions{},
      llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOptLevel::Default));
}

// `ir` optimised for aarch64 `cpu` (as the compile worker would on that
// CPU), shaped unless `native`, compiled, and linked by JITLink into a
// window of this process.
struct Linked {
  std::unique_ptr<Window> window = std::make_unique<Window>();
  std::unique_ptr<llvm::orc::ExecutionSession> session;
  std::unique_ptr<llvm::orc::ObjectLinkingLayer> layer;  // destroyed before the session
  std::vector<CodeRange> code;
  std::vector<uint64_t> entries;
  ~Linked() {
    if (session) llvm::consumeError(session->endSession());
  }
  Linked() = default;
  Linked(Linked&&) = default;
};

Linked link_aarch64(const char* ir, const std::vector<const char*>& entries, bool shaped,
                    const char* cpu = "neoverse-n1") {
  Linked linked;
  auto control = llvm::orc::SelfExecutorProcessControl::Create();
  REQUIRE(static_cast<bool>(control));
  linked.session = std::make_unique<llvm::orc::ExecutionSession>(std::move(*control));
  auto mapper = std::make_unique<tc::jit::WindowMemoryMapper>(*linked.window);
  tc::jit::WindowMemoryMapper* mapped = mapper.get();
  linked.layer = std::make_unique<llvm::orc::ObjectLinkingLayer>(
      *linked.session, std::make_unique<llvm::orc::MapperJITLinkMemoryManager>(std::size_t{1} << 20,
                                                                               std::move(mapper)));
  llvm::orc::JITDylib& dylib = linked.session->createBareJITDylib("aarch64");

  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> module = window_tests::parse(ir, context);
  tc::HostOptimiser(aarch64_machine(cpu, shaped), 2).run(*module);
  if (shaped) tc::shape_for_window(*module, "kernel");
  std::unique_ptr<llvm::TargetMachine> machine = aarch64_machine(cpu, shaped);
  auto object = llvm::orc::SimpleCompiler(*machine)(*module);
  REQUIRE(static_cast<bool>(object));
  REQUIRE(!linked.layer->add(dylib, std::move(*object)));
  for (const char* name : entries) {
    auto symbol = linked.session->lookup({&dylib}, linked.session->intern(name));
    if (!symbol) FAIL(llvm::toString(symbol.takeError()));
    linked.entries.push_back(symbol->getAddress().getValue());
  }
  linked.code = mapped->executable_code();
  REQUIRE(!linked.code.empty());
  return linked;
}

Verdict verify(std::span<const CodeRange> code, std::span<const uint64_t> entries,
               const Window& window) {
  return tc::confined::verify_window_code_aarch64(
      VerifierInput{code, entries, reinterpret_cast<uint64_t>(window.base())});
}

// A window-sized range at an address no window has: the verifier reads
// words, it never runs them, so hand-written code needs no real window.
constexpr uint64_t kWindowBase = uint64_t{0x7f} << 32;
constexpr uint64_t kCodeAddress = kWindowBase + 0x10000;

Verdict verify_words(const std::vector<uint32_t>& words) {
  std::vector<std::byte> bytes;
  for (const uint32_t word : words)
    for (int shift = 0; shift < 32; shift += 8) bytes.push_back(std::byte(word >> shift));
  const CodeRange code{kCodeAddress, bytes};
  const uint64_t entry = kCodeAddress;
  return tc::confined::verify_window_code_aarch64(
      VerifierInput{{&code, 1}, {&entry, 1}, kWindowBase});
}

// Encodings (llvm-mc-22 -triple=aarch64 -show-encoding) this file uses.
constexpr uint32_t kRet = 0xd65f03c0;
constexpr uint32_t kSaveFrame = 0xa9bf7bfd;     // stp x29, x30, [sp, #-16]!
constexpr uint32_t kRestoreFrame = 0xa8c17bfd;  // ldp x29, x30, [sp], #16
constexpr uint32_t kWindowedX8 = 0x8b2142a8;    // add x8, x21, w1, uxtw
constexpr uint32_t kAdd16MiB = 0x917ffd08;      // add x8, x8, #4095, lsl #12
constexpr uint32_t kSubtract16MiB = 0xd17ffd08;  // sub x8, x8, #4095, lsl #12

// `before`, then `word` `times` times, then `after`.
std::vector<uint32_t> with_repeated(std::vector<uint32_t> before, uint32_t word, int times,
                                    const std::vector<uint32_t>& after) {
  before.insert(before.end(), static_cast<std::size_t>(times), word);
  before.insert(before.end(), after.begin(), after.end());
  return before;
}

struct Case {
  const char* what;
  std::vector<uint32_t> words;
  const char* refusal;  // a part of the reason; nullptr: accepted
};

}  // namespace

TEST_CASE("the aarch64 verifier accepts what LLVM emits for window-shaped code",
          "[window][verifier][aarch64]") {
  // The CPUs the research ran on: a DPU's Arm cores and the A64FX.
  for (const char* cpu : {"neoverse-n1", "cortex-a72", "a64fx"}) {
    INFO(cpu);
    const Linked linked =
        link_aarch64(window_tests::kKernels.c_str(), window_tests::kEntries, true, cpu);
    const Verdict verdict = verify(linked.code, linked.entries, *linked.window);
    INFO(verdict.refusal);
    REQUIRE(verdict.accepted);
    CHECK(verdict.instructions >= 40);
    CHECK(verdict.stack_bytes >= 16);  // call_twice keeps x30 and x29 across its calls
    CHECK(verdict.stack_bytes <= 1024);
  }
}

TEST_CASE("the aarch64 verifier refuses the same kernels compiled without the window shape",
          "[window][verifier][aarch64]") {
  for (const char* entry : {"saxpy", "chase", "bump"}) {
    INFO(entry);
    const Linked linked = link_aarch64(window_tests::kKernels.c_str(), {entry}, false);
    const Verdict verdict = verify(linked.code, linked.entries, *linked.window);
    CHECK_FALSE(verdict.accepted);
    CHECK_THAT(verdict.refusal, Catch::Contains("outside the window"));
  }
}

TEST_CASE("an aarch64 object with one check taken out by hand is refused by the verifier",
          "[window][verifier][aarch64]") {
  constexpr const char* kPoke = R"(
define void @poke(ptr %p, i64 %v) {
  store i64 %v, ptr %p
  ret void
}
)";
  const Linked linked = link_aarch64(kPoke, {"poke"}, true);
  REQUIRE(verify(linked.code, linked.entries, *linked.window).accepted);
  REQUIRE(linked.code.size() == 1);
  const CodeRange& range = linked.code[0];
  std::vector<uint32_t> words(range.bytes.size() / 4);
  std::memcpy(words.data(), range.bytes.data(), words.size() * 4);
  // poke is `str x1, [x21, w0, uxtw]; ret`: a register-offset store from x21.
  const std::size_t entry = (linked.entries[0] - range.address) / 4;
  std::size_t store = entry;
  while (store < words.size() && (words[store] & 0xffe0ffe0U) != 0xf8204aa0U) ++store;
  REQUIRE(store < words.size());
  const auto verdict_with = [&](uint32_t word) {
    std::vector<uint32_t> changed = words;
    changed[store] = word;
    const CodeRange code{range.address,
                         {reinterpret_cast<const std::byte*>(changed.data()), changed.size() * 4}};
    return tc::confined::verify_window_code_aarch64(VerifierInput{
        {&code, 1}, linked.entries, reinterpret_cast<uint64_t>(linked.window->base())});
  };
  SECTION("the base x21 replaced by x20") {
    const Verdict verdict = verdict_with((words[store] & ~(0x1fU << 5)) | (20U << 5));
    CHECK_FALSE(verdict.accepted);
    CHECK_THAT(verdict.refusal, Catch::Contains("does not point into the window"));
  }
  SECTION("the zero extension replaced by a sign extension of the whole register") {
    const Verdict verdict = verdict_with(words[store] | (0b101U << 13));  // uxtw -> sxtx
    CHECK_FALSE(verdict.accepted);
    CHECK_THAT(verdict.refusal, Catch::Contains("other than a w register extended"));
  }
  SECTION("the zero extension replaced by the whole x register") {
    const Verdict verdict = verdict_with(words[store] | (0b001U << 13));  // uxtw -> lsl
    CHECK_FALSE(verdict.accepted);
    CHECK_THAT(verdict.refusal, Catch::Contains("upper half may be set"));
  }
}

TEST_CASE("the aarch64 verifier refuses machine code that breaks each rule, naming it",
          "[window][verifier][aarch64]") {
  const std::vector<Case> cases = {
      // What confined code may do, written by hand.
      {"a frame that keeps the return address across a call",
       {kSaveFrame, 0x94000003 /* bl +3 */, kRestoreFrame, kRet, kRet},
       nullptr},
      {"accesses through x21: uxtw, a clean x register, a windowed pointer, a pair",
       {0xf8614aa0 /* ldr x0, [x21, w1, uxtw] */, 0x2a0103e1 /* mov w1, w1 */,
        0xf8616aa0 /* ldr x0, [x21, x1] */, kWindowedX8, 0xf9400900 /* ldr x0, [x8, #16] */,
        0xad400500 /* ldp q0, q1, [x8] */, 0xf8200101 /* ldadd x0, x1, [x8] */,
        0xc8097d00 /* stxr w9, x0, [x8] */, 0x38615aa0 /* ldrb w0, [x21, w1, uxtw #0] */, kRet},
       nullptr},
      {"an indexed access: a w index sign-extended and scaled by 8, from x21 or a masked base",
       {0xf861caa0 /* ldr x0, [x21, w1, sxtw] */, 0xf861daa0 /* ldr x0, [x21, w1, sxtw #3] */,
        kWindowedX8, 0xf862d900 /* ldr x0, [x8, w2, sxtw #3] */,
        0x90800008 /* adrp x8, #-4 GiB: in the lower guard */, 0xf9400100 /* ldr x0, [x8] */, kRet},
       nullptr},
      {"traps, nop, barriers and bti",
       {0xd503201f /* nop */, 0xd5033bbf /* dmb ish */, 0xd503245f /* bti c */,
        0xd4200020 /* brk #1 */},
       nullptr},
      // System, exceptions, state the host inherits.
      // Unallocated encodings beside allowed ones: refused, not read as
      // their neighbours (helper-28; each invalid to llvm-mc).
      {"ccmp, umulh, smull, madd, ldapr: the allocated forms",
       {0xfa420020 /* ccmp x1, x2, #0, eq */, 0x9bc27c20 /* umulh x0, x1, x2 */,
        0x9b227c20 /* smull x0, w1, w2 */, 0x1b020c20 /* madd w0, w1, w2, w3 */, kWindowedX8,
        0xb8bfc104 /* ldapr w4, [x8] */, kRet},
       nullptr},
      {"prfm pldl1keep, [x21, w1, uxtw]", {0xf8a14aa0, kRet}, nullptr},
      {"rprfm pldkeep, x1, [x21]: a range, not an offset", {0xf8a14ab8, kRet}, "rprfm"},
      {"ccmp with o3 set", {0xfa400030, kRet}, "reserved conditional-compare"},
      {"ccmp with o2 set", {0xfa400420, kRet}, "reserved conditional-compare"},
      {"add (extended) with opt 01", {0x8b624020, kRet}, "reserved extended-register"},
      {"a three-source multiply with op54 01", {0xbb020c20, kRet}, "reserved or unknown multiply"},
      {"smulh with Ra not all ones", {0x9b420c20, kRet}, "reserved or unknown multiply"},
      {"a 32-bit extr with imms of 32 or more", {0x1382beb6, kRet}, "reserved extract"},
      {"ldapr with release set and acquire clear",
       {kWindowedX8, 0xb87fc104, kRet},
       "atomic operation confined code may not use"},
      {"svc", {0xd4000001}, "system instruction"},
      {"msr fpcr (the host's rounding and traps)", {0xd51b4400, kRet}, "system instruction"},
      {"msr nzcv", {0xd51b4200, kRet}, "system instruction"},
      {"mrs tpidr_el0 (the host's thread pointer)", {0xd53bd040, kRet}, "system instruction"},
      {"dc zva (zeroes the cache line at any address)", {0xd50b7420, kRet}, "system instruction"},
      {"paciasp", {0xd503233f, kRet}, "hint confined code may not use"},
      // Control.
      {"br", {0xd61f0000}, "indirect branch"},
      {"blr", {0xd63f0000, kRet}, "indirect branch"},
      {"ret through another register", {0xd65f0000}, "indirect branch"},
      {"a branch out of the code", {0x14000064 /* b +400 */}, "outside the code"},
      {"running off the end", {0xd503201f /* nop */}, "outside the code"},
      {"recursion", {kSaveFrame, 0x97ffffff /* bl -4 */, kRestoreFrame, kRet}, "call itself"},
      {"the stack at two heights where paths meet",
       {0xb4000040 /* cbz x0, +8 */, 0xd10043ff /* sub sp, sp, #16 */, kRet},
       "two heights"},
      // sp, x21, x30.
      {"sp set from a register", {0x9100401f /* add sp, x0, #16 */, kRet}, "writes sp"},
      {"irg sp (memory tagging)", {0x9adf101f, kRet}, "two-source"},
      {"sp freed above the entry", {0x910083ff /* add sp, sp, #32 */, kRet}, "frees stack above"},
      {"ret with sp below the entry", {0xd10083ff /* sub sp, sp, #32 */, kRet}, "32 bytes below"},
      {"x21 written", {0xaa0003f5 /* mov x21, x0 */, kRet}, "writes x21"},
      {"x21 written as the second register of casp",
       {kWindowedX8, 0x48347d00 /* casp x20, x21, x0, x1, [x8] */, kRet},
       "writes x21"},
      {"x30 set to a value, then ret", {0xaa0003fe /* mov x30, x0 */, kRet}, "x30 not holding"},
      {"addpt x21 (FEAT_CPA, in the carry class's space)",
       {0x9a1f2015 /* addpt x21, x0, xzr */, kRet},
       "carry class"},
      {"addpt x30", {0x9a01201e /* addpt x30, x0, x1 */, kRet}, "carry class"},
      {"stxr whose status register is its base",
       {0x8b2042a1 /* add x1, x21, w0, uxtw */, 0xc8017c22 /* stxr w1, x2, [x1] */, kRet},
       "status register is its base"},
      {"the saved return address freed with its frame, written by a callee, taken back",
       {kSaveFrame, 0x910043ff /* add sp, sp, #16 */, 0x94000005 /* bl g */,
        0xd10043ff /* sub sp, sp, #16 */, 0xa9407bfd /* ldp x29, x30, [sp] */,
        0x910043ff /* add sp, sp, #16 */, kRet,
        /* g: */ 0xd10043ff /* sub sp, sp, #16 */, 0xf90007e0 /* str x0, [sp, #8] */,
        0x910043ff /* add sp, sp, #16 */, kRet},
       "x30 not holding"},
      {"the saved return address overwritten in the frame",
       {kSaveFrame, 0xf90007e0 /* str x0, [sp, #8] */, kRestoreFrame, kRet},
       "x30 not holding"},
      // Memory.
      {"a load through a register", {0xf9400000 /* ldr x0, [x0] */, kRet}, "outside the window"},
      {"a store below sp", {0xf81f03e0 /* stur x0, [sp, #-16] */, kRet}, "outside the function's"},
      {"x20 as the base",
       {0xf8614a80 /* ldr x0, [x20, w1, uxtw] */, kRet},
       "does not point into the window"},
      {"a sign-extended x register offset",
       {0xf861eaa0 /* ldr x0, [x21, x1, sxtx] */, kRet},
       "other than"},
      {"an offset scaled by 16 (64 GiB of reach)",
       {0x3ce05aa0 /* ldr q0, [x21, w0, uxtw #4] */, kRet},
       "scaled by 16"},
      {"an x register offset of unknown upper half",
       {0xf8616aa0 /* ldr x0, [x21, x1] */, kRet},
       "upper half may be set"},
      {"a window pointer stepped in a loop",
       {kWindowedX8, 0x91004108 /* add x8, x8, #16 */, 0xf9400100 /* ldr x0, [x8] */,
        0xb5ffffc0 /* cbnz x0, -8 */, kRet},
       "outside the window"},
      {"a computed address stepped past the lower guard",
       with_repeated({0x90800008 /* adrp x8, #-4 GiB */}, kSubtract16MiB, 900,
                     {0xf9400100 /* ldr x0, [x8] */, kRet}),
       "reaches past the window's guards"},
      {"a window pointer stepped past the upper guard",
       with_repeated({kWindowedX8}, kAdd16MiB, 1200, {0xf9400100 /* ldr x0, [x8] */, kRet}),
       "reaches past the window's guards"},
      {"a load with writeback into its own base",
       {kWindowedX8, 0xf8408508 /* ldr x8, [x8], #8 */, kRet},
       "its own base"},
      {"ldraa (pointer authentication)", {kWindowedX8, 0xf8200500, kRet}, "may not use"},
      {"ld64b (eight registers, x21 among them)", {kWindowedX8, 0xf83fd100, kRet}, "may not use"},
      {"cpyfp (a memory copy of any length)", {0x19010440, kRet}, "may not use"},
      {"stg (memory tagging)", {kWindowedX8, 0xd9200900, kRet}, "may not use"},
      {"an SVE load", {0xa5e0a000 /* ld1d {z0.d}, p0/z, [x0] */, kRet}, "SVE"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const Verdict verdict = verify_words(c.words);
    INFO(verdict.refusal);
    if (c.refusal == nullptr) {
      CHECK(verdict.accepted);
    } else {
      CHECK_FALSE(verdict.accepted);
      CHECK_THAT(verdict.refusal, Catch::Contains(c.refusal));
    }
  }
}
