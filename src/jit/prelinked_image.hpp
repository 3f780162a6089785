// A pre-linked ifunc image: machine code linked on the source at pack time
// (ld.lld -shared -Bsymbolic: a position-independent ELF shared object whose
// only relocations left are the base address and the imports), loaded here
// with no linker on the path. The loader maps the image's segments into one
// private mapping, fills the import slots through a resolver (the target's
// ImportPolicy decides what resolves), applies the base, and protects each
// page as its segment asks (never writable and executable at once). What the
// research prototype's dlopen does, without the file, the search path, the
// global symbol scope or the constructors (Two-Chains' idea of an image whose
// imports are patched through a table).
//
// Every offset and size the image gives is checked against the mapping before
// it is read or written: a malformed image is an Error(bad_container), never a
// write outside it. Images with what this loader does not do (native TLS,
// constructors, IRELATIVE) are refused with the reason, so the source can pack
// them as a relocatable object for JITLink instead.
#pragma once

#include <llvm/ADT/STLFunctionalExtras.h>
#include <llvm/ADT/StringRef.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace threechains::jit {

class ImageMemory;

// Whether `image` is an ELF shared object (what the pre-linked loader takes),
// as opposed to a relocatable object (what JITLink takes).
[[nodiscard]] bool is_prelinked_image(std::span<const std::byte> image) noexcept;

class PrelinkedImage {
 public:
  struct Function {
    uint64_t begin = 0;
    uint64_t end = 0;
    std::string name;
  };

  // The address an import resolves to: nonzero, or 0 for a weak import that
  // is absent. Throws (Error) to refuse or report a missing symbol.
  using Resolver = llvm::function_ref<uint64_t(llvm::StringRef symbol, bool weak)>;

  // Maps and links `image` into a block of `memory`, which must outlive the
  // image (it gets the block back); `name` names the ifunc in errors.
  [[nodiscard]] static PrelinkedImage load(std::span<const std::byte> image,
                                           const std::string& name, Resolver resolve,
                                           ImageMemory& memory);

  PrelinkedImage() = default;
  ~PrelinkedImage();
  PrelinkedImage(const PrelinkedImage&) = delete;
  PrelinkedImage& operator=(const PrelinkedImage&) = delete;
  PrelinkedImage(PrelinkedImage&& other) noexcept;
  PrelinkedImage& operator=(PrelinkedImage&& other) noexcept;

  // The address of a symbol the image exports, or nullptr.
  [[nodiscard]] void* find(llvm::StringRef symbol) const noexcept;
  // Its functions (for fault reports), from its symbol table.
  [[nodiscard]] const std::vector<Function>& functions() const noexcept { return functions_; }
  [[nodiscard]] uint64_t base() const noexcept { return reinterpret_cast<uint64_t>(base_); }

 private:
  void release() noexcept;

  ImageMemory* memory_ = nullptr;  // where base_ goes back: outlives this image (load)
  std::byte* base_ = nullptr;      // the block, owned
  std::size_t span_ = 0;
  std::vector<std::pair<std::string, uint64_t>> exports_;  // sorted by name
  std::vector<Function> functions_;
  uint64_t eh_frame_ = 0;  // registered with the unwinder while loaded
  std::size_t eh_frame_size_ = 0;
};

}  // namespace threechains::jit
