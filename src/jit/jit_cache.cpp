// JitCache: ORC LLJIT behind a pimpl (jit_cache_impl.hpp says which file
// holds what). Here: the JIT's set-up for this host, and JitCache's calls.
#include "jit/jit_cache_impl.hpp"

namespace threechains {

const std::array<std::pair<const char*, void*>, 6>& jit_cache_detail::public_runtime() {
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

namespace {

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
    symbols[jit.mangleAndIntern(symbol.name)] =
        llvm::orc::ExecutorSymbolDef(llvm::orc::ExecutorAddr::fromPtr(symbol.address),
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
// Window code does not pass here: each window links its own (WindowSlot).
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

// Whether confined code may take the window tier here: asked for, on
// x86-64 with the verifier built in (Zydis found), or on aarch64 (whose
// verifier needs no library).
bool window_tier_here(const ConfinementOptions& options) noexcept {
#if (defined(__x86_64__) && defined(THREECHAINS_HAVE_WINDOW_VERIFIER)) || defined(__aarch64__)
  return options.window_tier;
#else
  (void)options;
  return false;
#endif
}
}  // namespace

JitCache::Impl::Impl(const JitOptions& options)
    : policy(options.imports),
      runner(options.confinement),
      workers([&options] {
        CompileWorkers::Settings settings{
            options.optimisation_level, options.codegen_level, options.confinement.max_global_bytes,
            options.confinement.compile_time_limit, options.confinement.compile_memory_limit};
        settings.window_shape = window_tier_here(options.confinement);
        settings.cpus = detail::HelperCpus(options.helper_cpus);
        return settings;
      }()),
      window_tier(window_tier_here(options.confinement)),
      max_windows(options.confinement.max_windows) {
  helper_cpus = detail::HelperCpus(options.helper_cpus);
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
    // objects compiled under the old rules are not linked under the new
    // (4: the window shape's masks folded into the accesses, so stored
    // objects of the unfolded shape compile again, faster).
    constexpr int kChecks = 4;
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
    throw Error(errc::jit_failed,
                "cannot describe this host to LLVM: " + message_of(optimiser_machine.takeError()));
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
          .setObjectLinkingLayerCreator(
              [](llvm::orc::ExecutionSession& session) { return object_linking_layer(session); })
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
    throw Error(errc::jit_failed, "cannot create the ORC JIT: " + message_of(created.takeError()));
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

JitCache::Impl::~Impl() {
  compiler.reset();      // its thread first: it reads the store
  preparation.reset();   // so does this one
  verification.reset();  // and this one links into windows and reads them
  for (auto& [id, tiers] : dylibs) {
    for (llvm::orc::JITDylib* dylib : tiers) {
      if (llvm::Error e = jit->getExecutionSession().removeJITDylib(*dylib))
        llvm::consumeError(std::move(e));
    }
  }
  // Before the members its error reporter and generators write to (failure, policy).
  jit.reset();
}

const std::string* JitCache::function_at(const void* address,
                                         std::uintptr_t& offset) const noexcept {
  uint64_t within = 0;
  const std::string* name = impl_->functions.find(reinterpret_cast<uintptr_t>(address), within);
  offset = static_cast<std::uintptr_t>(within);
  return name;
}

// Out of line: cold, and its entries_[id] costs every includer of the header
// the hash table's insertion code (docs/performance.md, "Other figures").
void JitCache::adopt_gpu(CodeId id, const void* kernel, IfuncMain complete) {
  CachedIfunc& entry = entries_[id];
  entry.gpu = kernel;
  entry.gpu_complete = complete;
}

JitCache::JitCache(const JitOptions& options) : impl_(std::make_unique<Impl>(options)) {}
JitCache::~JitCache() = default;
JitCache::JitCache(JitCache&&) noexcept = default;
JitCache& JitCache::operator=(JitCache&&) noexcept = default;

// The images of `code` that run here (`object`, `ir`: either may be null,
// not both), or throws why none does.
std::vector<ParsedImage> JitCache::Impl::images_for_host(CodeId id, std::span<const std::byte> code,
                                                         const ParsedImage*& object,
                                                         const ParsedImage*& ir,
                                                         const RunsHere& runs_here) const {
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
      throw Error(errc::gpu_failed, "ifunc '" + images.front().name + "' is GPU code (" +
                                        available +
                                        ") and this Receiver runs none (ReceiverOptions::gpu)");
    }
    throw Error(errc::no_image_for_target, "ifunc '" + images.front().name + "' has no image for " +
                                               triple + " (it carries: " + available + ")");
  }
  return images;
}

void JitCache::Impl::prepare_confined(ConfinedPreparation::Job& job,
                                      ConfinedPreparation::Prepared& out) const {
  const ParsedImage* object = nullptr;
  const ParsedImage* ir = nullptr;
  // runs_here's cache belongs to the serving thread: this asks LLVM afresh.
  const std::vector<ParsedImage> images = images_for_host(
      job.id, job.code, object, ir,
      [this](const std::string& image) { return image == triple || same_target(image, triple); });
  const ParsedImage& image = confinable(job.codec, object, ir);
  // What is decided by the content is thrown above; what follows can fail
  // only for this process's reasons (descriptors, memory, the disk).
  try {
    if (store) {
      out.store_key = store_key(job.id, image, Confine::yes, job.window_shape);
      out.stored = store->find(out.store_key);
    }
    // A stored object compiles nothing unless it is refused, and a job not
    // used would be closed on the serving thread: its memfd's pages freed,
    // ~0.1 ms for heavy's (threechains-bench-compile-end, 2026-11-29).
    if (!out.stored) out.job = workers.prepare(image.name, image.bytes, !job.window_shape);
    // The bitcode where the window tier may need a second compile, or a
    // stored object that is refused, a first one (finish_loads).
    out.image =
        ParsedImage{image.name, image.triple, image.kind, image.deps,
                    job.window_shape || out.stored ? image.bytes : std::vector<std::byte>{}};
  } catch (const Error& error) {
    out.error = error;
    out.target_failed = true;
  }
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
    throw Error(
        errc::code_refused,
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
  return start_load_from(id, codec, code, nullptr, confine);
}

std::optional<LoadResult> JitCache::start_load(CodeId id, CodecId codec,
                                               std::vector<std::byte>&& code, Confine confine) {
  return start_load_from(id, codec, code, &code, confine);
}

// `owned`, if set, holds `code` and may be moved from: the container then
// travels to the preparation thread without a copy (for a 500 KB one the
// copy cost the serving thread ~1.7 ms on the 2-core VM, far more than its
// bytes' bandwidth: fresh pages, most likely).
//
// Every confined container is prepared there, small ones too: parsing it,
// keying it for the store, looking there and writing the worker's job took
// the serving thread 90-111 us of CPU for the counter's
// (threechains-bench-compile-end, 2026-11-30), every other peer
// waiting. The hop to the thread and back is nothing beside a worker's
// start (60-100 ms, docs/performance.md "The compile worker"); a load the store answers waits for
// it too (a window object's did already, for its verifier; not measured).
std::optional<LoadResult> JitCache::start_load_from(CodeId id, CodecId codec,
                                                    std::span<const std::byte> code,
                                                    std::vector<std::byte>* owned,
                                                    Confine confine) {
  if (confine == Confine::no) return load(id, codec, code, confine);
  if (std::optional<LoadResult> cached = already_loaded(id, confine)) return *cached;
  if (impl_->pending_loads.contains(id)) return std::nullopt;
  const auto start = std::chrono::steady_clock::now();
  if (!impl_->preparation) {
    try {
      impl_->preparation = std::make_unique<ConfinedPreparation>(
          [impl = impl_.get()](ConfinedPreparation::Job& job, ConfinedPreparation::Prepared& out) {
            impl->prepare_confined(job, out);
          },
          impl_->helper_cpus);
    } catch (const std::system_error& error) {  // no thread to be had
      throw Error(errc::jit_failed,
                  std::string("starting the thread that prepares compiles: ") + error.what());
    }
  }
  const uint64_t serial = impl_->next_serial++;
  const bool window_shape = impl_->windows_for_new_loads();
  impl_->preparation->submit(
      {serial, id, codec,
       owned != nullptr ? std::move(*owned) : std::vector<std::byte>(code.begin(), code.end()),
       window_shape});
  Impl::PendingLoad pending;
  pending.started = start;
  pending.preparing = true;
  pending.serial = serial;
  pending.checked_only = !window_shape;
  impl_->pending_loads.emplace(id, std::move(pending));
  sync_promotion_counts();
  return std::nullopt;
}

void JitCache::enter_confined(CodeId id, IfuncMain entry) {
  entries_.emplace(id, CachedIfunc{entry, &impl_->confined_codes.at(id)});
}

std::vector<JitCache::FinishedLoad> JitCache::finish_loads() {
  std::vector<FinishedLoad> finished;
  if (impl_->verification && impl_->verification->has_finished()) take_verdicts(finished);
  // Taken even with nothing pending: a cancelled load's result holds its
  // bitcode (and the store's object) until then.
  if (impl_->preparation && impl_->preparation->has_finished()) take_prepared(finished);
  // With none pending, too: what tc-compiles hands back for a cancelled
  // load (the worker it stopped) is taken and dropped (CompileWorkers::busy).
  if (!impl_->pending_loads.empty() || impl_->workers.busy()) take_compiled(finished);
  sync_promotion_counts();
  return finished;
}

void JitCache::take_verdicts(std::vector<FinishedLoad>& finished) {
  for (WindowVerification::Verified& verified : impl_->verification->take_finished()) {
    if (const auto gone = impl_->abandoned_links.find(verified.serial);
        gone != impl_->abandoned_links.end()) {
      impl_->discard_window_link(*gone->second, verified.link);  // its load was cancelled meanwhile
      impl_->abandoned_links.erase(gone);
      continue;
    }
    const auto it = impl_->pending_loads.find(verified.id);
    // None: a cancelled load whose window abandon() could not record.
    if (it == impl_->pending_loads.end() || it->second.in_window == nullptr ||
        it->second.serial != verified.serial)
      continue;
    Impl::PendingLoad pending = std::move(it->second);
    impl_->pending_loads.erase(it);
    FinishedLoad done{verified.id, std::nullopt, std::nullopt, verified.target_failed};
    // Every verdict answers its load or starts the next compile, whatever
    // one throws: the rest of this batch still comes.
    try {
      Impl::WindowSlot& slot = *std::exchange(pending.in_window, nullptr);
      std::optional<Error> refusal = impl_->settle_verdict(verified, pending, slot);
      if (!refusal) {  // written to the store by tc-verify once it accepted it (Job::store)
        const auto entry = reinterpret_cast<IfuncMain>(slot.code.entry());
        enter_confined(verified.id, entry);
        done.result = impl_->result_of(pending, entry, pending.from_store);
      } else if (!verified.target_failed && impl_->compile_again(verified.id, pending, *refusal)) {
        continue;
      } else {
        done.error = std::move(refusal);
      }
    } catch (const std::exception& error) {
      done.result.reset();
      done.error = Error(errc::jit_failed, "ifunc '" + pending.image.name + "': " + error.what());
      done.target_failed = true;
    }
    finished.push_back(std::move(done));
  }
}

void JitCache::take_prepared(std::vector<FinishedLoad>& finished) {
  for (ConfinedPreparation::Prepared& prepared : impl_->preparation->take_finished()) {
    const auto it = impl_->pending_loads.find(prepared.id);
    if (it == impl_->pending_loads.end() || !it->second.preparing ||
        it->second.serial != prepared.serial)
      continue;  // cancelled (and perhaps loading again since)
    Impl::PendingLoad& pending = it->second;
    FinishedLoad done{prepared.id, std::nullopt, std::nullopt, prepared.target_failed};
    try {
      if (prepared.error) {
        // What the content decides (not a container, no image for this
        // host, machine code) is refused before any compile, as load()
        // refuses it at once: not counted against the code.
        done.before_compile = !prepared.target_failed;
        done.error = std::move(prepared.error);
      } else {
        pending.image = std::move(prepared.image);
        pending.store_key = std::move(prepared.store_key);
        pending.preparing = false;
        if (prepared.stored) {
          IfuncMain entry = nullptr;
          switch (
              impl_->link_stored_aside(prepared.id, pending, std::move(*prepared.stored), entry)) {
            case Impl::Stored::verifying:
              continue;  // its verdict comes in a later call
            case Impl::Stored::linked:
              enter_confined(prepared.id, entry);
              done.result = impl_->result_of(pending, entry, true);
              break;
            // Compiled from the bitcode kept for it: its job written here,
            // on the serving thread, as only a refused stored object's is.
            case Impl::Stored::refused:
              prepared.job = impl_->workers.prepare(pending.image.name, pending.image.bytes,
                                                    pending.checked_only);
              break;
          }
        }
        if (!done.result) {
          impl_->workers.submit(prepared.id, std::move(prepared.job));
          continue;  // compiling: the worker's outcome comes in a later call
        }
      }
    } catch (const std::exception& error) {  // every load is answered, whatever one threw
      done.result.reset();
      done.error = Error(errc::jit_failed, "ifunc '" + pending.image.name + "': " + error.what());
      done.target_failed = true;
    }
    impl_->pending_loads.erase(it);
    finished.push_back(std::move(done));
  }
}

void JitCache::take_compiled(std::vector<FinishedLoad>& finished) {
  for (auto& [id, compiled] : impl_->workers.poll()) {
    const auto it = impl_->pending_loads.find(id);
    // Evicted meanwhile; or (cannot be: a cancelled compile's outcome is
    // dropped) one that is not compiling.
    if (it == impl_->pending_loads.end() || it->second.preparing || it->second.in_window != nullptr)
      continue;
    Impl::PendingLoad pending = std::move(it->second);
    impl_->pending_loads.erase(it);
    FinishedLoad done{id, std::nullopt, std::nullopt, compiled.target_failed};
    const bool window_object = impl_->window_object(compiled);
    try {
      if (compiled.error) {
        throw Error(static_cast<errc>(compiled.error->code().value()),
                    "ifunc '" + pending.image.name + "': " + compiled.error->context());
      }
      IfuncMain entry = nullptr;
      if (window_object) {
        entry = impl_->link_window_aside(id, pending, compiled.object);
        if (entry == nullptr) {
          impl_->pending_loads.emplace(id, std::move(pending));  // linked and verified beside
          continue;
        }
      } else {
        entry = impl_->link(id, CodecId::bitcode, pending.image, &compiled.object, Confine::yes);
      }
      if (impl_->store && !pending.store_key.empty())
        (void)impl_->store->store(pending.store_key, compiled.object);
      enter_confined(id, entry);
      done.result = impl_->result_of(pending, entry, false);
    } catch (const Error& error) {
      // The window tier's second compile, once, for the checked tier.
      if (window_object && impl_->compile_again(id, pending, error)) continue;
      done.error = error;
    } catch (const std::exception& error) {  // every outcome is handed back, whatever one threw
      done.error = Error(errc::jit_failed, "ifunc '" + pending.image.name + "': " + error.what());
      done.target_failed = true;
    }
    finished.push_back(std::move(done));
  }
}

bool JitCache::loading(CodeId id) const noexcept {
  return impl_->pending_loads.contains(id);
}

void JitCache::cancel_loads() noexcept {
  for (const auto& [id, pending] : impl_->pending_loads) {
    impl_->workers.cancel(id);
    if (pending.preparing) impl_->preparation->cancel(id);
    impl_->abandon(pending);
  }
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
  // Abandoned links too: their windows come back only in finish_loads; and
  // compiles tc-compiles has not handed back (a cancelled one's included).
  compiling_ = impl_->in_progress + impl_->pending_loads.size() + impl_->abandoned_links.size() +
               (impl_->workers.busy() ? 1 : 0);
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
  if (confined::WindowedCode* const windowed = ifunc.confined->windowed.get()) {
    windowed->serve(caller);
    return windowed->run(payload, size, target_args, impl_->arena ? &*impl_->arena : nullptr,
                         impl_->runner.options().time_budget);
  }
  impl_->runner.serve(caller, *ifunc.confined);
  return impl_->runner.run(ifunc.main, *ifunc.confined, payload, size, target_args);
}

std::size_t JitCache::invoke_each(const CachedIfunc& ifunc, std::span<const IfuncPayload> payloads,
                                  void* target_args, std::optional<ConfinedTrap>& trap,
                                  uint64_t caller) noexcept {
  trap.reset();
  confined::WindowedCode* const windowed =
      ifunc.confined != nullptr ? ifunc.confined->windowed.get() : nullptr;
  std::size_t returned = 0;
  if (windowed == nullptr) {
    for (; returned < payloads.size(); ++returned) {
      const IfuncPayload& payload = payloads[returned];
      trap = invoke(ifunc, payload.bytes, payload.size, target_args, caller);
      if (trap) break;
    }
    return returned;
  }
  windowed->serve(caller);
  const confined::ExposureArena* const arena = impl_->arena ? &*impl_->arena : nullptr;
  while (returned < payloads.size()) {
    const std::size_t ran = windowed->run_each(payloads.subspan(returned), target_args, arena,
                                               impl_->runner.options().time_budget, trap);
    returned += ran;
    if (trap || ran == 0) break;
  }
  return returned;
}

std::size_t JitCache::committed_bytes(CodeId id) const noexcept {
  const auto it = impl_->confined_codes.find(id);
  if (it == impl_->confined_codes.end()) return 0;
  std::size_t bytes = 0;
  for (const confined::Region& global : it->second.globals) bytes += global.end - global.begin;
  for (const std::vector<std::byte>& initial : it->second.initial) bytes += initial.size();
  if (const confined::WindowedCode* windowed = it->second.windowed.get()) {
    bytes += windowed->payload->size();
    for (const confined::WindowedCode::Data& data : windowed->data)
      bytes += data.bytes.size() + data.initial.size();
  }
  return bytes;
}

JitCache::WindowRefusals JitCache::window_refusals() const {
  return {impl_->window_refusal_count, impl_->last_window_refusal};
}

bool JitCache::in_window(const CachedIfunc& ifunc) const noexcept {
  return ifunc.confined != nullptr && ifunc.confined->windowed != nullptr;
}

std::string JitCache::confined_name(const CachedIfunc& ifunc) const {
  return ifunc.confined == nullptr ? std::string() : ifunc.confined->name;
}

void JitCache::expose(const std::vector<ExposedRegion>& regions) {
  impl_->exposed_by_address = regions;
  impl_->expose_all();
}

void JitCache::Impl::expose_all() {
  // A region the application exposes by address inside the arena (its
  // target_args, allocated there) is the arena's already, as allocated.
  std::vector<ExposedRegion> all;
  for (const ExposedRegion& region : exposed_by_address)
    if (!arena || !arena->contains(region.bytes.data(), region.bytes.size())) all.push_back(region);
  all.insert(all.end(), exposed_in_arena.begin(), exposed_in_arena.end());
  runner.expose(all);
  for (const auto& [id, code] : confined_codes) confined::Runner::clear_sites(code);
}

std::span<std::byte> JitCache::allocate_exposed(const std::string& name, std::size_t bytes,
                                                bool writable) {
  if (!impl_->arena) {
    impl_->arena.emplace();
    for (Impl::WindowSlot& slot : impl_->windows) impl_->arena->attach(slot.window);
  }
  const std::span<std::byte> memory = impl_->arena->allocate(bytes, writable);
  impl_->exposed_in_arena.push_back({name, memory, writable});
  impl_->expose_all();
  return memory;
}

bool JitCache::evict(CodeId id) {
  entries_.erase(id);
  if (const auto pending = impl_->pending_loads.find(id); pending != impl_->pending_loads.end()) {
    if (pending->second.preparing) impl_->preparation->cancel(id);
    impl_->abandon(pending->second);
    impl_->pending_loads.erase(pending);
    impl_->workers.cancel(id);
  }
  const bool evicted = impl_->evict(id);
  sync_promotion_counts();
  return evicted;
}

}  // namespace threechains
