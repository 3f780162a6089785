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

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

namespace threechains {

BackgroundCompiler::BackgroundCompiler(llvm::orc::JITTargetMachineBuilder host,
                                       int optimisation_level, ImportPolicy policy,
                                       LibraryCalls calls, const ObjectStore* store)
    : host_(std::move(host)),
      optimisation_level_(optimisation_level),
      policy_(std::move(policy)),
      calls_(std::move(calls)),
      store_(store),
      thread_([this](const std::stop_token& stop) { run(stop); }) {}

BackgroundCompiler::~BackgroundCompiler() {
  thread_.request_stop();
  wake_.notify_all();
}  // thread_ joins here, before the members it uses go

void BackgroundCompiler::submit(Job job) {
  {
    const std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
}

std::vector<BackgroundCompiler::Result> BackgroundCompiler::take_finished() {
  const std::lock_guard lock(mutex_);
  std::vector<Result> out = std::move(finished_);
  finished_.clear();
  finished_count_.store(0, std::memory_order_release);
  return out;
}

void BackgroundCompiler::run(const std::stop_token& stop) {
  pthread_setname_np(pthread_self(), "tc-tier1");  // for top, perf and gdb
  // Below the dispatch loop: a compile waking up must not preempt the thread
  // that serves frames (or a spinning peer on a shared core). Where cores are
  // idle it runs at full speed; where they spin, it still gets a share.
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      // A stop request ends the thread even with jobs queued (a compile
      // under way finishes first): a destructor must not wait for a queue.
      if (!wake_.wait(lock, stop, [this] { return !jobs_.empty(); }) || stop.stop_requested())
        return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Result result = compile(job);
    if (result.error.empty() && result.stays_at_tier0.empty() && !job.store_key.empty() &&
        store_ != nullptr)
      (void)store_->store(job.store_key, result.object);
    const std::lock_guard lock(mutex_);
    finished_.push_back(std::move(result));
    finished_count_.store(finished_.size(), std::memory_order_release);
  }
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
