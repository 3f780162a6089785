// container_imports: what each image of a container leaves to the target to
// resolve. Read with LLVM's own readers, nothing compiled or linked.
#include "jit/container_images.hpp"

#include <threechains/container.hpp>
#include <threechains/error.hpp>

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>

#include <algorithm>

namespace threechains {
namespace {

std::vector<std::string> bitcode_imports(const ParsedImage& image,
                                         const llvm::MemoryBufferRef& bytes) {
  llvm::LLVMContext context;
  auto module = llvm::parseBitcodeFile(bytes, context);
  if (!module) {
    throw Error(errc::bad_container, "ifunc '" + image.name + "': bad bitcode for " + image.triple +
                                         ": " + llvm::toString(module.takeError()));
  }
  std::vector<std::string> names;
  for (const llvm::Function& f : **module) {
    if (f.isDeclaration() && !f.isIntrinsic()) names.push_back(f.getName().str());
  }
  for (const llvm::GlobalVariable& g : (*module)->globals()) {
    if (g.isDeclaration()) names.push_back(g.getName().str());
  }
  return names;
}

std::vector<std::string> object_imports(const ParsedImage& image,
                                        const llvm::MemoryBufferRef& bytes) {
  auto object = llvm::object::ObjectFile::createObjectFile(bytes);
  if (!object) {
    throw Error(errc::bad_container, "ifunc '" + image.name + "': bad object for " + image.triple +
                                         ": " + llvm::toString(object.takeError()));
  }
  std::vector<std::string> names;
  for (const llvm::object::SymbolRef& symbol : (*object)->symbols()) {
    auto flags = symbol.getFlags();
    auto name = symbol.getName();
    if (!flags || !name) {
      llvm::consumeError(flags.takeError());
      llvm::consumeError(name.takeError());
      continue;
    }
    if ((*flags & llvm::object::SymbolRef::SF_Undefined) != 0 && !name->empty())
      names.push_back(name->str());
  }
  return names;
}

}  // namespace

std::vector<std::vector<std::string>> container_imports(std::span<const std::byte> container) {
  std::vector<std::vector<std::string>> all;
  for (const ParsedImage& image : parse_container(container)) {
    const llvm::MemoryBufferRef bytes(
        llvm::StringRef(reinterpret_cast<const char*>(image.bytes.data()), image.bytes.size()),
        image.name);
    std::vector<std::string> names = image.kind == CodecId::bitcode ? bitcode_imports(image, bytes)
                                                                    : object_imports(image, bytes);
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    all.push_back(std::move(names));
  }
  return all;
}

}  // namespace threechains
