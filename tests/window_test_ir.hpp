// What the window tests share (test_window.cpp, test_verify_x86.cpp,
// test_verify_aarch64.cpp): IR parsed for a test, and the kernels they
// compile.
#pragma once

#include <catch2/catch.hpp>

#include <llvm/AsmParser/Parser.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>

#include <memory>
#include <string>
#include <vector>

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

// saxpy (vectorised, the window tests' own), a pointer chase, a global counter and a table read
// (%rip-relative), and a call the optimiser keeps.
inline const std::string kKernels = std::string(window_tests::kSaxpy) + R"(
@count = global i64 0
@table = constant [4 x i64] [i64 10, i64 20, i64 30, i64 40]
define ptr @chase(ptr %p, i64 %steps) {
entry:
  br label %loop
loop:
  %at = phi ptr [ %p, %entry ], [ %next, %loop ]
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %next = load ptr, ptr %at
  %i.next = add i64 %i, 1
  %end = icmp eq i64 %i.next, %steps
  br i1 %end, label %done, label %loop
done:
  ret ptr %next
}
define i64 @bump() {
  %v = load i64, ptr @count
  %n = add i64 %v, 1
  store i64 %n, ptr @count
  ret i64 %n
}
define i64 @pick(i64 %i) {
  %p = getelementptr [4 x i64], ptr @table, i64 0, i64 %i
  %v = load i64, ptr %p
  ret i64 %v
}
define internal i64 @twice(ptr %p) noinline {
  %v = load i64, ptr %p
  %w = add i64 %v, %v
  store i64 %w, ptr %p
  ret i64 %w
}
define i64 @call_twice(ptr %p) {
  %a = call i64 @twice(ptr %p)
  %b = call i64 @twice(ptr %p)
  %s = add i64 %a, %b
  ret i64 %s
}
define i32 @pick_case(i32 %x) {
entry:
  switch i32 %x, label %none [
    i32 0, label %a
    i32 1, label %b
    i32 2, label %c
    i32 3, label %d
    i32 4, label %e
  ]
a:
  ret i32 11
b:
  ret i32 22
c:
  ret i32 33
d:
  ret i32 44
e:
  ret i32 55
none:
  unreachable
}
)";
inline const std::vector<const char*> kEntries = {"saxpy", "chase",      "bump",
                                                  "pick",  "call_twice", "pick_case"};

}  // namespace window_tests
