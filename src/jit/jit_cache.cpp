// JitCache: ORC LLJIT behind a pimpl. One JITDylib + ResourceTracker per ifunc.
#include "jit/background_compiler.hpp"
#include "jit/bitcode_checks.hpp"
#include "confine/runtime.hpp"
#include "jit/compile_worker.hpp"
#include "jit/container_images.hpp"
#include "jit/function_table.hpp"
#include "jit/host_description.hpp"
#include "jit/image_memory.hpp"
#include "jit/host_optimiser.hpp"
#include "jit/jit_observers.hpp"
#include "jit/object_store.hpp"
#include "jit/prelinked_image.hpp"
#include "jit/process_symbols.hpp"

#include <threechains/runtime.h>
#include <threechains/error.hpp>
#include <threechains/jit_cache.hpp>

#include "trust/sodium.hpp"

#include <llvm-c/Core.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/DebugUtils.h>
#include <llvm/ExecutionEngine/Orc/EHFrameRegistrationPlugin.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/MapperJITLinkMemoryManager.h>
#include <llvm/ExecutionEngine/Orc/MemoryMapper.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/Orc/ObjectTransformLayer.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>

#include <dlfcn.h>
#include <link.h>
#include <sodium.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <mutex>
#include <optional>

namespace threechains {
namespace {

std::string message_of(llvm::Error error) {
  return llvm::toString(std::move(error));
}

// What went wrong while loading one ifunc, gathered from every LLVM error the
// load produced (the session's error reporter and the final lookup).
struct LoadFailure {
  errc code = errc::jit_failed;
  std::string message;
  bool needs_native_tls = false;
  std::vector<std::string> refused;  // imports the ImportPolicy turned away somewhere
  std::vector<std::string> missing;  // what the link could not resolve in the end

  // The one place LLVM's errors become ours: classified by their type.
  void absorb(llvm::Error error) {
    llvm::handleAllErrors(
        std::move(error),
        [this](const llvm::orc::SymbolsNotFound& not_found) {
          code = errc::symbol_not_found;
          for (const llvm::orc::SymbolStringPtr& name : not_found.getSymbols()) {
            // Native TLS resolves through the ORC runtime's TLS entry points.
            const llvm::StringRef symbol = *name;
            missing.push_back(symbol.str());
            if (symbol.contains("_TLS") || symbol == "__tls_get_addr") needs_native_tls = true;
          }
          append(not_found.message());
        },
        [this](const llvm::ErrorInfoBase& other) {
          // JITLink refuses native TLS relocations (R_X86_64_TLSGD, ...) by name.
          const std::string text = other.message();
          if (llvm::StringRef(text).contains("TLS")) needs_native_tls = true;
          append(text);
        });
  }

  void append(const std::string& text) { message += (message.empty() ? "" : "; ") + text; }
  [[nodiscard]] bool empty() const noexcept { return message.empty(); }
};

std::string hex_id(CodeId id) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, id >>= 4) s[static_cast<std::size_t>(i)] = digits[id & 0xf];
  return s;
}


}  // namespace

namespace {
// <threechains/runtime.h>: what injected code of any kind may call here.
const std::array<std::pair<const char*, void*>, 6>& public_runtime() {
  static const std::array<std::pair<const char*, void*>, 6> functions{{
      {"threechains_rank", reinterpret_cast<void*>(&threechains_rank)},
      {"threechains_ranks", reinterpret_cast<void*>(&threechains_ranks)},
      {"threechains_origin", reinterpret_cast<void*>(&threechains_origin)},
      {"threechains_send_self", reinterpret_cast<void*>(&threechains_send_self)},
      {"threechains_send_named", reinterpret_cast<void*>(&threechains_send_named)},
      {"threechains_lookup", reinterpret_cast<void*>(&threechains_lookup)},
  }};
  return functions;
}

// <threechains/runtime.h>, as absolute symbols of this process.
std::unique_ptr<llvm::orc::AbsoluteSymbolsMaterializationUnit> runtime_symbols(
    llvm::orc::LLJIT& jit, confined::State* confined_state) {
  const auto callable = llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable;
  const auto entry = [&](void* function) {
    return llvm::orc::ExecutorSymbolDef(llvm::orc::ExecutorAddr::fromPtr(function), callable);
  };
  llvm::orc::SymbolMap symbols;
  for (const auto& [name, address] : public_runtime())
    symbols[jit.mangleAndIntern(name)] = entry(address);
  // What confined code links against: this cache's runner state, the
  // runtime's checks, and the confined imports (confine/screen.cpp renames a
  // confined module's imports to these names; nothing else resolves them).
  for (const confined::Symbol& symbol : confined::runtime_symbols(confined_state)) {
    symbols[jit.mangleAndIntern(symbol.name)] = llvm::orc::ExecutorSymbolDef(
        llvm::orc::ExecutorAddr::fromPtr(symbol.address),
        symbol.callable ? callable : llvm::JITSymbolFlags::Exported);
  }
  return llvm::orc::absoluteSymbols(std::move(symbols));
}
}  // namespace

namespace {
// LLJIT's own object linking layer for in-process JITLink (eh-frames
// registered, so unwinding through JIT'd code works), with one change: code
// memory comes from reserved slabs that are reused after an eviction, not
// from an mmap per load and an munmap per eviction (a fifth of a binary
// ifunc's load, and most of its eviction, in threechains-bench-jit's profile).
llvm::Expected<std::unique_ptr<llvm::orc::ObjectLayer>> object_linking_layer(
    llvm::orc::ExecutionSession& session) {
  constexpr std::size_t kReservation = std::size_t{1} << 20;
  auto memory =
      llvm::orc::MapperJITLinkMemoryManager::CreateWithMapper<llvm::orc::InProcessMemoryMapper>(
          kReservation);
  if (!memory) return memory.takeError();
  auto layer = std::make_unique<llvm::orc::ObjectLinkingLayer>(session, std::move(*memory));
  auto eh_frames = llvm::orc::EHFrameRegistrationPlugin::Create(session);
  if (!eh_frames) return eh_frames.takeError();
  layer->addPlugin(std::move(*eh_frames));
  return layer;
}
}  // namespace

struct JitCache::Impl {
  explicit Impl(const JitOptions& options)
      : policy(options.imports),
        runner(options.confinement),
        workers(CompileWorkers::Settings{options.optimisation_level, options.codegen_level,
                                         options.confinement.max_global_bytes,
                                         options.confinement.compile_time_limit,
                                         options.confinement.compile_memory_limit}) {
    auto builder = describe_host(options.codegen_level);
    if (!builder)
      throw Error(errc::jit_failed,
                  "cannot describe this host to LLVM: " + message_of(builder.takeError()));
    host_builder.emplace(*builder);
    optimisation_level = options.optimisation_level;
    tiering = options.tiering;
    promote_after_calls = options.promote_after_calls;
    if (!options.code_cache_directory.empty()) {
      store.emplace(options.code_cache_directory);
      // Features sorted: the key must not depend on the order LLVM lists them in.
      std::vector<std::string> features = builder->getFeatures().getFeatures();
      std::sort(features.begin(), features.end());
      std::string joined;
      for (const std::string& feature : features) joined += feature + ",";
      unsigned llvm_major = 0;
      unsigned llvm_minor = 0;
      unsigned llvm_patch = 0;
      LLVMGetVersion(&llvm_major, &llvm_minor, &llvm_patch);  // the libLLVM loaded, not the headers
      // kChecks: bump when the bitcode checks or the host pipeline change, so
      // objects compiled under the old rules are not linked under the new.
      constexpr int kChecks = 3;
      host_key = "threechains " THREECHAINS_VERSION_STRING "\nchecks " + std::to_string(kChecks) +
                 "\nllvm-runtime " + std::to_string(llvm_major) + "." + std::to_string(llvm_minor) +
                 "." + std::to_string(llvm_patch) + "\nhost " + builder->getTargetTriple().str() +
                 "\ncpu " + builder->getCPU() + "\nfeatures " + joined +
                 "\nllvm " LLVM_VERSION_STRING "\noptimisation " +
                 std::to_string(options.optimisation_level) + "\ncodegen " +
                 std::to_string(options.codegen_level) + "\nrestricted " +
                 (policy.is_unrestricted() ? "0" : "1") + "\n";
    }
    // The middle end's own TargetMachine, for the same host CPU and features.
    auto optimiser_machine = builder->createTargetMachine();
    if (!optimiser_machine)
      throw Error(errc::jit_failed, "cannot describe this host to LLVM: " +
                                        message_of(optimiser_machine.takeError()));
    calls = library_calls(builder->getTargetTriple(),
                          [this](std::string_view name) { return binds_in_process(policy, name); });
    optimiser = std::make_unique<HostOptimiser>(std::move(*optimiser_machine),
                                                options.optimisation_level, calls);
    // One TargetMachine for the life of the cache (LLJIT's single-threaded
    // compiler owns one), built for this host's CPU name and features. No
    // compile threads: materialisation runs on the thread that looks up,
    // which FunctionTable's lock-free reads rely on.
    // Process symbols reach injected code only through the import policy.
    auto created =
        llvm::orc::LLJITBuilder()
            .setJITTargetMachineBuilder(std::move(*builder))
            .setObjectLinkingLayerCreator(object_linking_layer)
            .setProcessSymbolsJITDylibSetup(
                [this](llvm::orc::LLJIT& j) -> llvm::Expected<llvm::orc::JITDylibSP> {
                  auto& jd = j.getExecutionSession().createBareJITDylib("<Process Symbols>");
                  auto generator = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                      j.getDataLayout().getGlobalPrefix(),
                      [this](const llvm::orc::SymbolStringPtr& name) {
                        return allow_process_symbol(*name);
                      });
                  if (!generator) return generator.takeError();
                  jd.addGenerator(std::move(*generator));
                  // The runtime for injected code is ours: defined by address,
                  // so it resolves however this library was loaded (a dlopen
                  // with RTLD_LOCAL, as Python's ctypes does, hides it from a
                  // search of the process).
                  if (auto error = jd.define(runtime_symbols(j, runner.state())))
                    return std::move(error);
                  return &jd;
                })
            .create();
    if (!created)
      throw Error(errc::jit_failed,
                  "cannot create the ORC JIT: " + message_of(created.takeError()));
    jit = std::move(*created);
    if (auto* layer = llvm::dyn_cast<llvm::orc::ObjectLinkingLayer>(&jit->getObjLinkingLayer()))
      functions.watch(*layer);
    observers = jit::attach_observers(*jit, jit::observers_requested(options));
    triple = jit->getTargetTriple().str();
    if (!options.dump_objects_to.empty()) dumper.emplace(options.dump_objects_to);
    if (dumper || store) {
      // Every object the JIT links passes here: dumped as it is linked (tests
      // disassemble them), and kept while a compile for the store runs.
      jit->getObjTransformLayer().setTransform(
          [this](std::unique_ptr<llvm::MemoryBuffer> object)
              -> llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> {
            if (capturing) {
              const auto* data = reinterpret_cast<const std::byte*>(object->getBufferStart());
              captured.assign(data, data + object->getBufferSize());
              ++captured_objects;
            }
            if (dumper) return (*dumper)(std::move(object));
            return std::move(object);
          });
    }
    // Linking errors (e.g. "Symbols not found: [ foo ]") reach the session's
    // error reporter, not the failed lookup; keep them for the error we throw.
    jit->getExecutionSession().setErrorReporter(
        [this](llvm::Error error) { failure.absorb(std::move(error)); });
  }

  ~Impl() {
    compiler.reset();  // its thread first: it reads the store
    for (auto& [id, tiers] : dylibs) {
      for (llvm::orc::JITDylib* dylib : tiers) {
        if (llvm::Error e = jit->getExecutionSession().removeJITDylib(*dylib))
          llvm::consumeError(std::move(e));
      }
    }
    // Before the members its error reporter and generators write to (failure, policy).
    jit.reset();
  }

  // Whether injected code may import `name` from this process: by name, or
  // because an allowed library defines it. A refusal is remembered so the
  // load's error names the symbol (a symbol the process lacks is just missing).
  bool allow_process_symbol(llvm::StringRef name) {
    return allow_binding(name.str(), dlsym(RTLD_DEFAULT, name.str().c_str()));
  }

  // Whether `symbol` may be bound to `address` (what the generator at hand
  // would bind): allowed by name, or defined by an allowed object.
  bool allow_binding(const std::string& symbol, const void* address) {
    if (policy.allows_symbol(symbol)) return true;
    const link_map* object = object_defining(address);
    if (object == nullptr) return false;  // not there at all: missing, not refused
    if (policy.allows_object(object->l_name)) return true;
    if (std::find(failure.refused.begin(), failure.refused.end(), symbol) == failure.refused.end())
      failure.refused.push_back(symbol);
    return false;
  }

  // A dependency library becomes a JITDylib of its own, shared by every ifunc
  // that names it. Only what the library itself defines resolves there: dlsym
  // on a library also finds what its own dependencies (libc) define, which
  // must go through the policy like any process symbol.
  llvm::orc::JITDylib& dependency(const std::string& library, const std::string& ifunc) {
    const DependencyObject object = dependency_object(library, ifunc);  // the policy first
    if (const auto known = dependencies.find(library); known != dependencies.end())
      return *known->second;
    auto generator = std::make_unique<llvm::orc::DynamicLibrarySearchGenerator>(
        object.library, jit->getDataLayout().getGlobalPrefix(),
        [this, object](const llvm::orc::SymbolStringPtr& name) {
          const std::string symbol = (*name).str();
          return allow_from(object, symbol, dlsym(object.handle, symbol.c_str()));
        });
    auto& jd = jit->getExecutionSession().createBareJITDylib("dependency:" + library);
    jd.addGenerator(std::move(generator));
    dependencies.emplace(library, &jd);
    return jd;
  }

  // A dependency library, loaded for good: LLVM's handle (what its generator
  // searches) and ours, with its link_map to tell its own symbols from those
  // of its dependencies.
  struct DependencyObject {
    llvm::sys::DynamicLibrary library;
    void* handle = nullptr;
    const link_map* self = nullptr;
  };

  // Whether `symbol`, found at `address` by a search of `object`, may bind:
  // the library's own symbols may; what its dependencies (libc) define goes
  // through the policy like any process symbol.
  bool allow_from(const DependencyObject& object, const std::string& symbol, const void* address) {
    if (address != nullptr && object_defining(address) == object.self) return true;
    return allow_binding(symbol, address);
  }

  const DependencyObject& dependency_object(const std::string& library, const std::string& ifunc) {
    // The policy first, and our own table: a container must not name another
    // JITDylib of this session (another ifunc's, the platform's) as a "library".
    if (!policy.allows_dependency(library)) {
      throw Error(errc::import_refused,
                  "ifunc '" + ifunc + "' needs library '" + library +
                      "', which this target's ImportPolicy does not allow (allow_library)");
    }
    if (const auto known = dependency_objects.find(library); known != dependency_objects.end())
      return known->second;
    std::string why;
    const auto library_handle =
        llvm::sys::DynamicLibrary::getPermanentLibrary(library.c_str(), &why);
    if (!library_handle.isValid()) {
      throw Error(errc::dependency_not_found, "ifunc '" + ifunc + "' needs library '" + library +
                                                  "', which cannot be loaded: " + why);
    }
    // Our own handle on the same object (kept: the library stays loaded for the
    // life of the process anyway) tells its symbols from its dependencies'.
    void* handle = dlopen(library.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    const link_map* self = nullptr;
    if (handle == nullptr || dlinfo(handle, RTLD_DI_LINKMAP, &self) != 0) {
      throw Error(errc::dependency_not_found,
                  "ifunc '" + ifunc + "': library '" + library + "' loaded but cannot be found");
    }
    return dependency_objects.emplace(library, DependencyObject{library_handle, handle, self})
        .first->second;
  }

  // Maps a pre-linked image (prelinked_image.hpp): no JIT, no linker. Its
  // imports resolve in the JIT's order (a JITDylib's link order: LLJIT's
  // process JITDylib, then the dependencies): the runtime, the process,
  // then its dependency libraries, each through the ImportPolicy.
  IfuncMain link_prelinked(CodeId id, const ParsedImage& image) {
    failure = {};
    std::vector<const DependencyObject*> libraries;
    for (const std::string& library : image.deps)
      libraries.push_back(&dependency_object(library, image.name));
    std::vector<std::string> missing;
    const auto resolve = [&](llvm::StringRef symbol, bool weak) -> uint64_t {
      const std::string name = symbol.str();
      for (const auto& [runtime_name, address] : public_runtime())
        if (name == runtime_name) return reinterpret_cast<uint64_t>(address);
      const void* address = dlsym(RTLD_DEFAULT, name.c_str());
      if (address != nullptr && allow_binding(name, address))
        return reinterpret_cast<uint64_t>(address);
      for (const DependencyObject* library : libraries) {
        address = dlsym(library->handle, name.c_str());
        if (address != nullptr && allow_from(*library, name, address))
          return reinterpret_cast<uint64_t>(address);
      }
      // Named once, however many relocations use it.
      if (!weak && std::find(missing.begin(), missing.end(), name) == missing.end())
        missing.push_back(name);
      return 0;
    };
    jit::PrelinkedImage loaded = jit::PrelinkedImage::load(image.bytes, image.name, resolve, image_memory);
    if (!missing.empty()) {
      std::string refused;
      std::string absent;
      for (const std::string& name : missing) {
        const bool was_refused =
            std::find(failure.refused.begin(), failure.refused.end(), name) != failure.refused.end();
        (was_refused ? refused : absent) +=
            ((was_refused ? refused : absent).empty() ? "'" : ", '") + name + "'";
      }
      if (!refused.empty()) {
        throw Error(errc::import_refused, "ifunc '" + image.name + "' (" + image.triple +
                                              ") imports " + refused +
                                              ", which this target's ImportPolicy does not allow "
                                              "(ImportPolicy::allow_symbol to expose a symbol)");
      }
      throw Error(errc::symbol_not_found, "ifunc '" + image.name + "' (" + image.triple +
                                              "): Symbols not found: " + absent);
    }
    auto* entry = reinterpret_cast<IfuncMain>(loaded.find(image.name + "_main"));
    if (entry == nullptr) {
      throw Error(errc::symbol_not_found, "ifunc '" + image.name + "' (" + image.triple +
                                              "): its image defines no '" + image.name +
                                              "_main'");
    }
    // One image per identity, and the function table in step with the images:
    // names added for an image that is kept, or forgotten again.
    release_prelinked(id);
    const uint64_t key = loaded.base();
    try {
      for (const jit::PrelinkedImage::Function& function : loaded.functions())
        functions.add(key, function.begin, {function.end, function.name});
      prelinked.emplace(id, std::move(loaded));
    } catch (...) {
      functions.forget(key);
      throw;
    }
    return entry;
  }

  // Forgets `id`'s pre-linked image, if it has one.
  bool release_prelinked(CodeId id) {
    const auto it = prelinked.find(id);
    if (it == prelinked.end()) return false;
    functions.forget(it->second.base());
    prelinked.erase(it);
    return true;
  }

  // The store's key for `image`: the code's identity (and, since XXH3 is no
  // cryptographic hash, the image's BLAKE2b), and everything of this host and
  // build that decides the object's bytes or what was checked before.
  [[nodiscard]] std::string store_key(CodeId id, const ParsedImage& image,
                                      Confine confine = Confine::no) const {
    ensure_sodium();
    std::array<unsigned char, crypto_generichash_BYTES> digest{};
    crypto_generichash(digest.data(), digest.size(),
                       reinterpret_cast<const unsigned char*>(image.bytes.data()),
                       image.bytes.size(), nullptr, 0);
    std::string blake2b;
    static constexpr char kDigits[] = "0123456789abcdef";
    for (const unsigned char byte : digest) {
      blake2b += kDigits[byte >> 4];
      blake2b += kDigits[byte & 15];
    }
    return "threechains object 1\nid " + hex_id(id) + "\nimage " + image.triple + "\nblake2b " +
           blake2b + "\nconfined " + (confine == Confine::yes ? "1" : "0") + "\n" + host_key;
  }

  // The entry of `image` (IR) linked from the store under `key`, or nullptr.
  IfuncMain link_stored(CodeId id, const ParsedImage& image, const std::string& key,
                        Confine confine = Confine::no) {
    if (!store) return nullptr;
    if (const std::optional<std::vector<std::byte>> object = store->find(key)) {
      try {
        return link(id, CodecId::bitcode, image, &*object, confine);
      } catch (const Error&) {
        // An entry that reads well but does not link here: compile instead.
      }
    }
    return nullptr;
  }

  // Compiles or links `image`; with a store, bitcode is first looked up there.
  IfuncMain load(CodeId id, CodecId codec, const ParsedImage& image, bool& from_store,
                 Confine confine = Confine::no) {
    from_store = false;
    if (confine == Confine::yes) return load_confined(id, image, from_store);
    if (codec != CodecId::bitcode || !store) return link(id, codec, image, nullptr, confine);
    const std::string key = store_key(id, image, confine);
    if (const IfuncMain entry = link_stored(id, image, key, confine)) {
      from_store = true;
      return entry;
    }
    capturing = true;
    captured_objects = 0;
    IfuncMain entry = nullptr;
    try {
      entry = link(id, codec, image, nullptr, confine);
    } catch (...) {
      capturing = false;
      throw;
    }
    capturing = false;
    if (captured_objects == 1) (void)store->store(key, captured);
    captured.clear();
    return entry;
  }

  // Confined bitcode: from the store, else compiled by a worker process
  // (compile_worker.hpp) while this thread waits, then linked here.
  IfuncMain load_confined(CodeId id, const ParsedImage& image, bool& from_store) {
    const std::string key = store ? store_key(id, image, Confine::yes) : std::string();
    if (const IfuncMain entry = link_stored(id, image, key, Confine::yes)) {
      from_store = true;
      return entry;
    }
    CompileWorkers::Outcome compiled = workers.compile(image.name, image.bytes);
    return link_compiled(id, image, compiled, key);
  }

  // Links what a worker compiled for `image` (or throws why it did not) and
  // keeps it in the store under `key`, if there is one.
  IfuncMain link_compiled(CodeId id, const ParsedImage& image, CompileWorkers::Outcome& compiled,
                          const std::string& key) {
    if (compiled.error) {
      throw Error(static_cast<errc>(compiled.error->code().value()),
                  "ifunc '" + image.name + "': " + compiled.error->context());
    }
    const IfuncMain entry = link(id, CodecId::bitcode, image, &compiled.object, Confine::yes);
    if (store && !key.empty()) (void)store->store(key, compiled.object);
    return entry;
  }

  // A tiered load: the object at once (tier 0) and the IR compiled later, or
  // what JitOptions::tiering asks for; `object` or `ir` may be missing.
  IfuncMain load_tiered(CodeId id, const ParsedImage* object, const ParsedImage* ir,
                        LoadResult& result) {
    const bool use_ir = ir != nullptr && (object == nullptr || tiering == Tiering::ir_only);
    if (use_ir) {
      result.tier = 1;
      return load(id, CodecId::bitcode, *ir, result.from_code_cache);
    }
    // The key (a BLAKE2b of the IR among it) once, for the lookup and the promotion.
    const std::string key =
        ir != nullptr && tiering == Tiering::tiered && store ? store_key(id, *ir) : std::string();
    if (!key.empty()) {
      if (const IfuncMain stored = link_stored(id, *ir, key)) {  // compiled by an earlier run
        result.tier = 1;
        result.from_code_cache = true;
        return stored;
      }
    }
    const IfuncMain entry = link(id, CodecId::binary, *object, nullptr);
    result.tier = 0;
    if (ir != nullptr && tiering == Tiering::tiered) {
      Promotion promotion{next_serial++, promote_after_calls, false, false, *ir, key};
      drop_promotion(id);
      auto [it, inserted] = promotions.emplace(id, std::move(promotion));
      if (it->second.calls_left == 0) {
        it->second.due = true;
        due.push_back(id);
        ++in_progress;
      } else {
        ++awaiting;
      }
    }
    return entry;
  }

  struct Promotion {
    uint64_t serial = 0;
    uint32_t calls_left = 0;
    bool due = false;  // called often enough: to be submitted (start_due_compiles)
    bool submitted = false;
    ParsedImage ir;  // its bytes go to the compiler; name, triple and deps stay
    std::string store_key;
  };

  void submit(CodeId id, Promotion& promotion) {
    if (!compiler) {
      compiler = std::make_unique<BackgroundCompiler>(*host_builder, optimisation_level, policy,
                                                      calls, store ? &*store : nullptr);
    }
    // The bytes go to the compiler; name, triple and deps stay for the link.
    ParsedImage image{promotion.ir.name, promotion.ir.triple, promotion.ir.kind, promotion.ir.deps,
                      std::move(promotion.ir.bytes)};
    promotion.ir.bytes = {};
    promotion.submitted = true;
    compiler->submit({promotion.serial, id, std::move(image), promotion.store_key});
  }

  void note_call(CodeId id) {
    const auto it = promotions.find(id);
    if (it == promotions.end() || it->second.due || it->second.submitted) return;
    if (it->second.calls_left > 0) --it->second.calls_left;
    if (it->second.calls_left == 0) {
      it->second.due = true;
      due.push_back(id);
      --awaiting;
      ++in_progress;
    }
  }

  // Forgets `id`'s promotion (a compile under way is dropped when it finishes).
  void drop_promotion(CodeId id) {
    const auto it = promotions.find(id);
    if (it == promotions.end()) return;
    if (it->second.due || it->second.submitted) {
      --in_progress;
    } else {
      --awaiting;
    }
    promotions.erase(it);
  }

  void start_due_compiles() {
    for (const CodeId id : due) {
      const auto it = promotions.find(id);
      if (it != promotions.end() && it->second.due && !it->second.submitted) submit(id, it->second);
    }
    due.clear();
  }

  // Links finished tier-1 code; returns the new entries and what failed.
  std::vector<std::pair<CodeId, IfuncMain>> promote_ready(std::vector<std::string>& failures,
                                                          unsigned& kept_at_tier0) {
    start_due_compiles();
    std::vector<std::pair<CodeId, IfuncMain>> promoted;
    if (!compiler || !compiler->has_finished()) return promoted;
    for (BackgroundCompiler::Result& done : compiler->take_finished()) {
      const auto it = promotions.find(done.id);
      if (it == promotions.end() || it->second.serial != done.serial) continue;  // evicted since
      const Promotion promotion = std::move(it->second);
      promotions.erase(it);
      --in_progress;
      if (!done.stays_at_tier0.empty()) {
        ++kept_at_tier0;
        continue;
      }
      if (!done.error.empty()) {
        failures.push_back("ifunc '" + promotion.ir.name + "': compiling tier 1 for this CPU: " +
                           done.error + " (tier 0 keeps running)");
        continue;
      }
      try {
        promoted.emplace_back(done.id, link(done.id, CodecId::bitcode, promotion.ir, &done.object));
      } catch (const Error& e) {
        failures.push_back("ifunc '" + promotion.ir.name + "': linking tier 1: " + e.what() +
                           " (tier 0 keeps running)");
      }
    }
    return promoted;
  }

  // Links `image` (or, for bitcode, `object` compiled from it earlier) into a
  // JITDylib of its own and returns its entry point.
  IfuncMain link(CodeId id, CodecId codec, const ParsedImage& image,
                 const std::vector<std::byte>* object, Confine confine = Confine::no) {
    if (codec == CodecId::binary && object == nullptr && jit::is_prelinked_image(image.bytes))
      return link_prelinked(id, image);
    const std::string entry_name = image.name + "_main";
    failure = {};  // what this load's diagnostics and errors collect
    llvm::orc::JITDylib& jd = acquire_dylib();
    try {
      for (const std::string& library : image.deps)
        jd.addToLinkOrder(dependency(library, image.name));
      const llvm::StringRef bytes(reinterpret_cast<const char*>(image.bytes.data()),
                                  image.bytes.size());
      if (object != nullptr) {
        const llvm::StringRef compiled(reinterpret_cast<const char*>(object->data()),
                                       object->size());
        if (llvm::Error e = jit->addObjectFile(
                jd, llvm::MemoryBuffer::getMemBufferCopy(compiled, image.name))) {
          throw Error(errc::jit_failed, "ifunc '" + image.name + "': " + message_of(std::move(e)));
        }
      } else if (codec == CodecId::bitcode) {
        // Confined bitcode never compiles in this process: load_confined
        // hands it to a worker, and only its object comes here.
        if (confine == Confine::yes)
          throw Error(errc::jit_failed, "ifunc '" + image.name + "': confined bitcode to compile here");
        auto context = std::make_unique<llvm::LLVMContext>();
        // An error diagnostic (a backend that cannot honour what the IR
        // asks) would otherwise end the process: it becomes this load's error.
        context->setDiagnosticHandlerCallBack(
            [](const llvm::DiagnosticInfo* info, void* self) {
              if (info->getSeverity() != llvm::DS_Error) return;
              std::string text;
              llvm::raw_string_ostream out(text);
              llvm::DiagnosticPrinterRawOStream printer(out);
              info->print(printer);
              static_cast<Impl*>(self)->failure.append(text);
            },
            this);
        auto module = llvm::parseBitcodeFile(llvm::MemoryBufferRef(bytes, image.name), *context);
        if (!module) {
          throw Error(errc::bad_container, "ifunc '" + image.name + "': bad bitcode for " +
                                               image.triple + ": " +
                                               message_of(module.takeError()));
        }
        check_bitcode(**module, image.name, policy);
        (void)optimiser->run(**module);
        if (llvm::Error e = jit->addIRModule(
                jd, llvm::orc::ThreadSafeModule(std::move(*module), std::move(context)))) {
          throw Error(errc::jit_failed, "ifunc '" + image.name + "': " + message_of(std::move(e)));
        }
      } else {
        if (llvm::Error e =
                jit->addObjectFile(jd, llvm::MemoryBuffer::getMemBufferCopy(bytes, image.name))) {
          throw Error(errc::jit_failed, "ifunc '" + image.name + "': " + message_of(std::move(e)));
        }
      }
      // Lookup materialises the code: compile or link errors, and unresolved
      // external symbols, surface here.
      const std::string diagnosed = failure.message;  // from parsing, optimising, confining
      failure = {};
      auto address = jit->lookup(jd, entry_name);
      if (!address) {
        failure.absorb(address.takeError());
        // Refused in one place and resolved in another (a dependency defines
        // it) is no refusal: name only what stayed unresolved for that reason.
        std::string names;
        for (const std::string& name : failure.refused) {
          if (std::find(failure.missing.begin(), failure.missing.end(), name) !=
              failure.missing.end())
            names += (names.empty() ? "'" : ", '") + name + "'";
        }
        if (!names.empty()) {
          throw Error(errc::import_refused, "ifunc '" + image.name + "' (" + image.triple +
                                                ") imports " + names +
                                                ", which this target's ImportPolicy does not allow "
                                                "(ImportPolicy::allow_symbol to expose a symbol)");
        }
        std::string why = failure.message;
        if (failure.needs_native_tls) {
          why +=
              "; native thread-local storage needs the ORC runtime, which this JIT does not load: "
              "build the ifunc as bitcode or compile it with -femulated-tls (TLS)";
        }
        throw Error(failure.code, "ifunc '" + image.name + "' (" + image.triple + "): " + why);
      }
      // An LLVM error diagnostic means code the backend could not build as
      // asked; for confined code, any error reported during the load too.
      if (!diagnosed.empty() || (confine == Confine::yes && !failure.empty())) {
        throw Error(errc::jit_failed,
                    "ifunc '" + image.name + "': " + diagnosed + (diagnosed.empty() ? "" : "; ") +
                        failure.message);
      }
      if (confine == Confine::yes) confined_codes[id] = confined_code(jd, id, image.name);
      dylibs[id].push_back(&jd);
      return address->toPtr<IfuncMain>();
    } catch (...) {
      if (llvm::Error e = jit->getExecutionSession().removeJITDylib(jd))
        llvm::consumeError(std::move(e));
      throw;
    }
  }

  // What the runner needs of a confined ifunc just linked into `jd`: its
  // globals, from the table the confinement pass emitted.
  confined::Code confined_code(llvm::orc::JITDylib& jd, CodeId id, const std::string& name) {
    auto address = jit->lookup(jd, confined::kGlobalsSymbol);
    if (!address) {
      throw Error(errc::jit_failed, "ifunc '" + name + "': its confined globals table: " +
                                        message_of(address.takeError()));
    }
    const auto* table = address->toPtr<const confined::GlobalsTable*>();
    confined::Code code{name, id, {}};
    for (uint64_t k = 0; k < table->count; ++k) {
      const confined::GlobalsTable::Entry& entry = table->entries[k];
      code.globals.push_back({entry.address, entry.address + entry.size, entry.writable});
    }
    std::sort(code.globals.begin(), code.globals.end(),
              [](const confined::Region& a, const confined::Region& b) { return a.begin < b.begin; });
    auto sites = jit->lookup(jd, confined::kSitesSymbol);
    auto count = jit->lookup(jd, confined::kSiteCountSymbol);
    if (!sites || !count) {
      if (!sites) llvm::consumeError(sites.takeError());
      if (!count) llvm::consumeError(count.takeError());
      throw Error(errc::jit_failed, "ifunc '" + name + "': its confined access sites are missing");
    }
    code.sites = sites->toPtr<uint64_t*>();
    code.site_count = *count->toPtr<const uint64_t*>();
    // A cached object from an earlier run may hold what that run found.
    confined::Runner::clear_sites(code);
    code.remember_initial_globals();
    return code;
  }

  // A JITDylib for one ifunc's code (each its own, so helper symbols of two
  // ifuncs never clash): an emptied one if there is one, else a new one.
  // Making one costs more than linking a small object (threechains-bench-jit,
  // perf), so evicted ones are emptied and kept.
  llvm::orc::JITDylib& acquire_dylib() {
    if (!spare_dylibs.empty()) {
      llvm::orc::JITDylib& jd = *spare_dylibs.back();
      spare_dylibs.pop_back();
      jd.setLinkOrder(default_links, true);  // itself, then what LLJIT links every JITDylib to
      return jd;
    }
    auto dylib = jit->createJITDylib("ifunc-" + std::to_string(dylib_count++));
    if (!dylib)
      throw Error(errc::jit_failed, "cannot create a JITDylib: " + message_of(dylib.takeError()));
    if (dylib_count == 1) {
      dylib->withLinkOrderDo([this, &dylib](const llvm::orc::JITDylibSearchOrder& order) {
        for (const auto& entry : order)
          if (entry.first != &*dylib) default_links.push_back(entry);
      });
    }
    return *dylib;
  }

  // Empties `jd` for reuse (or removes it, if emptying fails).
  llvm::Error release_dylib(llvm::orc::JITDylib& jd) {
    constexpr std::size_t kSpares = 64;
    if (spare_dylibs.size() < kSpares) {
      // clear() also removes what the session's platform defined in every
      // new JITDylib (LLJIT's: __dso_handle, an atexit that runs at removal):
      // set it up again, so a reused JITDylib is what a new one would be.
      llvm::orc::Platform* platform = jit->getExecutionSession().getPlatform();
      llvm::Error e = jd.clear();
      if (!e && platform != nullptr) e = platform->setupJITDylib(jd);
      if (e) {
        llvm::consumeError(std::move(e));
      } else {
        spare_dylibs.push_back(&jd);
        return llvm::Error::success();
      }
    }
    return jit->getExecutionSession().removeJITDylib(jd);
  }

  // Whether code for `image_triple` runs on this host: LLVM parses both
  // triples the first time a container names it (a fifth of a pre-linked
  // load, cold), and the answer is kept.
  bool runs_here(const std::string& image_triple) {
    if (image_triple == triple) return true;
    if (const auto known = runs_on_host.find(image_triple); known != runs_on_host.end())
      return known->second;
    const bool same = same_target(image_triple, triple);
    if (runs_on_host.size() < 64) runs_on_host.emplace(image_triple, same);  // triples are few
    return same;
  }

  bool evict(CodeId id) {
    drop_promotion(id);
    confined_codes.erase(id);
    const bool had_image = release_prelinked(id);
    const auto it = dylibs.find(id);
    if (it == dylibs.end()) return had_image;
    std::vector<llvm::orc::JITDylib*> tiers = std::move(it->second);
    dylibs.erase(it);
    std::string errors;
    for (llvm::orc::JITDylib* dylib : tiers) {
      if (llvm::Error e = release_dylib(*dylib))
        errors += (errors.empty() ? "" : "; ") + message_of(std::move(e));
    }
    if (!errors.empty())
      throw Error(errc::jit_failed, "evicting ifunc " + hex_id(id) + ": " + errors);
    return true;
  }

  ImportPolicy policy;
  confined::Runner runner;  // before the JIT: its state is bound into every JITDylib
  CompileWorkers workers;   // where confined bitcode compiles
  struct PendingLoad {
    ParsedImage image;  // name, triple and deps for the link (its bytes went to the worker)
    std::string store_key;
    std::chrono::steady_clock::time_point started;
  };
  std::unordered_map<CodeId, PendingLoad> pending_loads;  // confined code compiling in a worker

  [[nodiscard]] std::vector<ParsedImage> images_for_host(CodeId id, std::span<const std::byte> code,
                                                         const ParsedImage*& object,
                                                         const ParsedImage*& ir);
  [[nodiscard]] static const ParsedImage& confinable(CodecId codec, const ParsedImage* object,
                                                     const ParsedImage* ir);
  std::unordered_map<CodeId, confined::Code> confined_codes;  // node-based: stable for CachedIfunc
  LibraryCalls calls;  // what optimised code may call: shared with the background compiler
  std::unique_ptr<HostOptimiser> optimiser;
  // Before the JIT: its plugins write to these.
  jit::FunctionTable functions;  // what fault reports name an instruction after
  jit::Observers observers;      // the perf session
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::string triple;
  std::unordered_map<std::string, bool> runs_on_host;  // image triple -> runs_here
  LoadFailure failure;               // what the session reported during the current load
  std::optional<ObjectStore> store;  // JitOptions::code_cache_directory
  std::string host_key;              // this host's part of a store key
  std::optional<llvm::orc::DumpObjects> dumper;
  bool capturing = false;           // a compile for the store is running
  std::vector<std::byte> captured;  // the object it produced
  int captured_objects = 0;
  std::optional<llvm::orc::JITTargetMachineBuilder> host_builder;  // for the background compiler
  int optimisation_level = 2;
  Tiering tiering = Tiering::tiered;
  uint32_t promote_after_calls = 2;
  std::unordered_map<CodeId, Promotion> promotions;  // tier-0 ifuncs with IR to compile
  std::vector<CodeId> due;                           // promotions to submit (start_due_compiles)
  std::size_t awaiting = 0;                          // promotions waiting for calls
  std::size_t in_progress = 0;                       // due, submitted or compiled, not yet linked
  uint64_t next_serial = 1;
  std::unique_ptr<BackgroundCompiler> compiler;  // started by the first promotion
  std::unordered_map<CodeId, std::vector<llvm::orc::JITDylib*>> dylibs;  // tier 0 first
  std::vector<llvm::orc::JITDylib*> spare_dylibs;  // emptied by evictions, for reuse
  llvm::orc::JITDylibSearchOrder default_links;    // LLJIT's links of a new JITDylib
  std::size_t dylib_count = 0;
  std::unordered_map<std::string, llvm::orc::JITDylib*> dependencies;  // live as long as the JIT
  std::unordered_map<std::string, DependencyObject> dependency_objects;  // loaded for good
  // Pre-linked images (binary code packed PRELINKED), released on eviction
  // into image_memory, which is declared first so it outlives them.
  jit::ImageMemory image_memory;
  std::unordered_map<CodeId, jit::PrelinkedImage> prelinked;
};

const std::string* JitCache::function_at(const void* address, std::uintptr_t& offset) const noexcept {
  uint64_t within = 0;
  const std::string* name = impl_->functions.find(reinterpret_cast<uintptr_t>(address), within);
  offset = static_cast<std::uintptr_t>(within);
  return name;
}

JitCache::JitCache(const JitOptions& options) : impl_(std::make_unique<Impl>(options)) {}
JitCache::~JitCache() = default;
JitCache::JitCache(JitCache&&) noexcept = default;
JitCache& JitCache::operator=(JitCache&&) noexcept = default;

// The images of `code` that run here (`object`, `ir`: either may be null,
// not both), or throws why none does.
std::vector<ParsedImage> JitCache::Impl::images_for_host(CodeId id,
                                                         std::span<const std::byte> code,
                                                         const ParsedImage*& object,
                                                         const ParsedImage*& ir) {
  if (code_identity(code) != id) {
    throw Error(errc::code_identity_mismatch, "code section of " + std::to_string(code.size()) +
                                                  " bytes does not hash to its identity " +
                                                  hex_id(id));
  }
  std::vector<ParsedImage> images = parse_container(code);
  object = nullptr;
  ir = nullptr;
  std::string available;
  for (const ParsedImage& image : images) {
    available += (available.empty() ? "" : ", ") + image.triple;
    if (!runs_here(image.triple)) continue;
    const ParsedImage*& slot = image.kind == CodecId::binary ? object : ir;
    if (slot == nullptr) slot = &image;
  }
  if (object == nullptr && ir == nullptr) {
    const bool gpu_only = std::all_of(images.begin(), images.end(), [](const ParsedImage& image) {
      return is_gpu_triple(image.triple);
    });
    if (gpu_only) {
      throw Error(errc::gpu_failed, "ifunc '" + images.front().name + "' is GPU code (" + available +
                                        ") and this Receiver runs none (ReceiverOptions::gpu)");
    }
    throw Error(errc::no_image_for_target, "ifunc '" + images.front().name + "' has no image for " +
                                               triple + " (it carries: " + available + ")");
  }
  return images;
}

// The cached entry for `id`, if it is loaded the way `confine` asks.
std::optional<LoadResult> JitCache::already_loaded(CodeId id, Confine confine) const {
  const CachedIfunc* cached = find_ifunc(id);
  if (cached == nullptr) return std::nullopt;
  if ((cached->confined != nullptr) != (confine == Confine::yes)) {
    throw Error(errc::code_refused, "code " + hex_id(id) + " is loaded here " +
                                        (confine == Confine::yes ? "unconfined" : "confined") +
                                        " already; it cannot also run the other way");
  }
  return LoadResult{cached->main, std::chrono::nanoseconds{0}, impl_->triple, {}};
}

// Only bitcode can be confined: the pass rewrites IR, not machine code.
const ParsedImage& JitCache::Impl::confinable(CodecId codec, const ParsedImage* object,
                                              const ParsedImage* ir) {
  if (ir == nullptr || codec == CodecId::binary) {
    throw Error(errc::code_refused,
                "ifunc '" + (object != nullptr ? object : ir)->name +
                    "' is machine code from a signer this target does not fully trust: only "
                    "bitcode runs confined (send bitcode, or trust the signer with "
                    "Trust::allow_native_code_signer)");
  }
  // Not bitcode at all is refused here, not in a worker started for it.
  const std::span<const std::byte> bytes = ir->bytes;
  const auto starts = [&](std::initializer_list<unsigned char> magic) {
    return bytes.size() >= magic.size() &&
           std::equal(magic.begin(), magic.end(), bytes.begin(),
                      [](unsigned char m, std::byte b) { return std::byte(m) == b; });
  };
  if (!starts({'B', 'C', 0xC0, 0xDE}) && !starts({0xDE, 0xC0, 0x17, 0x0B})) {
    throw Error(errc::bad_container,
                "ifunc '" + ir->name + "': its image for " + ir->triple + " is not LLVM bitcode");
  }
  return *ir;
}

LoadResult JitCache::load(CodeId id, CodecId codec, std::span<const std::byte> code,
                          Confine confine) {
  if (std::optional<LoadResult> cached = already_loaded(id, confine)) return *cached;
  if (impl_->pending_loads.contains(id)) {
    throw Error(errc::code_refused,
                "code " + hex_id(id) + " is compiling already (start_load); finish_loads() links it");
  }
  const auto start = std::chrono::steady_clock::now();
  const ParsedImage* object = nullptr;
  const ParsedImage* ir = nullptr;
  const std::vector<ParsedImage> images = impl_->images_for_host(id, code, object, ir);
  LoadResult result;
  const ParsedImage& any = object != nullptr ? *object : *ir;
  result.name = any.name;
  if (confine == Confine::yes) {
    const ParsedImage& image = Impl::confinable(codec, object, ir);
    result.entry = impl_->load(id, CodecId::bitcode, image, result.from_code_cache, Confine::yes);
    result.tier = 1;
    result.triple = image.triple;
  } else if (codec == CodecId::tiered) {
    result.entry = impl_->load_tiered(id, object, ir, result);
    result.triple = (result.tier == 0 ? object : ir)->triple;
  } else {
    const ParsedImage* chosen = codec == CodecId::bitcode ? ir : object;
    if (chosen == nullptr) {
      throw Error(errc::bad_codec, "frame says " + std::string(to_string(codec)) + " but ifunc '" +
                                       any.name + "' carries " + to_string(any.kind));
    }
    result.entry = impl_->load(id, codec, *chosen, result.from_code_cache);
    result.tier = codec == CodecId::bitcode ? 1 : 0;
    result.triple = chosen->triple;
  }
  const confined::Code* confined = nullptr;
  if (confine == Confine::yes) confined = &impl_->confined_codes.at(id);
  entries_.emplace(id, CachedIfunc{result.entry, confined});
  sync_promotion_counts();
  result.compile_time = std::chrono::steady_clock::now() - start;
  return result;
}

std::optional<LoadResult> JitCache::start_load(CodeId id, CodecId codec,
                                               std::span<const std::byte> code, Confine confine) {
  if (confine == Confine::no) return load(id, codec, code, confine);
  if (std::optional<LoadResult> cached = already_loaded(id, confine)) return *cached;
  if (impl_->pending_loads.contains(id)) return std::nullopt;
  const auto start = std::chrono::steady_clock::now();
  const ParsedImage* object = nullptr;
  const ParsedImage* ir = nullptr;
  std::vector<ParsedImage> images = impl_->images_for_host(id, code, object, ir);
  const ParsedImage& image = Impl::confinable(codec, object, ir);
  Impl::PendingLoad pending{image, impl_->store ? impl_->store_key(id, image, Confine::yes) : "",
                            start};
  if (const IfuncMain entry = impl_->link_stored(id, image, pending.store_key, Confine::yes)) {
    entries_.emplace(id, CachedIfunc{entry, &impl_->confined_codes.at(id)});
    return LoadResult{entry, std::chrono::steady_clock::now() - start, image.triple, image.name,
                      true, 1};
  }
  impl_->workers.submit(id, image.name, image.bytes);
  std::vector<std::byte>().swap(pending.image.bytes);  // the worker has its copy
  impl_->pending_loads.emplace(id, std::move(pending));
  sync_promotion_counts();
  return std::nullopt;
}

std::vector<JitCache::FinishedLoad> JitCache::finish_loads() {
  std::vector<FinishedLoad> finished;
  if (impl_->pending_loads.empty()) return finished;
  for (auto& [id, compiled] : impl_->workers.poll()) {
    const auto it = impl_->pending_loads.find(id);
    if (it == impl_->pending_loads.end()) continue;  // evicted meanwhile
    Impl::PendingLoad pending = std::move(it->second);
    impl_->pending_loads.erase(it);
    FinishedLoad done{id, std::nullopt, std::nullopt, compiled.target_failed};
    try {
      const IfuncMain entry = impl_->link_compiled(id, pending.image, compiled, pending.store_key);
      entries_.emplace(id, CachedIfunc{entry, &impl_->confined_codes.at(id)});
      done.result = LoadResult{entry, std::chrono::steady_clock::now() - pending.started,
                               pending.image.triple, pending.image.name, false, 1};
    } catch (const Error& error) {
      done.error = error;
    } catch (const std::exception& error) {  // every outcome is handed back, whatever one threw
      done.error = Error(errc::jit_failed, "ifunc '" + pending.image.name + "': " + error.what());
      done.target_failed = true;
    }
    finished.push_back(std::move(done));
  }
  sync_promotion_counts();
  return finished;
}

bool JitCache::loading(CodeId id) const noexcept {
  return impl_->pending_loads.contains(id);
}

void JitCache::cancel_loads() noexcept {
  for (const auto& [id, pending] : impl_->pending_loads) impl_->workers.cancel(id);
  impl_->pending_loads.clear();
  sync_promotion_counts();
}

void JitCache::note_call(CodeId id) {
  impl_->note_call(id);
  sync_promotion_counts();
}

void JitCache::start_due_compiles() {
  impl_->start_due_compiles();
}

Promotions JitCache::promote_ready() {
  Promotions out;
  for (const auto& [id, entry] : impl_->promote_ready(out.failures, out.stay_at_tier0)) {
    entries_[id].main = entry;  // tier 1 of unconfined code: confined code is never tiered
    ++out.promoted;
  }
  sync_promotion_counts();
  return out;
}

void JitCache::sync_promotion_counts() noexcept {
  awaiting_calls_ = impl_->awaiting;
  compiling_ = impl_->in_progress + impl_->pending_loads.size();
}

void* JitCache::lookup(CodeId id, const std::string& symbol) {
  if (impl_->confined_codes.contains(id)) return nullptr;
  const auto it = impl_->dylibs.find(id);
  if (it == impl_->dylibs.end()) {
    const auto image = impl_->prelinked.find(id);
    return image == impl_->prelinked.end() ? nullptr : image->second.find(symbol);
  }
  impl_->failure = {};
  auto address = impl_->jit->lookup(*it->second.back(), symbol);  // the newest tier
  if (!address) {
    llvm::consumeError(address.takeError());
    return nullptr;
  }
  return address->toPtr<void*>();
}

std::optional<ConfinedTrap> JitCache::invoke_confined(const CachedIfunc& ifunc, void* payload,
                                                     std::size_t size, void* target_args,
                                                     uint64_t caller) noexcept {
  impl_->runner.serve(caller, *ifunc.confined);
  return impl_->runner.run(ifunc.main, *ifunc.confined, payload, size, target_args);
}

std::size_t JitCache::committed_bytes(CodeId id) const noexcept {
  const auto it = impl_->confined_codes.find(id);
  if (it == impl_->confined_codes.end()) return 0;
  std::size_t bytes = 0;
  for (const confined::Region& global : it->second.globals) bytes += global.end - global.begin;
  for (const std::vector<std::byte>& initial : it->second.initial) bytes += initial.size();
  return bytes;
}

std::string JitCache::confined_name(const CachedIfunc& ifunc) const {
  return ifunc.confined == nullptr ? std::string() : ifunc.confined->name;
}

void JitCache::expose(const std::vector<ExposedRegion>& regions) {
  impl_->runner.expose(regions);
  for (const auto& [id, code] : impl_->confined_codes) confined::Runner::clear_sites(code);
}

bool JitCache::evict(CodeId id) {
  entries_.erase(id);
  if (impl_->pending_loads.erase(id) != 0) impl_->workers.cancel(id);
  const bool evicted = impl_->evict(id);
  sync_promotion_counts();
  return evicted;
}

}  // namespace threechains
