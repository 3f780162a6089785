// GDB's JIT interface and perf's jitdump for JIT'd ifuncs, through ORC's
// plugins. ORC's perf registrar keeps one jitdump file per process in a
// global (LLVM's JITLoaderPerf.cpp): a second "start" would replace the file
// and the first "end" would close it under every other cache. So this file
// owns the process's perf session, shared by every JitCache that asks for it,
// and hands ORC's plugin start/end calls that do nothing.
#include "jit/jit_observers.hpp"

#include <threechains/error.hpp>
#include <threechains/jit_cache.hpp>

#include <llvm/ExecutionEngine/Orc/Debugging/DebuggerSupport.h>
#include <llvm/ExecutionEngine/Orc/Debugging/PerfSupportPlugin.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/Orc/SelfExecutorProcessControl.h>
#include <llvm/ExecutionEngine/Orc/Shared/WrapperFunctionUtils.h>
#include <llvm/ExecutionEngine/Orc/TargetProcess/JITLoaderPerf.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace threechains::jit {
namespace {

bool environment_says_yes(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, "0") != 0 && value[0] != '\0';
}

std::string message_of(llvm::Error error) {
  return llvm::toString(std::move(error));
}

// ORC's plugin calls these where it would start and end the process's
// session; the session is ours (PerfSession).
llvm::orc::shared::CWrapperFunctionBuffer perf_session_kept_elsewhere(const char* data,
                                                                      std::size_t size) {
  using llvm::orc::shared::SPSError;
  return llvm::orc::shared::WrapperFunction<SPSError()>::handle(
             data, size, [] { return llvm::Error::success(); })
      .release();
}

// Runs one of ORC's in-process perf registrar calls that take no arguments.
using PerfCall = llvm::orc::shared::CWrapperFunctionBuffer (*)(const char*, std::size_t);
llvm::Error run_perf_call(PerfCall call) {
  llvm::orc::shared::WrapperFunctionCall wrapped(llvm::orc::ExecutorAddr::fromPtr(call), {});
  return wrapped.runWithSPSRetErrorMerged();
}

// The process's one jitdump file and the one ORC plugin that writes it, for
// every cache: one plugin, so code indexes (perf inject names a function's
// file jitted-<pid>-<index>.so) never repeat across caches. The plugin gets
// an ExecutionSession of its own (it reports errors through one), so it does
// not depend on the first cache that asked living longest. Opened by the
// first cache that asks, closed when the last one goes; a failure to open is
// remembered, not retried by every cache (each try leaves a directory).
class PerfSession {
 public:
  static PerfSession& instance() {
    static PerfSession session;  // never destroyed before the caches: they hold shares
    return session;
  }

  // Takes a share; opens the file if this is the first. The plugin to add to
  // a linking layer, or why there is none.
  llvm::Expected<std::shared_ptr<llvm::orc::PerfSupportPlugin>> acquire() {
    const std::lock_guard lock(mutex_);
    if (!failure_.empty()) return llvm::createStringError(failure_);
    if (users_ == 0) {
      if (llvm::Error error = open()) {
        failure_ = llvm::toString(std::move(error));
        return llvm::createStringError(failure_);
      }
    }
    ++users_;
    return plugin_;
  }

  // Gives a share back; the last closes the file (with perf's close record).
  // Every linking layer holding the plugin is gone by then (Observers).
  void release() noexcept {
    const std::lock_guard lock(mutex_);
    if (users_ == 0 || --users_ != 0) return;
    plugin_.reset();
    if (llvm::Error error = run_perf_call(&llvm_orc_registerJITLoaderPerfEnd))
      llvm::consumeError(std::move(error));  // nothing to do about it at this point
    if (llvm::Error error = session_->endSession()) llvm::consumeError(std::move(error));
    session_.reset();
  }

 private:
  llvm::Error open() {
    auto control = llvm::orc::SelfExecutorProcessControl::Create();
    if (!control) return control.takeError();
    if (llvm::Error error = run_perf_call(&llvm_orc_registerJITLoaderPerfStart)) return error;
    session_ = std::make_unique<llvm::orc::ExecutionSession>(std::move(*control));
    const auto ours = llvm::orc::ExecutorAddr::fromPtr(&perf_session_kept_elsewhere);
    // Code load records only: ORC's unwind records print a debug line on
    // every object, and its line tables need a DWARF context per link.
    // (Static functions keep their names: FunctionTable's plugin.)
    plugin_ = std::make_shared<llvm::orc::PerfSupportPlugin>(
        session_->getExecutorProcessControl(), ours, ours,
        llvm::orc::ExecutorAddr::fromPtr(&llvm_orc_registerJITLoaderPerfImpl),
        /*EmitDebugInfo=*/false, /*EmitUnwindInfo=*/false);
    return llvm::Error::success();
  }

  std::mutex mutex_;
  std::size_t users_ = 0;
  std::string failure_;
  std::unique_ptr<llvm::orc::ExecutionSession> session_;  // the plugin's
  std::shared_ptr<llvm::orc::PerfSupportPlugin> plugin_;  // shared with every layer
};

// Asked for by the environment: a failure is worth a line, once, not the target.
void warn_once(std::once_flag& once, const std::string& message) {
  std::call_once(once, [&] { std::fprintf(stderr, "threechains: %s\n", message.c_str()); });
}

std::once_flag debugger_warning;
std::once_flag perf_warning;

}  // namespace

ObserverRequest observers_requested(const JitOptions& options) {
  ObserverRequest request{.debugger = options.debugger_support, .perf = options.perf_support};
  if (!request.debugger && environment_says_yes("THREECHAINS_JIT_DEBUG")) {
    request.debugger = true;
    request.debugger_from_environment = true;
  }
  if (!request.perf && environment_says_yes("THREECHAINS_JIT_PERF")) {
    request.perf = true;
    request.perf_from_environment = true;
  }
  return request;
}

Observers::Observers() = default;

Observers::~Observers() {
  if (holds_perf_session_) PerfSession::instance().release();
}

Observers::Observers(Observers&& other) noexcept
    : holds_perf_session_(std::exchange(other.holds_perf_session_, false)) {}

Observers& Observers::operator=(Observers&& other) noexcept {
  if (this != &other) {
    if (holds_perf_session_) PerfSession::instance().release();
    holds_perf_session_ = std::exchange(other.holds_perf_session_, false);
  }
  return *this;
}

Observers attach_observers(llvm::orc::LLJIT& jit, const ObserverRequest& request) {
  Observers observers;
  const auto fail = [&](bool from_environment, std::once_flag& once, const std::string& message) {
    if (!from_environment) throw Error(errc::jit_failed, message);
    warn_once(once, message + " (going on without it)");
  };
  if (request.debugger) {
    // ORC registers each linked object (a copy, with its sections' load
    // addresses) through __jit_debug_register_code, which gdb watches.
    if (llvm::Error error = llvm::orc::enableDebuggerSupport(jit)) {
      fail(request.debugger_from_environment, debugger_warning,
           "cannot register JIT'd code with debuggers: " + message_of(std::move(error)));
    }
  }
  if (request.perf) {
    auto* layer = llvm::dyn_cast<llvm::orc::ObjectLinkingLayer>(&jit.getObjLinkingLayer());
    if (layer == nullptr) {
      fail(request.perf_from_environment, perf_warning,
           "cannot write a perf jitdump: the JIT does not link with JITLink");
    } else {
      auto plugin = PerfSession::instance().acquire();
      if (!plugin) {
        fail(request.perf_from_environment, perf_warning,
             "cannot write a perf jitdump (JITDUMPDIR, or ~/.debug/jit): " +
                 message_of(plugin.takeError()));
      } else {
        observers.holds_perf_session_ = true;
        layer->addPlugin(std::move(*plugin));
      }
    }
  }
  return observers;
}

}  // namespace threechains::jit
