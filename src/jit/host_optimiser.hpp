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

class HostOptimiser {
 public:
  // Whether a call to the C library function `name` would bind where the
  // code runs (the import policy's answer). Empty: LLVM's own idea of the
  // platform's library, all of it.
  using CallsBinding = std::function<bool(std::string_view name)>;

  // `machine` describes this host (CPU name and features); `level` is the
  // middle-end pipeline: 0 none (code generation only), 1..3 O1..O3.
  HostOptimiser(std::unique_ptr<llvm::TargetMachine> machine, int level,
                const CallsBinding& binds = {});
  ~HostOptimiser();
  HostOptimiser(const HostOptimiser&) = delete;
  HostOptimiser& operator=(const HostOptimiser&) = delete;

  // Retargets and optimises `module` in place.
  HostFit run(llvm::Module& module) const;

 private:
  std::unique_ptr<llvm::TargetMachine> machine_;
  int level_;
  // The library functions the pipeline may call, made once: the platform's,
  // less those that would not bind. Null: the platform's.
  std::unique_ptr<llvm::TargetLibraryInfoImpl> library_;
};

}  // namespace threechains
