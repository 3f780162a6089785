; Valid IR that LLVM 22's x86-64 code generator cannot lower: arithmetic on
; ppc_fp128 (PowerPC's double-double) and its conversion to an integer end
; llc with "LLVM ERROR: unsupported library call operation" (an abort). The
; first-line screen lets it through, on purpose: it shows that the compile
; worker, not the screen, is what keeps such code from ending the target.
define void @evil_float_main(ptr %payload, i64 %payload_size, ptr %target_args) {
  %x = load ppc_fp128, ptr %payload, align 16
  %doubled = fadd ppc_fp128 %x, %x
  %whole = fptosi ppc_fp128 %doubled to i64
  store i64 %whole, ptr %target_args, align 8
  ret void
}
