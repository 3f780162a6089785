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
#include <llvm/ExecutionEngine/Orc/Shared/WrapperFunctionUtils.h>
#include <llvm/ExecutionEngine/Orc/TargetProcess/JITLoaderPerf.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

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

// The jitdump file ORC opened: it maps the file (perf finds it by that
// mapping), so /proc/self/maps names it.
std::string mapped_jitdump() {
  std::ifstream maps("/proc/self/maps");
  const std::string suffix = "/jit-" + std::to_string(getpid()) + ".dump";
  std::string line;
  while (std::getline(maps, line)) {
    const std::size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.size() > suffix.size() && path.ends_with(suffix)) return path;
  }
  return {};
}

// The process's one jitdump file, opened by the first cache that asks and
// closed (with perf's close record) when the last one goes.
class PerfSession {
 public:
  static PerfSession& instance() {
    static PerfSession session;  // never destroyed before the caches: they hold shares
    return session;
  }

  // Takes a share; opens the file if this is the first. An error says why not.
  llvm::Error acquire() {
    const std::lock_guard lock(mutex_);
    if (users_ == 0) {
      if (llvm::Error error = run_perf_call(&llvm_orc_registerJITLoaderPerfStart)) return error;
      path_ = mapped_jitdump();
    }
    ++users_;
    return llvm::Error::success();
  }

  void release() noexcept {
    const std::lock_guard lock(mutex_);
    if (users_ == 0 || --users_ != 0) return;
    if (llvm::Error error = run_perf_call(&llvm_orc_registerJITLoaderPerfEnd))
      llvm::consumeError(std::move(error));  // nothing to do about it at this point
    path_.clear();
  }

  std::string path() {
    const std::lock_guard lock(mutex_);
    return path_;
  }

 private:
  std::mutex mutex_;
  std::size_t users_ = 0;
  std::string path_;
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
    request.from_environment = true;
  }
  if (!request.perf && environment_says_yes("THREECHAINS_JIT_PERF")) {
    request.perf = true;
    request.from_environment = true;
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

std::string Observers::jitdump_path() {
  return PerfSession::instance().path();
}

Observers attach_observers(llvm::orc::LLJIT& jit, const ObserverRequest& request) {
  Observers observers;
  const auto fail = [&](std::once_flag& once, const std::string& message) {
    if (!request.from_environment) throw Error(errc::jit_failed, message);
    warn_once(once, message + " (going on without it)");
  };
  if (request.debugger) {
    // ORC registers each linked object (a copy, with its sections' load
    // addresses) through __jit_debug_register_code, which gdb and lldb watch.
    if (llvm::Error error = llvm::orc::enableDebuggerSupport(jit))
      fail(debugger_warning,
           "cannot register JIT'd code with debuggers: " + message_of(std::move(error)));
  }
  if (request.perf) {
    auto* layer = llvm::dyn_cast<llvm::orc::ObjectLinkingLayer>(&jit.getObjLinkingLayer());
    if (layer == nullptr) {
      fail(perf_warning, "cannot write a perf jitdump: the JIT does not link with JITLink");
    } else if (llvm::Error error = PerfSession::instance().acquire()) {
      fail(perf_warning, "cannot write a perf jitdump (JITDUMPDIR, or ~/.debug/jit): " +
                             message_of(std::move(error)));
    } else {
      observers.holds_perf_session_ = true;
      const auto ours = llvm::orc::ExecutorAddr::fromPtr(&perf_session_kept_elsewhere);
      // Code load records only: ORC's unwind records print a debug line on
      // every object, and its line tables need a DWARF context per link.
      // (Static functions keep their names: FunctionTable's plugin.)
      layer->addPlugin(std::make_unique<llvm::orc::PerfSupportPlugin>(
          jit.getExecutionSession().getExecutorProcessControl(), ours, ours,
          llvm::orc::ExecutorAddr::fromPtr(&llvm_orc_registerJITLoaderPerfImpl),
          /*EmitDebugInfo=*/false, /*EmitUnwindInfo=*/false));
    }
  }
  return observers;
}

}  // namespace threechains::jit
