#include "load_baselines.hpp"

#include <dlfcn.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/IRTransformLayer.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

double since_us(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

template <class T>
T check(llvm::Expected<T> value, const char* what) {
  if (!value)
    throw std::runtime_error(std::string(what) + ": " + llvm::toString(value.takeError()));
  return std::move(*value);
}

void check(llvm::Error error, const char* what) {
  if (error) throw std::runtime_error(std::string(what) + ": " + llvm::toString(std::move(error)));
}

}  // namespace

DlopenLoader::DlopenLoader(const std::string& shared_object, std::string symbol)
    : copy_((std::filesystem::path("/dev/shm") /
             ("tc-bench-" + std::to_string(::getpid()) + ".so"))
                .string()),
      symbol_(std::move(symbol)) {
  std::filesystem::copy_file(shared_object, copy_,
                             std::filesystem::copy_options::overwrite_existing);
}

DlopenLoader::~DlopenLoader() {
  std::error_code ignored;
  std::filesystem::remove(copy_, ignored);
}

double DlopenLoader::load_us() {
  const auto start = Clock::now();
  void* handle = dlopen(copy_.c_str(), RTLD_NOW | RTLD_LOCAL);
  void* entry = handle != nullptr ? dlsym(handle, symbol_.c_str()) : nullptr;
  const double took = since_us(start);
  if (handle == nullptr || entry == nullptr)
    throw std::runtime_error("dlopen/dlsym of " + copy_ + " failed");
  dlclose(handle);  // the last reference: the next round maps it again
  return took;
}

double dlopen_median_us(const std::string& shared_object, const std::string& symbol, int rounds) {
  DlopenLoader loader(shared_object, symbol);
  std::vector<double> times;
  for (int i = 0; i < rounds; ++i) times.push_back(loader.load_us());
  return median(times);
}

struct StockLljit::Impl {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::unique_ptr<llvm::TargetMachine> machine;
  int count = 0;
};

StockLljit::StockLljit(int optimisation_level) : impl_(std::make_unique<Impl>()) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  impl_->jit = check(llvm::orc::LLJITBuilder().create(), "LLJIT");
  llvm::orc::JITTargetMachineBuilder host =
      check(llvm::orc::JITTargetMachineBuilder::detectHost(), "detectHost");
  impl_->machine = check(host.createTargetMachine(), "TargetMachine");
  if (optimisation_level <= 0) return;
  const llvm::OptimizationLevel level = optimisation_level == 1   ? llvm::OptimizationLevel::O1
                                        : optimisation_level == 3 ? llvm::OptimizationLevel::O3
                                                                  : llvm::OptimizationLevel::O2;
  llvm::TargetMachine* machine = impl_->machine.get();
  impl_->jit->getIRTransformLayer().setTransform(
      [machine, level](llvm::orc::ThreadSafeModule module,
                       llvm::orc::MaterializationResponsibility&)
          -> llvm::Expected<llvm::orc::ThreadSafeModule> {
        module.withModuleDo([&](llvm::Module& m) {
          llvm::LoopAnalysisManager loops;
          llvm::FunctionAnalysisManager functions;
          llvm::CGSCCAnalysisManager sccs;
          llvm::ModuleAnalysisManager modules;
          llvm::PassBuilder builder(machine);
          builder.registerModuleAnalyses(modules);
          builder.registerCGSCCAnalyses(sccs);
          builder.registerFunctionAnalyses(functions);
          builder.registerLoopAnalyses(loops);
          builder.crossRegisterProxies(loops, functions, sccs, modules);
          builder.buildPerModuleDefaultPipeline(level).run(m, modules);
        });
        return std::move(module);
      });
}

StockLljit::~StockLljit() = default;

double StockLljit::load_us(const std::vector<std::byte>& bitcode, const std::string& symbol) {
  llvm::orc::LLJIT& jit = *impl_->jit;
  const llvm::StringRef bytes(reinterpret_cast<const char*>(bitcode.data()), bitcode.size());
  const auto start = Clock::now();
  auto created = jit.createJITDylib("stock-" + std::to_string(impl_->count++));
  if (!created) throw std::runtime_error("createJITDylib: " + llvm::toString(created.takeError()));
  llvm::orc::JITDylib& dylib = *created;
  auto context = std::make_unique<llvm::LLVMContext>();
  auto module = check(llvm::parseBitcodeFile(llvm::MemoryBufferRef(bytes, "stock"), *context),
                      "parseBitcodeFile");
  check(jit.addIRModule(dylib, llvm::orc::ThreadSafeModule(std::move(module), std::move(context))),
        "addIRModule");
  (void)check(jit.lookup(dylib, symbol), "lookup");
  const double us = since_us(start);
  check(jit.getExecutionSession().removeJITDylib(dylib), "removeJITDylib");
  return us;
}

}  // namespace bench
