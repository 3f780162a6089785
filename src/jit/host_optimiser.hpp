// What the target does to shipped bitcode before code generation: point every
// function at this host's CPU (where that is sound), then run LLVM's
// new-pass-manager pipeline with this host's TargetMachine, so the
// vectorisers and cost models see the host's vector width instead of the
// generic CPU the source's clang compiled for. The pipeline may turn one
// library call into another (printf("hi\n") into puts, a loop into strlen,
// pow(x, 0.5) into sqrt); it is told which library functions this target
// would bind, so that it never writes a call the target then refuses.
#pragma once

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace threechains {

// How a module's code was fitted to the host.
enum class HostFit {
  specialised,  // compiled for this host's CPU and features
  as_shipped,   // kept the CPU the source chose: its interface passes wide vectors
};

// Whether a call to the C library function `name` would bind where the code
// runs (the import policy's answer).
using CallsBinding = std::function<bool(std::string_view name)>;

// The library functions an optimised module may call: the platform's for
// `triple`, less those `binds` says would not bind. Made once and shared
// (read only, by any thread): with the JIT's policy it asks the process about
// each of LLVM's ~530 library functions, 2.6-2.9 ms on the 2-core machine.
using LibraryCalls = std::shared_ptr<const llvm::TargetLibraryInfoImpl>;
[[nodiscard]] LibraryCalls library_calls(const llvm::Triple& triple, const CallsBinding& binds);

class HostOptimiser {
 public:
  // `machine` describes this host (CPU name and features); `level` is the
  // middle-end pipeline: 0 none (code generation only), 1..3 O1..O3;
  // `calls`, the library functions it may call (null: all the platform's).
  HostOptimiser(std::unique_ptr<llvm::TargetMachine> machine, int level,
                LibraryCalls calls = nullptr);
  ~HostOptimiser();
  HostOptimiser(const HostOptimiser&) = delete;
  HostOptimiser& operator=(const HostOptimiser&) = delete;

  // Retargets and optimises `module` in place.
  HostFit run(llvm::Module& module) const;

 private:
  std::unique_ptr<llvm::TargetMachine> machine_;
  int level_;
  LibraryCalls library_;  // null: the platform's
};

}  // namespace threechains
