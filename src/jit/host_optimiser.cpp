// Why retargeting is sound here, and where it is not (docs/design.md, "CPU
// specialisation"): rewriting target-cpu/target-features changes the code a
// function compiles to, and for x86 also how wide vectors are passed (a
// <8 x float> argument goes in a ymm register only with AVX). Functions
// compiled for the triple's baseline are retargeted alike, so calls between
// them agree. Two kinds keep what the source chose:
//  - every function of a module whose interface to code compiled elsewhere
//    (what it imports, what it exports) takes or returns vectors wider than
//    128 bits: that calling convention was fixed by the other side (the
//    IREE finding);
//  - a function the source compiled for features this host lacks (a
//    target("avx512f") variant chosen at run time by a CPU check): compiled
//    as asked, as a native build would be, never quietly stripped of them.
#include "jit/host_optimiser.hpp"

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/PassManager.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/Passes/OptimizationLevel.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/Error.h>

namespace threechains {
namespace {

bool is_wide_vector(const llvm::Type* type) {
  const auto* vector = llvm::dyn_cast<llvm::VectorType>(type);
  return vector != nullptr && vector->getPrimitiveSizeInBits().getKnownMinValue() > 128;
}

// Whether `f` passes or returns a vector wider than 128 bits.
bool passes_wide_vectors(const llvm::Function& f) {
  if (is_wide_vector(f.getReturnType())) return true;
  for (const llvm::Argument& argument : f.args()) {
    if (is_wide_vector(argument.getType())) return true;
  }
  return false;
}

// Whether the module's interface to code compiled elsewhere (what it imports,
// what it exports) depends on vector registers the features decide.
bool interface_depends_on_features(const llvm::Module& module) {
  for (const llvm::Function& f : module) {
    if ((f.isDeclaration() || !f.hasLocalLinkage()) && passes_wide_vectors(f)) return true;
  }
  return false;
}

// The features a function asks for ("+avx2,+fma"), without those it turns off.
std::string required_features(const llvm::Function& f) {
  const llvm::StringRef all = f.getFnAttribute("target-features").getValueAsString();
  std::string wanted;
  llvm::SmallVector<llvm::StringRef, 32> features;
  all.split(features, ',', -1, false);
  for (llvm::StringRef feature : features) {
    if (!feature.starts_with("+")) continue;
    wanted += (wanted.empty() ? "" : ",") + feature.str();
  }
  return wanted;
}

llvm::OptimizationLevel pipeline(int level) {
  switch (level) {
    case 1:
      return llvm::OptimizationLevel::O1;
    case 3:
      return llvm::OptimizationLevel::O3;
    default:
      return llvm::OptimizationLevel::O2;
  }
}

}  // namespace

LibraryCalls library_calls(const llvm::Triple& triple, const CallsBinding& binds) {
  auto calls = std::make_shared<llvm::TargetLibraryInfoImpl>(triple);
  const llvm::TargetLibraryInfo names(*calls);
  for (unsigned i = 0; i < llvm::LibFunc::NumLibFuncs; ++i) {
    const auto function = static_cast<llvm::LibFunc>(i);
    const llvm::StringRef name = names.getName(function);
    if (!name.empty() && !binds(std::string_view(name.data(), name.size())))
      calls->setUnavailable(function);
  }
  return calls;
}

HostOptimiser::HostOptimiser(std::unique_ptr<llvm::TargetMachine> machine, int level,
                             LibraryCalls calls)
    : machine_(std::move(machine)), level_(level), library_(std::move(calls)) {}
HostOptimiser::~HostOptimiser() = default;

HostFit HostOptimiser::run(llvm::Module& module) const {
  HostFit fit = HostFit::as_shipped;
  if (!interface_depends_on_features(module)) {
    const llvm::MCSubtargetInfo& host = *machine_->getMCSubtargetInfo();
    for (llvm::Function& f : module) {
      // checkFeatures applies implied features (+avx2 brings +avx, ...).
      if (const std::string wanted = required_features(f);
          !wanted.empty() && !host.checkFeatures(wanted)) {
        continue;  // needs what this CPU lacks: compiled as the source asked
      }
      // No attribute: the TargetMachine's CPU and features (this host's) apply.
      f.removeFnAttr("target-cpu");
      f.removeFnAttr("target-features");
      f.removeFnAttr("tune-cpu");
    }
    fit = HostFit::specialised;
  }
  module.setTargetTriple(machine_->getTargetTriple());
  module.setDataLayout(machine_->createDataLayout());
  if (level_ <= 0) return fit;

  // The stock new-pass-manager pipeline, with this host's cost models.
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager sccs;
  llvm::ModuleAnalysisManager modules;
  llvm::PassBuilder builder(machine_.get());
  // Registered first, so the builder's default (the whole platform library)
  // is not: a pass that would write a call to an unavailable function
  // leaves the code as it was.
  if (library_) functions.registerPass([this] { return llvm::TargetLibraryAnalysis(*library_); });
  builder.registerModuleAnalyses(modules);
  builder.registerCGSCCAnalyses(sccs);
  builder.registerFunctionAnalyses(functions);
  builder.registerLoopAnalyses(loops);
  builder.crossRegisterProxies(loops, functions, sccs, modules);
  llvm::ModulePassManager passes = builder.buildPerModuleDefaultPipeline(pipeline(level_));
  passes.run(module, modules);
  return fit;
}

}  // namespace threechains
