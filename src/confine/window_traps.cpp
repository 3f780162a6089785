// What window_traps.hpp says: a SIGSEGV or SIGBUS whose address lies in the
// window of the run active on this thread, or any fault of an instruction
// that lies in that window, jumps back to run_in_window.
#include "confine/window_traps.hpp"

#include "confine/window_watchdog.hpp"

#include "sanitizers.hpp"
#include "signal_chain.hpp"

#include <pthread.h>
#include <signal.h>
#include <ucontext.h>
#if defined(__aarch64__)
#include <asm/sigcontext.h>
#endif
#include <unistd.h>

#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>

#if defined(__x86_64__)
// call_window_code's body: the
// registers the C convention has a callee keep are kept here instead; the
// stack the code can reach is zeroed (8 bytes a store: `rep stosb` cost
// ~10 ns a call for a few bytes), and every general register but the
// arguments and the entry is cleared, and every vector and mask register,
// so the code starts with nothing of the host's (nor of the peer whose
// payload the host handled last). Six pushes and the trampoline's own
// words (a pad for one call; five for a run) keep %rsp 16-byte aligned at
// each call, and lie above the code's frames, where the verifier lets it
// neither read nor write.
// Which vector registers the trampoline clears: 0 the SSE ones, 1 all of
// AVX's, 2 AVX-512's too (%zmm16-31, the mask registers). Each by a VEX or
// EVEX xor of its low 128 bits, which zeroes the rest, a zeroing idiom the
// CPU drops at rename (vzeroall measured slower, in runs not interleaved:
// docs/performance.md).
// Read once, when the library loads.
extern "C" [[gnu::visibility("hidden")]] const unsigned char threechains_window_vector_level = [] {
  __builtin_cpu_init();  // this may run before libgcc's own constructor has
  if (__builtin_cpu_supports("avx512f")) return 2;
  return __builtin_cpu_supports("avx") ? 1 : 0;
}();
// Two ways in: threechains_call_window_code makes one call (entry, stack
// bytes, three arguments, `resume_stack`); threechains_run_window_calls
// makes the calls [calls, end) one after the other (entry, stack bytes, the
// calls, their end, the watch whose invocation serial it advances before
// each call (null: no budget), `resume_stack`). `resume_stack`, when not
// null, gets %rsp as it is at a call, for a trap to resume at
// threechains_window_resume (threechains_window_run_resume) with. A run
// keeps the host's registers and clears its values once, before the first
// call; between calls only the trampoline's own (where the calls and the
// watch lie); it zeroes the reachable stack before every call (a signal
// that arrives between two calls, the watchdog's among them, leaves its
// frame there: the trampoline's address, the watch's; helper-21). Its
// frame, above the code's, where the verifier lets the code neither read
// nor write: the entry, the next call (kNextCallInFrame: the trap handler
// reads it there), the end, the watch, the stack bytes. A run of one
// costs about 1 ns more than the single way in (threechains-bench-window),
// which one call (JitCache::invoke) keeps.
extern "C" uint64_t threechains_call_window_code(uint64_t entry, uint64_t stack_bytes, uint64_t a0,
                                                 uint64_t a1, uint64_t a2, uintptr_t* resume_stack);
extern "C" void threechains_run_window_calls(uint64_t entry, uint64_t stack_bytes, void* calls,
                                             void* end, void* watch, uintptr_t* resume_stack);
extern "C" char threechains_window_resume[];
extern "C" char threechains_window_run_resume[];
asm(R"(
  .macro threechains_save_host
  pushq %rbx
  .cfi_adjust_cfa_offset 8
  .cfi_rel_offset %rbx, 0
  pushq %rbp
  .cfi_adjust_cfa_offset 8
  .cfi_rel_offset %rbp, 0
  pushq %r12
  .cfi_adjust_cfa_offset 8
  .cfi_rel_offset %r12, 0
  pushq %r13
  .cfi_adjust_cfa_offset 8
  .cfi_rel_offset %r13, 0
  pushq %r14
  .cfi_adjust_cfa_offset 8
  .cfi_rel_offset %r14, 0
  pushq %r15
  .cfi_adjust_cfa_offset 8
  .cfi_rel_offset %r15, 0
  .endm

  .macro threechains_restore_host_and_return
  popq %r15
  .cfi_adjust_cfa_offset -8
  popq %r14
  .cfi_adjust_cfa_offset -8
  popq %r13
  .cfi_adjust_cfa_offset -8
  popq %r12
  .cfi_adjust_cfa_offset -8
  popq %rbp
  .cfi_adjust_cfa_offset -8
  popq %rbx
  .cfi_adjust_cfa_offset -8
  retq
  .endm

  # Zeroes [%rdi - %rsi, %rdi) 8 bytes a store (rep stosb cost ~10 ns a
  # call for a few bytes); uses %rax and %rcx.
  .macro threechains_zero_stack
  xorl %eax, %eax
  movq %rdi, %rcx
  subq %rsi, %rcx
81:
  cmpq %rcx, %rdi
  jbe 82f
  subq $8, %rdi
  movq %rax, (%rdi)
  jmp 81b
82:
  .endm

  # The general registers neither trampoline passes anything in (the
  # arguments, the entry and %rax each clears or sets itself).
  .macro threechains_clear_general
  xorl %ecx, %ecx
  xorl %r8d, %r8d
  xorl %r9d, %r9d
  xorl %r11d, %r11d
  xorl %ebx, %ebx
  xorl %ebp, %ebp
  xorl %r12d, %r12d
  xorl %r13d, %r13d
  xorl %r14d, %r14d
  xorl %r15d, %r15d
  .endm

  # Every vector and mask register the CPU has; uses %eax.
  .macro threechains_clear_vectors
  movzbl threechains_window_vector_level(%rip), %eax
  testl %eax, %eax
  jnz 83f
  pxor %xmm0, %xmm0
  pxor %xmm1, %xmm1
  pxor %xmm2, %xmm2
  pxor %xmm3, %xmm3
  pxor %xmm4, %xmm4
  pxor %xmm5, %xmm5
  pxor %xmm6, %xmm6
  pxor %xmm7, %xmm7
  pxor %xmm8, %xmm8
  pxor %xmm9, %xmm9
  pxor %xmm10, %xmm10
  pxor %xmm11, %xmm11
  pxor %xmm12, %xmm12
  pxor %xmm13, %xmm13
  pxor %xmm14, %xmm14
  pxor %xmm15, %xmm15
  jmp 85f
83:
  vpxor %xmm0, %xmm0, %xmm0
  vpxor %xmm1, %xmm1, %xmm1
  vpxor %xmm2, %xmm2, %xmm2
  vpxor %xmm3, %xmm3, %xmm3
  vpxor %xmm4, %xmm4, %xmm4
  vpxor %xmm5, %xmm5, %xmm5
  vpxor %xmm6, %xmm6, %xmm6
  vpxor %xmm7, %xmm7, %xmm7
  vpxor %xmm8, %xmm8, %xmm8
  vpxor %xmm9, %xmm9, %xmm9
  vpxor %xmm10, %xmm10, %xmm10
  vpxor %xmm11, %xmm11, %xmm11
  vpxor %xmm12, %xmm12, %xmm12
  vpxor %xmm13, %xmm13, %xmm13
  vpxor %xmm14, %xmm14, %xmm14
  vpxor %xmm15, %xmm15, %xmm15
  cmpl $2, %eax
  jb 85f
  vpxord %xmm16, %xmm16, %xmm16
  vpxord %xmm17, %xmm17, %xmm17
  vpxord %xmm18, %xmm18, %xmm18
  vpxord %xmm19, %xmm19, %xmm19
  vpxord %xmm20, %xmm20, %xmm20
  vpxord %xmm21, %xmm21, %xmm21
  vpxord %xmm22, %xmm22, %xmm22
  vpxord %xmm23, %xmm23, %xmm23
  vpxord %xmm24, %xmm24, %xmm24
  vpxord %xmm25, %xmm25, %xmm25
  vpxord %xmm26, %xmm26, %xmm26
  vpxord %xmm27, %xmm27, %xmm27
  vpxord %xmm28, %xmm28, %xmm28
  vpxord %xmm29, %xmm29, %xmm29
  vpxord %xmm30, %xmm30, %xmm30
  vpxord %xmm31, %xmm31, %xmm31
  kxorw %k0, %k0, %k0
  kxorw %k1, %k1, %k1
  kxorw %k2, %k2, %k2
  kxorw %k3, %k3, %k3
  kxorw %k4, %k4, %k4
  kxorw %k5, %k5, %k5
  kxorw %k6, %k6, %k6
  kxorw %k7, %k7, %k7
85:
  .endm

  .text
  .p2align 4
  .globl threechains_call_window_code
  .hidden threechains_call_window_code
  .type threechains_call_window_code, @function
threechains_call_window_code:
  .cfi_startproc
  threechains_save_host
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  testq %r9, %r9
  jz 0f
  movq %rsp, (%r9)
0:
  movq %rdi, %r10
  movq %rdx, %r9
  movq %rcx, %r11
  leaq -8(%rsp), %rdi
  threechains_zero_stack
  movq %r9, %rdi
  movq %r11, %rsi
  movq %r8, %rdx
  threechains_clear_general
  threechains_clear_vectors
  xorl %eax, %eax
  callq *%r10
  .globl threechains_window_resume
  .hidden threechains_window_resume
threechains_window_resume:
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  threechains_restore_host_and_return
  .cfi_endproc
  .size threechains_call_window_code, .-threechains_call_window_code

  .p2align 4
  .globl threechains_run_window_calls
  .hidden threechains_run_window_calls
  .type threechains_run_window_calls, @function
threechains_run_window_calls:
  .cfi_startproc
  threechains_save_host
  subq $40, %rsp
  .cfi_adjust_cfa_offset 40
  movq %rdi, (%rsp)
  movq %rdx, 8(%rsp)
  movq %rcx, 16(%rsp)
  movq %r8, 24(%rsp)
  movq %rsi, 32(%rsp)
  testq %r9, %r9
  jz 0f
  movq %rsp, (%r9)
0:
  xorl %eax, %eax
  xorl %edx, %edx
  xorl %esi, %esi
  xorl %edi, %edi
  xorl %r10d, %r10d
  threechains_clear_general
  threechains_clear_vectors
1:
  movq 8(%rsp), %rax
  cmpq 16(%rsp), %rax
  jae 3f
  leaq -8(%rsp), %rdi
  movq 32(%rsp), %rsi
  threechains_zero_stack
  movq 8(%rsp), %rax
  movq (%rax), %rdi
  movq 8(%rax), %rsi
  movq 16(%rax), %rdx
  addq $32, %rax
  movq %rax, 8(%rsp)
  movq 24(%rsp), %rcx
  testq %rcx, %rcx
  jz 2f
  movq 24(%rcx), %rax
  incq %rax
  movq %rax, 24(%rcx)
  movq %rax, (%rcx)
2:
  xorl %eax, %eax
  xorl %ecx, %ecx
  callq *(%rsp)
  movq 8(%rsp), %rcx
  movq %rax, -8(%rcx)
  jmp 1b
3:
  .globl threechains_window_run_resume
  .hidden threechains_window_run_resume
threechains_window_run_resume:
  addq $40, %rsp
  .cfi_adjust_cfa_offset -40
  threechains_restore_host_and_return
  .cfi_endproc
  .size threechains_run_window_calls, .-threechains_run_window_calls
)");
#elif defined(__aarch64__)
// The same two ways in for aarch64, each with the window's base as its
// last argument: x19-x30 and d8-d15 are kept here; the stack the code can
// reach ([sp - stack_bytes, sp): a call leaves the return address in x30,
// not on the stack) is zeroed; x21 gets the window's base, which the shaped
// code adds to every offset and never writes (confine/verify_aarch64.hpp);
// every other general register but the arguments and every vector register
// is cleared (in a run once, before the first call; between calls only the
// trampoline's own, x9-x11; the reachable stack before each call). A
// run's entry, next call, end, watch and stack bytes lie above the code's
// frames, at [sp, #160]. SVE's and SME's state beyond the
// vector registers' low 128 bits is not cleared: the verifier accepts no
// instruction that reads it.
extern "C" uint64_t threechains_call_window_code(uint64_t entry, uint64_t stack_bytes, uint64_t a0,
                                                 uint64_t a1, uint64_t a2, uintptr_t* resume_stack,
                                                 const std::byte* base);
extern "C" void threechains_run_window_calls(uint64_t entry, uint64_t stack_bytes, void* calls,
                                             void* end, void* watch, uintptr_t* resume_stack,
                                             const std::byte* base);
extern "C" char threechains_window_resume[];
extern "C" char threechains_window_run_resume[];
asm(R"(
  .macro threechains_save_host frame
  stp x29, x30, [sp, #-\frame]!
  .cfi_def_cfa_offset \frame
  .cfi_offset x29, -\frame
  .cfi_offset x30, -\frame+8
  stp x19, x20, [sp, #16]
  stp x21, x22, [sp, #32]
  stp x23, x24, [sp, #48]
  stp x25, x26, [sp, #64]
  stp x27, x28, [sp, #80]
  stp d8, d9, [sp, #96]
  stp d10, d11, [sp, #112]
  stp d12, d13, [sp, #128]
  stp d14, d15, [sp, #144]
  .cfi_offset x19, -\frame+16
  .cfi_offset x20, -\frame+24
  .cfi_offset x21, -\frame+32
  .cfi_offset x22, -\frame+40
  .cfi_offset x23, -\frame+48
  .cfi_offset x24, -\frame+56
  .cfi_offset x25, -\frame+64
  .cfi_offset x26, -\frame+72
  .cfi_offset x27, -\frame+80
  .cfi_offset x28, -\frame+88
  .endm

  .macro threechains_restore_host_and_return frame
  ldp d14, d15, [sp, #144]
  ldp d12, d13, [sp, #128]
  ldp d10, d11, [sp, #112]
  ldp d8, d9, [sp, #96]
  ldp x27, x28, [sp, #80]
  ldp x25, x26, [sp, #64]
  ldp x23, x24, [sp, #48]
  ldp x21, x22, [sp, #32]
  ldp x19, x20, [sp, #16]
  ldp x29, x30, [sp], #\frame
  .cfi_def_cfa_offset 0
  ret
  .endm

  # Zeroes [sp - x1, sp); uses x9 and x10.
  .macro threechains_zero_stack
  mov x9, sp
  sub x10, x9, x1
81:
  cmp x9, x10
  b.ls 82f
  str xzr, [x9, #-8]!
  b 81b
82:
  .endm

  # The general registers neither trampoline passes anything in (x0-x2
  # and x16, the entry, each sets or clears itself; x21 is the base; x30
  # the call sets).
  .macro threechains_clear_general
  mov x3, xzr
  mov x4, xzr
  mov x5, xzr
  mov x6, xzr
  mov x7, xzr
  mov x8, xzr
  mov x9, xzr
  mov x10, xzr
  mov x11, xzr
  mov x12, xzr
  mov x13, xzr
  mov x14, xzr
  mov x15, xzr
  mov x17, xzr
  mov x18, xzr
  mov x19, xzr
  mov x20, xzr
  mov x22, xzr
  mov x23, xzr
  mov x24, xzr
  mov x25, xzr
  mov x26, xzr
  mov x27, xzr
  mov x28, xzr
  mov x29, xzr
  .endm

  .macro threechains_clear_vectors
  movi v0.2d, #0
  movi v1.2d, #0
  movi v2.2d, #0
  movi v3.2d, #0
  movi v4.2d, #0
  movi v5.2d, #0
  movi v6.2d, #0
  movi v7.2d, #0
  movi v8.2d, #0
  movi v9.2d, #0
  movi v10.2d, #0
  movi v11.2d, #0
  movi v12.2d, #0
  movi v13.2d, #0
  movi v14.2d, #0
  movi v15.2d, #0
  movi v16.2d, #0
  movi v17.2d, #0
  movi v18.2d, #0
  movi v19.2d, #0
  movi v20.2d, #0
  movi v21.2d, #0
  movi v22.2d, #0
  movi v23.2d, #0
  movi v24.2d, #0
  movi v25.2d, #0
  movi v26.2d, #0
  movi v27.2d, #0
  movi v28.2d, #0
  movi v29.2d, #0
  movi v30.2d, #0
  movi v31.2d, #0
  .endm

  .text
  .p2align 4
  .globl threechains_call_window_code
  .hidden threechains_call_window_code
  .type threechains_call_window_code, %function
threechains_call_window_code:
  .cfi_startproc
  threechains_save_host 160
  cbz x5, 0f
  mov x9, sp
  str x9, [x5]
0:
  threechains_zero_stack
  mov x16, x0
  mov x21, x6
  mov x0, x2
  mov x1, x3
  mov x2, x4
  threechains_clear_general
  threechains_clear_vectors
  blr x16
  .globl threechains_window_resume
  .hidden threechains_window_resume
threechains_window_resume:
  threechains_restore_host_and_return 160
  .cfi_endproc
  .size threechains_call_window_code, .-threechains_call_window_code

  .p2align 4
  .globl threechains_run_window_calls
  .hidden threechains_run_window_calls
  .type threechains_run_window_calls, %function
threechains_run_window_calls:
  .cfi_startproc
  threechains_save_host 208
  stp x0, x2, [sp, #160]
  stp x3, x4, [sp, #176]
  str x1, [sp, #192]
  cbz x5, 0f
  mov x9, sp
  str x9, [x5]
0:
  mov x21, x6
  mov x0, xzr
  mov x1, xzr
  mov x2, xzr
  mov x16, xzr
  threechains_clear_general
  threechains_clear_vectors
1:
  ldp x9, x10, [sp, #168]
  cmp x9, x10
  b.hs 3f
  ldr x1, [sp, #192]
  threechains_zero_stack
  ldr x9, [sp, #168]
  ldp x0, x1, [x9]
  ldr x2, [x9, #16]
  add x9, x9, #32
  str x9, [sp, #168]
  ldr x10, [sp, #184]
  cbz x10, 2f
  ldr x11, [x10, #24]
  add x11, x11, #1
  str x11, [x10, #24]
  str x11, [x10]
2:
  ldr x16, [sp, #160]
  mov x9, xzr
  mov x10, xzr
  mov x11, xzr
  blr x16
  ldr x9, [sp, #168]
  stur x0, [x9, #-8]
  b 1b
3:
  .globl threechains_window_run_resume
  .hidden threechains_window_run_resume
threechains_window_run_resume:
  threechains_restore_host_and_return 208
  .cfi_endproc
  .size threechains_run_window_calls, .-threechains_run_window_calls
)");
#endif

namespace threechains::confined {
namespace {

// Where the trampoline keeps its next call in its frame, from the stack
// pointer at a call (its assembly above).
#if defined(__aarch64__)
constexpr uintptr_t kNextCallInFrame = 168;
#else
constexpr uintptr_t kNextCallInFrame = 8;
#endif

struct ActiveRun {
  const Window* window;
  // run_window_code's and run_window_calls': %rsp at the trampoline's
  // call, where a trap resumes
  // (0 for run_in_window, whose traps jump back through `jump`), and
  // whether one did.
  uintptr_t resume_stack = 0;
  volatile bool trapped = false;
  // run_window_calls': set for a run of calls, and the trampoline's next
  // call when one trapped (the one after the trapped one).
  bool run_of_calls = false;
  const WindowCall* next_call = nullptr;
  // __builtin_setjmp's buffer: the frame, stack pointer and resume address
  // only (the compiler saves what else is live around the call itself), a
  // few stores where setjmp saves every callee-saved register through a PLT
  // call (threechains-bench-window: 9.0 -> 7.2-7.5 ns a trapped call).
  void* jump[5];
};

// The run on this thread, and its trap: thread-locals the handler (which
// runs on the faulting thread) reads and writes; not locals of
// run_in_window, whose values after a longjmp would be indeterminate.
[[gnu::tls_model("initial-exec")]] thread_local ActiveRun* active = nullptr;
[[gnu::tls_model("initial-exec")]] thread_local WindowTrap last_trap{};

// SIGTRAP: aarch64's brk (llvm.trap's lowering there) raises it; x86's
// verifier refuses int3, so there it is never window code's.
constexpr std::array<int, 5> kSignals = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP};
std::array<struct sigaction, kSignals.size()> previous{};

bool was_write(const void* context) noexcept {
#if defined(__x86_64__)
  // The page fault's error code: bit 1 set for a write.
  const auto* uc = static_cast<const ucontext_t*>(context);
  return uc != nullptr && (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#elif defined(__aarch64__)
  // The fault's syndrome, in the ESR record of the signal frame: WnR (bit
  // 6) set for a write. A kernel (or emulator) that gives none: a load.
  const auto* uc = static_cast<const ucontext_t*>(context);
  if (uc == nullptr) return false;
  const auto* at = reinterpret_cast<const unsigned char*>(uc->uc_mcontext.__reserved);
  const unsigned char* const end = at + sizeof(uc->uc_mcontext.__reserved);
  while (at + sizeof(_aarch64_ctx) <= end) {
    const auto* record = reinterpret_cast<const _aarch64_ctx*>(at);
    if (record->magic == 0 || record->size < sizeof(_aarch64_ctx)) break;
    if (record->magic == ESR_MAGIC)
      return ((reinterpret_cast<const esr_context*>(record)->esr >> 6) & 1) != 0;
    at += record->size;
  }
  return false;
#else
  (void)context;
  return false;
#endif
}

uintptr_t instruction_address(const void* context) noexcept {
  if (context == nullptr) return 0;
  const auto* uc = static_cast<const ucontext_t*>(context);
#if defined(__x86_64__)
  return static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return static_cast<uintptr_t>(uc->uc_mcontext.pc);
#else
  return 0;
#endif
}

// The trap this fault is for the run on this thread, if it is one.
std::optional<WindowTrap> trap_for(const ActiveRun& run, int signal, const siginfo_t* info,
                                   const void* context) noexcept {
  const auto base = reinterpret_cast<uintptr_t>(run.window->base());
  const bool memory_fault = signal == SIGSEGV || signal == SIGBUS;
  const auto address = reinterpret_cast<uintptr_t>(info != nullptr ? info->si_addr : nullptr);
  if (memory_fault && run.window->reaches(address))
    return WindowTrap{static_cast<int64_t>(address - base), was_write(context),
                      WindowFault::access};
  const uintptr_t at = instruction_address(context);
  if (at == 0 || !run.window->reaches(at)) return std::nullopt;
  // A page fault names its address (SEGV_MAPERR, SEGV_ACCERR); a #GP (a
  // non-canonical address, a misaligned aligned access) names none.
  const bool page_fault = signal == SIGSEGV && info != nullptr &&
                          (info->si_code == SEGV_MAPERR || info->si_code == SEGV_ACCERR);
  const WindowFault fault = signal == SIGILL || signal == SIGTRAP ? WindowFault::illegal
                            : signal == SIGFPE                    ? WindowFault::arithmetic
                            : page_fault                          ? WindowFault::outside
                                                                  : WindowFault::general;
  return WindowTrap{static_cast<int64_t>(at - base), false, fault};
}

// The kernel runs a handler with the floating-point state reset (MXCSR
// 0x1f80, x87 control word 0x37f), and leaving by longjmp, not sigreturn,
// would keep that: a host that runs with flush-to-zero or another rounding
// mode would lose it to any trap. Back to the state of the code that
// faulted, which the verifier lets change only MXCSR's status flags.
void restore_floating_point(const void* context) noexcept {
#if defined(__x86_64__)
  const auto* uc = static_cast<const ucontext_t*>(context);
  if (uc == nullptr || uc->uc_mcontext.fpregs == nullptr) return;
  const uint32_t mxcsr = uc->uc_mcontext.fpregs->mxcsr;
  const uint16_t control = uc->uc_mcontext.fpregs->cwd;
  asm volatile("ldmxcsr %0" : : "m"(mxcsr));
  asm volatile("fldcw %0" : : "m"(control));
#else
  (void)context;
#endif
}

// Ends the run active on this thread with `trap`: back to run_in_window,
// every frame since abandoned.
[[noreturn]] void abandon_run(ActiveRun& run, const WindowTrap& trap) noexcept {
  last_trap = trap;
  active = nullptr;
  detail::before_abandoning_frames();
  __builtin_longjmp(run.jump, 1);
}

// Room kept below the code's frames for the kernel's signal frame (about
// 3.5 KiB with AVX-512 state) and the trap handler's own frames: a trap
// with less died of SIGSEGV in an attacker's test.
constexpr uint64_t kSignalRoom = 32 * 1024;

// The lowest address of this thread's stack above its guard, read once
// per thread; the top of the address space where it cannot be read, so
// that no window code runs on a stack of unknown size.
[[gnu::tls_model("initial-exec")]] thread_local uintptr_t stack_floor = 0;
[[gnu::noinline, gnu::cold]] uintptr_t read_stack_floor() noexcept {
  stack_floor = UINTPTR_MAX;
  pthread_attr_t attributes;
  if (pthread_getattr_np(pthread_self(), &attributes) != 0) return stack_floor;
  void* lowest = nullptr;
  std::size_t size = 0;
  std::size_t guard = 0;
  if (pthread_attr_getstack(&attributes, &lowest, &size) == 0 &&
      pthread_attr_getguardsize(&attributes, &guard) == 0)
    stack_floor = reinterpret_cast<uintptr_t>(lowest) + guard;
  pthread_attr_destroy(&attributes);
  return stack_floor;
}
uintptr_t stack_low() noexcept {
  return stack_floor != 0 ? stack_floor : read_stack_floor();
}

// This thread's stack pointer (not __builtin_frame_address: no frame to
// set up for it).
[[gnu::always_inline]] inline uintptr_t stack_pointer() noexcept {
  uintptr_t here = 0;
#if defined(__x86_64__)
  asm("movq %%rsp, %0" : "=r"(here));
#elif defined(__aarch64__)
  asm("mov %0, sp" : "=r"(here));
#endif
  return here;
}

// The trampoline's assembly reads a call's fields, and writes the watch's,
// at the offsets asserted here.
static_assert(sizeof(WindowCall) == 32 && offsetof(WindowCall, a0) == 0 &&
              offsetof(WindowCall, a1) == 8 && offsetof(WindowCall, a2) == 16 &&
              offsetof(WindowCall, result) == 24);
static_assert(offsetof(Watch, running) == 0 && offsetof(Watch, serial) == 24 &&
              sizeof(std::atomic<uint64_t>) == 8);

// Into the trampolines: on x86-64 the window's base is the thread's %gs
// base already (GsBase), on aarch64 the trampoline puts it in x21.
[[gnu::always_inline]] inline uint64_t enter_window_code(const WindowCode& code, uint64_t a0,
                                                         uint64_t a1, uint64_t a2,
                                                         uintptr_t* resume_stack,
                                                         const Window& window) noexcept {
#if defined(__x86_64__)
  (void)window;
  return threechains_call_window_code(reinterpret_cast<uint64_t>(code.entry), code.stack_bytes, a0,
                                      a1, a2, resume_stack);
#elif defined(__aarch64__)
  return threechains_call_window_code(reinterpret_cast<uint64_t>(code.entry), code.stack_bytes, a0,
                                      a1, a2, resume_stack, window.base());
#else
  (void)resume_stack;
  (void)window;
  return reinterpret_cast<uint64_t (*)(uint64_t, uint64_t, uint64_t)>(code.entry)(a0, a1, a2);
#endif
}
[[gnu::always_inline]] inline void enter_window_calls(const WindowCode& code,
                                                      std::span<WindowCall> calls, Watch* watch,
                                                      uintptr_t* resume_stack,
                                                      const Window& window) noexcept {
#if defined(__x86_64__)
  (void)window;
  threechains_run_window_calls(reinterpret_cast<uint64_t>(code.entry), code.stack_bytes,
                               calls.data(), calls.data() + calls.size(), watch, resume_stack);
#elif defined(__aarch64__)
  threechains_run_window_calls(reinterpret_cast<uint64_t>(code.entry), code.stack_bytes,
                               calls.data(), calls.data() + calls.size(), watch, resume_stack,
                               window.base());
#else
  (void)code;
  (void)calls;
  (void)watch;
  (void)resume_stack;
  (void)window;  // no window tier here: run_window_calls is not built
#endif
}

// call_window_code's way out, kept out of its body (which then saves no
// register of its own): no run to trap back to is a bug of the caller; too
// little stack is a trap of the run.
[[noreturn, gnu::noinline, gnu::cold]] void refuse_call() noexcept {
  ActiveRun* const run = active;
  if (run == nullptr) std::abort();  // window code runs only where its faults are traps
  abandon_run(*run, WindowTrap{0, false, WindowFault::stack});
}

// A trap of run_window_code or run_window_calls: the code's call returns,
// at its trampoline's resume point with the stack it had there; returning from the handler
// lets the kernel put back the signal mask and the floating-point state of
// the code that was stopped, so nothing is left as the handler had it.
void resume_after(ActiveRun& run, const WindowTrap& trap, void* context) noexcept {
  last_trap = trap;
  // A run's trampoline frame, suspended in a call: at resume_stack, above
  // the code's frames and the signal's.
  if (run.run_of_calls)
    run.next_call =
        *reinterpret_cast<const WindowCall* const*>(run.resume_stack + kNextCallInFrame);
  run.trapped = true;
  active = nullptr;
  auto* uc = static_cast<ucontext_t*>(context);
  const char* const resume =
      run.run_of_calls ? &threechains_window_run_resume[0] : &threechains_window_resume[0];
#if defined(__x86_64__)
  uc->uc_mcontext.gregs[REG_RSP] = static_cast<greg_t>(run.resume_stack);
  uc->uc_mcontext.gregs[REG_RIP] = reinterpret_cast<greg_t>(resume);
#elif defined(__aarch64__)
  uc->uc_mcontext.sp = run.resume_stack;
  uc->uc_mcontext.pc = reinterpret_cast<uintptr_t>(resume);
#else
  (void)resume;
  (void)uc;
#endif
}

void on_fault(int signal, siginfo_t* info, void* context) {
  ActiveRun* const run = active;
  const std::optional<WindowTrap> trap =
      run != nullptr ? trap_for(*run, signal, info, context) : std::nullopt;
  if (trap && run->resume_stack != 0) {
    resume_after(*run, *trap, context);
    return;
  }
  if (trap) {
    // The kernel blocked the signal for this handler (and a handler that
    // chained to us may have blocked more): leaving by longjmp would keep
    // them blocked, and the next trap would end the process. Back to the
    // mask of the code that faulted.
    if (context != nullptr) {
      pthread_sigmask(SIG_SETMASK, &static_cast<const ucontext_t*>(context)->uc_sigmask, nullptr);
    } else {
      sigset_t faults;
      sigemptyset(&faults);
      for (const int s : kSignals) sigaddset(&faults, s);
      pthread_sigmask(SIG_UNBLOCK, &faults, nullptr);
    }
    restore_floating_point(context);
    abandon_run(*run, *trap);
  }
  std::size_t k = 0;
  while (k < kSignals.size() && kSignals[k] != signal) ++k;
  detail::pass_to_previous(previous[k], signal, info, context);
}

struct sigaction previous_time {};

// The watchdog's signal (window_watchdog.hpp). It stops the run only if
// the invocation it was sent for is still under way and the thread is in
// window code: in the trampoline, or just after the run, it does nothing,
// and the watchdog sends it again while the invocation lasts.
void on_time(int signal, siginfo_t* info, void* context) {
  const bool from_watchdog =
      info != nullptr && info->si_code == SI_TKILL && info->si_pid == getpid();
  if (!from_watchdog) {
    detail::pass_to_previous(previous_time, signal, info, context);
    return;
  }
  ActiveRun* const run = active;
  const Watch* const watch = ThreadWatch::if_any();
  if (run == nullptr || run->resume_stack == 0 || watch == nullptr || context == nullptr) return;
  const uint64_t running = watch->running.load(std::memory_order_relaxed);
  if (running == 0 || watch->stop.load(std::memory_order_relaxed) != running) return;
  const uintptr_t at = instruction_address(context);
  if (!run->window->reaches(at)) return;
  const auto base = reinterpret_cast<uintptr_t>(run->window->base());
  resume_after(*run, WindowTrap{static_cast<int64_t>(at - base), false, WindowFault::time},
               context);
}

void install_time_trap() noexcept {
  struct sigaction now {};
  sigaction(watchdog_signal(), nullptr, &now);
  if ((now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == &on_time) return;
  struct sigaction ours {};
  ours.sa_sigaction = &on_time;
  ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&ours.sa_mask);
  sigaction(watchdog_signal(), &ours, &previous_time);
}

}  // namespace

void install_window_traps() noexcept {
  for (std::size_t k = 0; k < kSignals.size(); ++k) {
    struct sigaction now {};
    sigaction(kSignals[k], nullptr, &now);
    // Already on top: installing again would make it its own previous.
    if ((now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == &on_fault) continue;
    struct sigaction ours {};
    ours.sa_sigaction = &on_fault;
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&ours.sa_mask);
    sigaction(kSignals[k], &ours, &previous[k]);
  }
  install_time_trap();
}

std::optional<WindowTrap> run_in_window(const Window& window, void (*function)(void*),
                                        void* argument) noexcept {
  static const bool installed = (install_window_traps(), true);
  (void)installed;
  if (active != nullptr) return WindowTrap{INT64_MIN, false};
#if defined(__x86_64__)
  GsBase::use(window.base());  // the code addresses this window, whatever ran before
#endif
  ActiveRun run;  // its jump buffer uninitialised: zeroing setjmp's 200 bytes cost ~10 ns
  run.window = &window;
  active = &run;
  if (__builtin_setjmp(run.jump) == 0) {
    function(argument);
    active = nullptr;
    return std::nullopt;
  }
  return last_trap;
}

#if defined(__x86_64__) || defined(__aarch64__)
namespace {
// What run_window_code and run_window_calls do around their trampoline
// (`enter`, given the run and its watch), inlined into each: a call between
// them cost a one-call run about 1.7 ns (threechains-bench-window).
template <typename Enter>
[[gnu::always_inline]] inline std::optional<WindowTrap> run_watched(const Window& window,
                                                                    const WindowCode& code,
                                                                    std::chrono::nanoseconds budget,
                                                                    bool run_of_calls,
                                                                    Enter&& enter) noexcept {
  static const bool installed = (install_window_traps(), true);
  (void)installed;
  if (active != nullptr) return WindowTrap{INT64_MIN, false};
  const uintptr_t here = stack_pointer();
  const uintptr_t low = stack_low();
  if (here < low || here - low < kSignalRoom || here - low - kSignalRoom < code.stack_bytes)
    return WindowTrap{0, false, WindowFault::stack};
#if defined(__x86_64__)
  GsBase::use(window.base());
#endif
  ActiveRun run;
  run.window = &window;
  run.run_of_calls = run_of_calls;
  const WatchedRun watched(budget);
  active = &run;
  enter(run, watched.watch());
  if (run.trapped) return last_trap;  // the handler cleared `active`
  active = nullptr;
  return std::nullopt;
}
}  // namespace

std::optional<WindowTrap> run_window_calls(const Window& window, const WindowCode& code,
                                           std::span<WindowCall> calls, std::size_t& returned,
                                           std::chrono::nanoseconds budget) noexcept {
  // None, unless the trampoline ran: a run refused before it (too little
  // stack, a run already active) made no call (helper-21: counting from
  // the end then reported all but one as returned).
  returned = 0;
  if (calls.empty()) return std::nullopt;
  return run_watched(window, code, budget, true, [&](ActiveRun& run, Watch* watch) {
    enter_window_calls(code, calls, watch, &run.resume_stack, window);
    // On a trap the trampoline had moved past the call it was making.
    returned =
        run.trapped ? static_cast<std::size_t>(run.next_call - calls.data()) - 1 : calls.size();
  });
}

std::optional<WindowTrap> run_window_code(const Window& window, const WindowCode& code,
                                          uint64_t& result, uint64_t a0, uint64_t a1, uint64_t a2,
                                          std::chrono::nanoseconds budget) noexcept {
  return run_watched(window, code, budget, false, [&](ActiveRun& run, Watch*) {
    result = enter_window_code(code, a0, a1, a2, &run.resume_stack, window);
  });
}
#endif

uint64_t call_window_code(const WindowCode& code, uint64_t a0, uint64_t a1, uint64_t a2) noexcept {
  const uintptr_t here = stack_pointer();
  const uintptr_t low = stack_low();
  if (active == nullptr || here < low || here - low < kSignalRoom ||
      here - low - kSignalRoom < code.stack_bytes)
    refuse_call();
  return enter_window_code(code, a0, a1, a2, nullptr, *active->window);
}

}  // namespace threechains::confined
