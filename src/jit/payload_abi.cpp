// payload_init_order: the argument order of a library's payload_init, from the
// function's type in its bitcode (payload_abi.hpp). Reads, compiles nothing.
#include "jit/payload_abi.hpp"

#include "jit/container_images.hpp"

#include <threechains/error.hpp>

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>

namespace threechains {

PayloadInitOrder payload_init_order(std::span<const std::byte> container,
                                    const std::string& function) {
  for (const ParsedImage& image : parse_container(container)) {
    if (image.kind != CodecId::bitcode) continue;
    const llvm::MemoryBufferRef bytes(
        llvm::StringRef(reinterpret_cast<const char*>(image.bytes.data()), image.bytes.size()),
        image.name);
    llvm::LLVMContext context;
    // Lazy: only the function's prototype is read, not every body.
    auto module = llvm::getLazyBitcodeModule(bytes, context);
    if (!module) {
      throw Error(errc::bad_container, "ifunc '" + image.name + "': bad bitcode for " +
                                           image.triple + ": " +
                                           llvm::toString(module.takeError()));
    }
    const llvm::Function* f = (*module)->getFunction(function);
    if (f == nullptr || f->isDeclaration()) continue;
    const llvm::FunctionType* type = f->getFunctionType();
    if (type->getNumParams() != 4) return PayloadInitOrder::unknown;
    const llvm::Type* fourth = type->getParamType(3);
    if (fourth->isIntegerTy()) return PayloadInitOrder::payload_first;
    if (fourth->isPointerTy()) return PayloadInitOrder::source_first;
    return PayloadInitOrder::unknown;
  }
  return PayloadInitOrder::unknown;
}

}  // namespace threechains
