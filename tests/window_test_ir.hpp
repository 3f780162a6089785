// What the window tests share (test_window.cpp, test_verify_x86.cpp): IR
// parsed for a test, and the kernels they compile.
#pragma once

#include <catch2/catch.hpp>

#include <llvm/AsmParser/Parser.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>

#include <memory>
#include <string>

namespace window_tests {

inline std::unique_ptr<llvm::Module> parse(const char* text, llvm::LLVMContext& context) {
  llvm::SMDiagnostic error;
  std::unique_ptr<llvm::Module> module = llvm::parseAssemblyString(text, error, context);
  if (!module) {
    std::string message;
    llvm::raw_string_ostream out(message);
    error.print("test", out);
    FAIL(message);
  }
  return module;
}

// saxpy as clang writes it before optimising: the host optimiser vectorises it.
inline constexpr const char* kSaxpy = R"(
define void @saxpy(float %a, ptr noalias %x, ptr noalias %y, i64 %n) {
entry:
  %empty = icmp eq i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %xp = getelementptr inbounds float, ptr %x, i64 %i
  %yp = getelementptr inbounds float, ptr %y, i64 %i
  %xv = load float, ptr %xp
  %yv = load float, ptr %yp
  %ax = fmul float %a, %xv
  %s = fadd float %ax, %yv
  store float %s, ptr %yp
  %next = add nuw i64 %i, 1
  %end = icmp eq i64 %next, %n
  br i1 %end, label %done, label %loop
done:
  ret void
}
)";

}  // namespace window_tests
