// JitCache: code into JITDylibs. Objects linked by JITLink, bitcode
// compiled here or (confined) by a compile worker, objects from the store,
// pre-linked images mapped without a linker, and eviction.
#include "jit/jit_cache_impl.hpp"

namespace threechains {

IfuncMain JitCache::Impl::link_prelinked(CodeId id, const ParsedImage& image) {
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
  jit::PrelinkedImage loaded =
      jit::PrelinkedImage::load(image.bytes, image.name, resolve, image_memory);
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
    throw Error(errc::symbol_not_found,
                "ifunc '" + image.name + "' (" + image.triple + "): Symbols not found: " + absent);
  }
  auto* entry = reinterpret_cast<IfuncMain>(loaded.find(image.name + "_main"));
  if (entry == nullptr) {
    throw Error(errc::symbol_not_found, "ifunc '" + image.name + "' (" + image.triple +
                                            "): its image defines no '" + image.name + "_main'");
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

bool JitCache::Impl::release_prelinked(CodeId id) {
  const auto it = prelinked.find(id);
  if (it == prelinked.end()) return false;
  functions.forget(it->second.base());
  prelinked.erase(it);
  return true;
}

std::string JitCache::Impl::store_key(CodeId id, const ParsedImage& image, Confine confine,
                                      bool window_shape) const {
  ensure_sodium();
  std::array<unsigned char, crypto_generichash_BYTES> digest{};
  crypto_generichash(digest.data(), digest.size(),
                     reinterpret_cast<const unsigned char*>(image.bytes.data()), image.bytes.size(),
                     nullptr, 0);
  std::string blake2b;
  static constexpr char kDigits[] = "0123456789abcdef";
  for (const unsigned char byte : digest) {
    blake2b += kDigits[byte >> 4];
    blake2b += kDigits[byte & 15];
  }
  return "threechains object 1\nid " + hex_id(id) + "\nimage " + image.triple + "\nblake2b " +
         blake2b + "\nconfined " + (confine == Confine::yes ? "1" : "0") +
         (confine == Confine::yes && window_shape ? "\nwindow tier" : "") + "\n" + host_key;
}

IfuncMain JitCache::Impl::link_stored(CodeId id, const ParsedImage& image, const std::string& key,
                                      Confine confine) {
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

IfuncMain JitCache::Impl::link_stored_object(CodeId id, const ParsedImage& image,
                                             const std::vector<std::byte>& object) {
  try {
    return link(id, CodecId::bitcode, image, &object, Confine::yes);
  } catch (const Error&) {
    return nullptr;  // as link_stored: compile instead
  }
}

IfuncMain JitCache::Impl::load(CodeId id, CodecId codec, const ParsedImage& image, bool& from_store,
                               Confine confine) {
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

IfuncMain JitCache::Impl::load_confined(CodeId id, const ParsedImage& image, bool& from_store) {
  const bool window_shape = windows_for_new_loads();
  std::string key = store ? store_key(id, image, Confine::yes, window_shape) : std::string();
  if (const IfuncMain entry = link_stored(id, image, key, Confine::yes)) {
    from_store = true;
    return entry;
  }
  CompileWorkers::Outcome compiled = workers.compile(image.name, image.bytes, !window_shape);
  if (!window_object(compiled)) return link_compiled(id, image, compiled, key);
  try {
    return link_compiled(id, image, compiled, key);
  } catch (const Error& error) {
    // The window tier could not take what the worker made of it (the
    // verifier refused it, it did not link in a window, or no window was
    // left): the checked tier's compile, as finish_loads does.
    before_checked_retry(error, key);
    CompileWorkers::Outcome checked = workers.compile(image.name, image.bytes, true);
    return link_compiled(id, image, checked, key);
  }
}

IfuncMain JitCache::Impl::link_compiled(CodeId id, const ParsedImage& image,
                                        CompileWorkers::Outcome& compiled, const std::string& key) {
  if (compiled.error) {
    throw Error(static_cast<errc>(compiled.error->code().value()),
                "ifunc '" + image.name + "': " + compiled.error->context());
  }
  const IfuncMain entry = link(id, CodecId::bitcode, image, &compiled.object, Confine::yes);
  if (store && !key.empty()) (void)store->store(key, compiled.object);
  return entry;
}

IfuncMain JitCache::Impl::link(CodeId id, CodecId codec, const ParsedImage& image,
                               const std::vector<std::byte>* object, Confine confine) {
  if (codec == CodecId::binary && object == nullptr && jit::is_prelinked_image(image.bytes))
    return link_prelinked(id, image);
  // The window tier: linked into a window of its own, against nothing
  // outside it (shaped code imports nothing; an object that does fails to
  // link), and verified before it is used.
  no_window_for_link = false;
  if (confine == Confine::yes && object != nullptr && window_tier && claims_window_shape(*object))
    return link_window_here(id, image.name, *object);
  const std::string entry_name = image.name + "_main";
  failure = {};  // what this load's diagnostics and errors collect
  llvm::orc::JITDylib& jd = acquire_dylib();
  try {
    for (const std::string& library : image.deps)
      jd.addToLinkOrder(dependency(library, image.name));
    const llvm::StringRef bytes(reinterpret_cast<const char*>(image.bytes.data()),
                                image.bytes.size());
    if (object != nullptr) {
      const llvm::StringRef compiled(reinterpret_cast<const char*>(object->data()), object->size());
      if (llvm::Error e =
              jit->addObjectFile(jd, llvm::MemoryBuffer::getMemBufferCopy(compiled, image.name))) {
        throw Error(errc::jit_failed, "ifunc '" + image.name + "': " + message_of(std::move(e)));
      }
    } else if (codec == CodecId::bitcode) {
      // Confined bitcode never compiles in this process: load_confined
      // hands it to a worker, and only its object comes here.
      if (confine == Confine::yes)
        throw Error(errc::jit_failed,
                    "ifunc '" + image.name + "': confined bitcode to compile here");
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
                                             image.triple + ": " + message_of(module.takeError()));
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
      throw Error(errc::jit_failed, "ifunc '" + image.name + "': " + diagnosed +
                                        (diagnosed.empty() ? "" : "; ") + failure.message);
    }
    if (confine == Confine::yes) confined_codes[id] = confined_code(jd, id, image.name);
    dylibs[id].push_back(&jd);
    return address->toPtr<IfuncMain>();
  } catch (...) {
    confined_codes.erase(id);
    if (llvm::Error e = jit->getExecutionSession().removeJITDylib(jd))
      llvm::consumeError(std::move(e));
    throw;
  }
}

confined::Code JitCache::Impl::confined_code(llvm::orc::JITDylib& jd, CodeId id,
                                             const std::string& name) {
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

llvm::orc::JITDylib& JitCache::Impl::acquire_dylib() {
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

llvm::Error JitCache::Impl::release_dylib(llvm::orc::JITDylib& jd) {
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

bool JitCache::Impl::runs_here(const std::string& image_triple) {
  if (image_triple == triple) return true;
  if (const auto known = runs_on_host.find(image_triple); known != runs_on_host.end())
    return known->second;
  const bool same = same_target(image_triple, triple);
  if (runs_on_host.size() < 64) runs_on_host.emplace(image_triple, same);  // triples are few
  return same;
}

bool JitCache::Impl::evict(CodeId id) {
  drop_promotion(id);
  if (const auto in_window = window_of.find(id); in_window != window_of.end()) {
    WindowSlot& slot = *in_window->second;
    forget_window_code(id);
    // A window whose code could not be unlinked is not given to another
    // code: it is left, its address space held, until the cache goes.
    if (!slot.code.unlink())
      throw Error(errc::jit_failed,
                  "evicting ifunc " + hex_id(id) + ": its window's code could not be unlinked");
    release_window(slot);
    return true;
  }
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

}  // namespace threechains
