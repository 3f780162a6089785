#include "jit/bitcode_strip.hpp"

#include <threechains/error.hpp>

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/MemoryBuffer.h>

namespace threechains {

std::vector<std::byte> strip_bitcode(const std::vector<std::byte>& bitcode) {
  llvm::LLVMContext context;
  const llvm::StringRef bytes(reinterpret_cast<const char*>(bitcode.data()), bitcode.size());
  auto module = llvm::parseBitcodeFile(llvm::MemoryBufferRef(bytes, "ifunc"), context);
  if (!module) {
    throw Error(errc::bad_container, "not LLVM bitcode: " + llvm::toString(module.takeError()));
  }
  if (llvm::NamedMDNode* ident = (*module)->getNamedMetadata("llvm.ident"))
    (*module)->eraseNamedMetadata(ident);
  (*module)->setSourceFileName("");
  llvm::SmallVector<char, 0> out;
  llvm::BitcodeWriter writer(out);
  writer.writeModule(**module);
  writer.writeStrtab();  // no writeSymtab(): the LTO symbol table is of no use to a JIT
  const auto* begin = reinterpret_cast<const std::byte*>(out.data());
  return {begin, begin + out.size()};
}

}  // namespace threechains
