// JitCache: what injected code's imports bind to. Process symbols and
// dependency libraries (each a JITDylib of its own), every binding through
// the ImportPolicy; a refusal is remembered so the load's error names it.
#include "jit/jit_cache_impl.hpp"

namespace threechains {

bool JitCache::Impl::allow_process_symbol(llvm::StringRef name) {
  return allow_binding(name.str(), dlsym(RTLD_DEFAULT, name.str().c_str()));
}

bool JitCache::Impl::allow_binding(const std::string& symbol, const void* address) {
  if (policy.allows_symbol(symbol)) return true;
  const link_map* object = object_defining(address);
  if (object == nullptr) return false;  // not there at all: missing, not refused
  if (policy.allows_object(object->l_name)) return true;
  if (std::find(failure.refused.begin(), failure.refused.end(), symbol) == failure.refused.end())
    failure.refused.push_back(symbol);
  return false;
}

llvm::orc::JITDylib& JitCache::Impl::dependency(const std::string& library,
                                                const std::string& ifunc) {
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

bool JitCache::Impl::allow_from(const DependencyObject& object, const std::string& symbol,
                                const void* address) {
  if (address != nullptr && object_defining(address) == object.self) return true;
  return allow_binding(symbol, address);
}

const JitCache::Impl::DependencyObject& JitCache::Impl::dependency_object(
    const std::string& library, const std::string& ifunc) {
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
  const auto library_handle = llvm::sys::DynamicLibrary::getPermanentLibrary(library.c_str(), &why);
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

}  // namespace threechains
