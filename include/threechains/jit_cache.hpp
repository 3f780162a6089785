// JitCache: the target's cache of callable ifuncs, keyed by code identity.
// Loading compiles bitcode with ORC for this host's CPU, or links a relocatable
// object with JITLink; each ifunc lives in its own JITDylib with its own
// ResourceTracker, so helper symbols of two ifuncs never clash and evicting one
// frees its code. LLVM stays behind the pimpl.
#pragma once

#include <threechains/frame.hpp>
#include <threechains/import_policy.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>

namespace threechains {

// The C ABI of an ifunc's entry point, <name>_main.
using IfuncMain = void (*)(void* payload, std::size_t payload_size, void* target_args);

struct JitOptions {
  // The middle-end pipeline run on bitcode before code generation, with this
  // host's CPU and features (so the vectorisers see its vector width):
  // 0 none, 1..3 LLVM's O1..O3.
  int optimisation_level = 2;
  // Codegen level for bitcode: 0 none, 1 less, 2 default, 3 aggressive.
  int codegen_level = 2;
  // If set, every object the JIT links is also written to this directory
  // (for disassembly: what the host really runs).
  std::string dump_objects_to;
  // Opt-in persistent code cache: objects compiled from bitcode are kept in
  // this directory, keyed by code identity, this host's CPU and features, the
  // LLVM version and the levels above, so a restarted target links instead of
  // compiling. Corrupt or foreign entries are ignored and replaced. The
  // directory is created (0700) if absent and must be private to this user
  // (its entries run as native code): otherwise constructing the cache throws.
  std::string code_cache_directory;
  // What injected code may import (symbols, dependency libraries); checked
  // when it is linked, before any of it runs. Default: the safe set.
  ImportPolicy imports;
};

struct LoadResult {
  IfuncMain entry = nullptr;
  std::chrono::nanoseconds compile_time{0};  // parse + compile/link + lookup
  std::string triple;                        // the image chosen for this host
  std::string name;                          // the ifunc's name
  bool from_code_cache = false;  // linked from JitOptions::code_cache_directory, not compiled
};

class JitCache {
 public:
  explicit JitCache(const JitOptions& options = {});
  ~JitCache();
  JitCache(const JitCache&) = delete;
  JitCache& operator=(const JitCache&) = delete;
  JitCache(JitCache&&) noexcept;
  JitCache& operator=(JitCache&&) noexcept;

  // Hot path: the entry point for `id`, or nullptr if it is not cached.
  [[nodiscard]] IfuncMain find(CodeId id) const noexcept {
    const auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : it->second;
  }
  [[nodiscard]] bool contains(CodeId id) const noexcept { return entries_.contains(id); }
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }

  // Verifies that `code` hashes to `id`, picks the image for this host, and
  // compiles or links it. Throws Error (bad_container, no_image_for_target,
  // code_identity_mismatch, dependency_not_found, symbol_not_found,
  // import_refused, jit_failed)
  // and leaves the cache as it was. Loading an id already cached returns it.
  LoadResult load(CodeId id, CodecId codec, std::span<const std::byte> code);

  // Another symbol of a loaded ifunc (e.g. <name>_payload_init), or nullptr if
  // the ifunc is not loaded or does not define it.
  [[nodiscard]] void* lookup(CodeId id, const std::string& symbol);

  // Removes an ifunc and frees its code. Returns false if it was not cached.
  bool evict(CodeId id);

  // Evicts everything.
  void clear() {
    while (!entries_.empty()) (void)evict(entries_.begin()->first);
  }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::unordered_map<CodeId, IfuncMain> entries_;
};

}  // namespace threechains
