// What the target does to shipped bitcode before code generation: point every
// function at this host's CPU (where that is sound), then run LLVM's
// new-pass-manager pipeline with this host's TargetMachine, so the
// vectorisers and cost models see the host's vector width instead of the
// generic CPU the source's clang compiled for.
#pragma once

#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include <memory>
#include <string>

namespace threechains {

// How a module's code was fitted to the host.
enum class HostFit {
  specialised,  // compiled for this host's CPU and features
  as_shipped,   // kept the CPU the source chose: its interface passes wide vectors
};

class HostOptimiser {
 public:
  // `machine` describes this host (CPU name and features); `level` is the
  // middle-end pipeline: 0 none (code generation only), 1..3 O1..O3.
  HostOptimiser(std::unique_ptr<llvm::TargetMachine> machine, int level);
  ~HostOptimiser();
  HostOptimiser(const HostOptimiser&) = delete;
  HostOptimiser& operator=(const HostOptimiser&) = delete;

  // Retargets and optimises `module` in place.
  HostFit run(llvm::Module& module) const;

 private:
  std::unique_ptr<llvm::TargetMachine> machine_;
  int level_;
};

}  // namespace threechains
