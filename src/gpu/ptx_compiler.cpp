// NVPTX bitcode to PTX with LLVM's NVPTX back end (docs/gpu.md).
#include "gpu/ptx_compiler.hpp"

#include <threechains/error.hpp>

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/CallingConv.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/TargetParser/Triple.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

extern "C" void LLVMInitializeNVPTXTargetInfo();
extern "C" void LLVMInitializeNVPTXTarget();
extern "C" void LLVMInitializeNVPTXTargetMC();
extern "C" void LLVMInitializeNVPTXAsmPrinter();

namespace threechains::gpu {
namespace {

std::string message_of(llvm::Error error) {
  std::string text;
  llvm::handleAllErrors(std::move(error),
                        [&](const llvm::ErrorInfoBase& info) { text += info.message(); });
  return text;
}

std::string where(const ParsedImage& image) {
  return "GPU ifunc '" + image.name + "' (" + image.triple + ")";
}

// What the image leaves to the target: libdevice's __nv_* functions may be
// linked in, LLVM intrinsics are the back end's; anything else is refused:
// there is no process on the GPU to resolve it against.
bool check_imports(const llvm::Module& module, const ParsedImage& image) {
  bool needs_libdevice = false;
  std::string refused;
  for (const llvm::Function& f : module) {
    if (!f.isDeclaration() || f.isIntrinsic()) continue;
    if (f.getName().starts_with("__nv_")) {
      needs_libdevice = true;
      continue;
    }
    refused += (refused.empty() ? "'" : ", '") + f.getName().str() + "'";
  }
  for (const llvm::GlobalVariable& g : module.globals()) {
    if (g.isDeclaration()) refused += (refused.empty() ? "'" : ", '") + g.getName().str() + "'";
  }
  if (!refused.empty()) {
    throw Error(errc::import_refused,
                where(image) + " imports " + refused +
                    ": GPU code may call libdevice's __nv_* functions and nothing else (use "
                    "__nv_sqrtf or __builtin_sqrtf, not sqrtf)");
  }
  return needs_libdevice;
}

void link_libdevice(llvm::Module& module, const ParsedImage& image, const std::string& path) {
  if (path.empty()) {
    throw Error(errc::dependency_not_found,
                where(image) +
                    " calls libdevice (__nv_* functions), and this target has no "
                    "libdevice.10.bc (install CUDA, or name it in GpuOptions::libdevice)");
  }
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) {
    throw Error(errc::dependency_not_found,
                "libdevice '" + path + "': " + buffer.getError().message());
  }
  auto library = llvm::parseBitcodeFile((*buffer)->getMemBufferRef(), module.getContext());
  if (!library) {
    throw Error(errc::dependency_not_found,
                "libdevice '" + path + "': " + message_of(library.takeError()));
  }
  (*library)->setTargetTriple(module.getTargetTriple());
  (*library)->setDataLayout(module.getDataLayout());
  if (llvm::Linker::linkModules(module, std::move(*library), llvm::Linker::LinkOnlyNeeded)) {
    throw Error(errc::jit_failed, where(image) + ": linking libdevice '" + path + "' failed");
  }
  // libdevice's functions are the kernel's own now: internal, so the
  // optimiser inlines them and drops the unused. Its __nvvm_reflect calls
  // ask whether to flush denormals: no (CUDA's default without -ftz).
  for (llvm::Function& f : module) {
    if (!f.isDeclaration() && f.getName().starts_with("__nv_"))
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
  }
  module.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t{0});
}

llvm::OptimizationLevel pipeline(int level) {
  switch (level) {
    case 1:
      return llvm::OptimizationLevel::O1;
    case 2:
      return llvm::OptimizationLevel::O2;
    default:
      return llvm::OptimizationLevel::O3;
  }
}

}  // namespace

Ptx compile_ptx(const ParsedImage& image, const PtxOptions& options) {
  static std::once_flag initialised;
  std::call_once(initialised, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  if (image.kind != CodecId::bitcode)
    throw Error(errc::bad_container, where(image) + " is not bitcode");
  llvm::LLVMContext context;
  const llvm::MemoryBufferRef bytes(
      llvm::StringRef(reinterpret_cast<const char*>(image.bytes.data()), image.bytes.size()),
      image.name);
  auto parsed = llvm::parseBitcodeFile(bytes, context);
  if (!parsed)
    throw Error(errc::bad_container, where(image) + ": " + message_of(parsed.takeError()));
  std::unique_ptr<llvm::Module> module = std::move(*parsed);
  const llvm::Triple triple = module->getTargetTriple();
  if (triple.getArch() != llvm::Triple::nvptx64) {
    throw Error(errc::bad_container,
                where(image) + ": its bitcode is for '" + triple.str() + "', not NVPTX (nvptx64)");
  }
  if (llvm::verifyModule(*module, &llvm::nulls()))
    throw Error(errc::bad_container, where(image) + ": its bitcode does not verify");
  Ptx ptx;
  ptx.entry = image.name + "_main";
  const llvm::Function* entry = module->getFunction(ptx.entry);
  if (entry == nullptr || entry->isDeclaration()) {
    throw Error(errc::symbol_not_found,
                where(image) + ": its image defines no '" + ptx.entry + "'");
  }
  if (entry->getCallingConv() != llvm::CallingConv::PTX_Kernel) {
    throw Error(errc::symbol_not_found,
                where(image) + ": '" + ptx.entry +
                    "' is not a kernel (declare it THREECHAINS_GPU_KERNEL, <threechains/ifunc.h>)");
  }
  // The launch passes (payload pointer, 64-bit size, region table pointer).
  const llvm::FunctionType* type = entry->getFunctionType();
  if (!type->getReturnType()->isVoidTy() || type->getNumParams() != 3 ||
      !type->getParamType(0)->isPointerTy() || !type->getParamType(1)->isIntegerTy(64) ||
      !type->getParamType(2)->isPointerTy()) {
    throw Error(errc::symbol_not_found,
                where(image) + ": '" + ptx.entry +
                    "' is not void(void *payload, size_t payload_size, const "
                    "threechains_device_regions *regions)");
  }
  if (check_imports(*module, image)) link_libdevice(*module, image, options.libdevice);

  std::string lookup_error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, lookup_error);
  if (target == nullptr) throw Error(errc::jit_failed, where(image) + ": " + lookup_error);
  // No features: LLVM then writes the oldest PTX ISA the architecture allows,
  // which the oldest driver that knows the GPU can load.
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      triple, options.arch, "", llvm::TargetOptions(), std::nullopt, std::nullopt,
      options.optimisation_level == 0 ? llvm::CodeGenOptLevel::None
                                      : llvm::CodeGenOptLevel::Aggressive));
  if (machine == nullptr)
    throw Error(errc::jit_failed, where(image) + ": no NVPTX target machine for " + options.arch);
  module->setDataLayout(machine->createDataLayout());
  // The image was compiled for no GPU in particular (clang's default
  // features): every function is compiled for this one.
  for (llvm::Function& f : *module) {
    f.removeFnAttr("target-cpu");
    f.removeFnAttr("target-features");
    if (!f.isDeclaration()) f.addFnAttr("target-cpu", options.arch);
  }

  if (options.optimisation_level > 0) {
    llvm::LoopAnalysisManager loops;
    llvm::FunctionAnalysisManager functions;
    llvm::CGSCCAnalysisManager sccs;
    llvm::ModuleAnalysisManager modules;
    llvm::PassBuilder builder(machine.get());
    builder.registerModuleAnalyses(modules);
    builder.registerCGSCCAnalyses(sccs);
    builder.registerFunctionAnalyses(functions);
    builder.registerLoopAnalyses(loops);
    builder.crossRegisterProxies(loops, functions, sccs, modules);
    llvm::ModulePassManager passes =
        builder.buildPerModuleDefaultPipeline(pipeline(options.optimisation_level));
    passes.run(*module, modules);
  }

  llvm::SmallString<0> text;
  llvm::raw_svector_ostream out(text);
  llvm::legacy::PassManager codegen;
  if (machine->addPassesToEmitFile(codegen, out, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
    throw Error(errc::jit_failed, where(image) + ": the NVPTX back end cannot emit PTX");
  }
  codegen.run(*module);
  ptx.text.assign(text.data(), text.size());
  return ptx;
}

std::string find_libdevice() {
  std::vector<std::filesystem::path> roots;
  if (const char* home = std::getenv("CUDA_HOME")) roots.emplace_back(home);
  if (const char* home = std::getenv("CUDA_PATH")) roots.emplace_back(home);
  roots.emplace_back("/usr/local/cuda");
  roots.emplace_back("/usr/lib/nvidia-cuda-toolkit");
  for (const std::filesystem::path& root : roots) {
    for (const char* sub : {"nvvm/libdevice/libdevice.10.bc", "libdevice/libdevice.10.bc"}) {
      std::error_code ignored;
      const std::filesystem::path candidate = root / sub;
      if (std::filesystem::is_regular_file(candidate, ignored)) return candidate.string();
    }
  }
  return {};
}

}  // namespace threechains::gpu
