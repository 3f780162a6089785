// What confined_compile.hpp says. The same steps, in the same order, as the
// JIT's own load of bitcode (JitCache::Impl::link, jit_cache_linking.cpp),
// with confinement's two passes around the host optimiser.
#include "jit/confined_compile.hpp"

#include "confine/pass.hpp"
#include "confine/runtime.hpp"
#include "jit/bitcode_checks.hpp"
#include "jit/host_description.hpp"
#include "jit/host_optimiser.hpp"

#include <threechains/error.hpp>
#include <threechains/import_policy.hpp>

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/SubtargetFeature.h>
#include <llvm/Transforms/Utils/Cloning.h>

namespace threechains {

struct ConfinedCompiler::Machines {
  std::unique_ptr<HostOptimiser> optimiser;
  std::unique_ptr<llvm::TargetMachine> codegen;
};

namespace {
std::string message_of(llvm::Error error) {
  return llvm::toString(std::move(error));
}
}  // namespace

ConfinedCompiler::ConfinedCompiler(const Options& options)
    : options_(options), machines_(std::make_unique<Machines>()) {
  auto host = describe_host(options.codegen_level);
  if (!host)
    throw Error(errc::jit_failed,
                "cannot describe this host to LLVM: " + message_of(host.takeError()));
  // aarch64 window code keeps x21 for the window's base and uses no SVE
  // (confine/pass.hpp): so must the optimiser, whose vectors the shape and
  // the verifier take, and the checked code compiled beside it.
  if (options.window_shape && host->getTargetTriple().isAArch64())
    host->addFeatures(llvm::SubtargetFeatures(kAarch64WindowFeatures).getFeatures());
  auto optimiser_machine = host->createTargetMachine();
  if (!optimiser_machine)
    throw Error(errc::jit_failed,
                "cannot describe this host to LLVM: " + message_of(optimiser_machine.takeError()));
  auto codegen_machine = host->createTargetMachine();
  if (!codegen_machine)
    throw Error(errc::jit_failed,
                "cannot describe this host to LLVM: " + message_of(codegen_machine.takeError()));
  // Confined code calls the confined runtime's imports only (confine/screen.cpp
  // renames them); the optimiser must not write a call to anything else.
  LibraryCalls calls =
      library_calls((*optimiser_machine)->getTargetTriple(),
                    [](std::string_view name) { return confined::is_confined_import(name); });
  machines_->optimiser = std::make_unique<HostOptimiser>(
      std::move(*optimiser_machine), options.optimisation_level, std::move(calls));
  machines_->codegen = std::move(*codegen_machine);
}

ConfinedCompiler::~ConfinedCompiler() = default;

std::vector<std::byte> ConfinedCompiler::compile(std::span<const std::byte> bitcode,
                                                 const std::string& name) {
  llvm::LLVMContext context;
  // An error diagnostic (a backend that cannot honour what the IR asks)
  // would otherwise end the process: it becomes the refusal.
  std::string diagnosed;
  context.setDiagnosticHandlerCallBack(
      [](const llvm::DiagnosticInfo* info, void* out) {
        if (info->getSeverity() != llvm::DS_Error) return;
        llvm::raw_string_ostream stream(*static_cast<std::string*>(out));
        llvm::DiagnosticPrinterRawOStream printer(stream);
        info->print(printer);
      },
      &diagnosed);
  const llvm::StringRef bytes(reinterpret_cast<const char*>(bitcode.data()), bitcode.size());
  auto module = llvm::parseBitcodeFile(llvm::MemoryBufferRef(bytes, name), context);
  if (!module) {
    throw Error(errc::bad_container,
                "ifunc '" + name + "': bad bitcode: " + message_of(module.takeError()));
  }
  // Confined code never gets the unrestricted policy's pass: whatever the
  // target allows trusted code, inline assembly and kin are refused here.
  check_bitcode(**module, name, ImportPolicy{});
  screen_for_confinement(**module, name, options_.max_global_bytes);
  (void)machines_->optimiser->run(**module);
  // After the optimiser: no pass after this one sees the code before its
  // checks, so none can reason them away.
  std::unique_ptr<llvm::Module> shaped;
  if (options_.window_shape) {
    // Shaped on a copy: what the shape refuses (an import, recursion)
    // takes the checked pass instead.
    shaped = llvm::CloneModule(**module);
    try {
      shape_for_window(*shaped, name);
    } catch (const Error& e) {
      if (e.code() != errc::import_refused) throw;
      shaped.reset();
    }
  }
  llvm::orc::SimpleCompiler compiler(*machines_->codegen);
  if (shaped) {
    // What the shape made that the code generator reports it cannot
    // compile (an error, not a crash) takes the checked pass too, as code
    // the shape refused would: not a refusal of code the checked tier runs.
    auto object = compiler(*shaped);
    if (object && diagnosed.empty()) {
      const auto* data = reinterpret_cast<const std::byte*>((*object)->getBufferStart());
      return {data, data + (*object)->getBufferSize()};
    }
    if (!object) llvm::consumeError(object.takeError());
    diagnosed.clear();
    shaped.reset();
  }
  confine_module(**module, name);
  auto object = compiler(**module);
  if (!object) {
    throw Error(errc::jit_failed, "ifunc '" + name + "': " + message_of(object.takeError()));
  }
  if (!diagnosed.empty()) throw Error(errc::jit_failed, "ifunc '" + name + "': " + diagnosed);
  const auto* data = reinterpret_cast<const std::byte*>((*object)->getBufferStart());
  return {data, data + (*object)->getBufferSize()};
}

}  // namespace threechains
