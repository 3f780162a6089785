#include "jit/background_compiler.hpp"

#include "jit/bitcode_checks.hpp"
#include "jit/host_optimiser.hpp"

#include <threechains/error.hpp>

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>


namespace threechains {

BackgroundCompiler::BackgroundCompiler(llvm::orc::JITTargetMachineBuilder host,
                                       int optimisation_level, ImportPolicy policy,
                                       LibraryCalls calls, const ObjectStore* store,
                                       detail::HelperCpus cpus)
    : host_(std::move(host)),
      optimisation_level_(optimisation_level),
      policy_(std::move(policy)),
      calls_(std::move(calls)),
      store_(store),
      thread_(
          "tc-tier1", [this](Job& job) { return compile_and_store(job); }, cpus) {}

BackgroundCompiler::Result BackgroundCompiler::compile_and_store(Job& job) {
  Result result = compile(job);
  if (result.error.empty() && result.stays_at_tier0.empty() && !job.store_key.empty() &&
      store_ != nullptr)
    (void)store_->store(job.store_key, result.object);
  return result;
}

BackgroundCompiler::Result BackgroundCompiler::compile(Job& job) {
  Result result{job.serial, job.id, {}, {}};
  try {
    // A TargetMachine per compile: LLVM's are not shared between threads, and
    // building one costs little next to the compile.
    auto optimiser_machine = host_.createTargetMachine();
    auto codegen_machine = host_.createTargetMachine();
    if (!optimiser_machine || !codegen_machine) {
      std::string why;
      if (!optimiser_machine) why = llvm::toString(optimiser_machine.takeError());
      if (!codegen_machine) why += llvm::toString(codegen_machine.takeError());
      result.error = "cannot describe this host to LLVM: " + why;
      return result;
    }
    llvm::LLVMContext context;
    const llvm::StringRef bytes(reinterpret_cast<const char*>(job.image.bytes.data()),
                                job.image.bytes.size());
    auto module = llvm::parseBitcodeFile(llvm::MemoryBufferRef(bytes, job.image.name), context);
    if (!module) {
      result.error = "bad bitcode: " + llvm::toString(module.takeError());
      return result;
    }
    check_bitcode(**module, job.image.name, policy_);
    // Tier 1 links into a JITDylib of its own: writable globals (a static
    // counter, a lazily built table, thread-local state) would start afresh
    // there while tier 0's copies hold what the calls so far did. Such code
    // stays at tier 0; constant data is fine.
    for (const llvm::GlobalVariable& global : (*module)->globals()) {
      if (global.isDeclaration() || (global.isConstant() && !global.isThreadLocal())) continue;
      result.stays_at_tier0 = "it defines writable global '" + global.getName().str() +
                              "' (tier 1 would start with a fresh copy)";
      return result;
    }
    const HostOptimiser optimiser(std::move(*optimiser_machine), optimisation_level_, calls_);
    (void)optimiser.run(**module);
    llvm::orc::SimpleCompiler compiler(**codegen_machine);
    auto object = compiler(**module);
    if (!object) {
      result.error = llvm::toString(object.takeError());
      return result;
    }
    const auto* data = reinterpret_cast<const std::byte*>((*object)->getBufferStart());
    result.object.assign(data, data + (*object)->getBufferSize());
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  return result;
}

}  // namespace threechains
