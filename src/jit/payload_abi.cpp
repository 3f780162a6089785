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

namespace {

// The order in one bitcode image, or unknown (no such function, not four
// parameters, or bitcode this LLVM cannot read: the JIT would say so itself).
PayloadInitOrder order_in(const ParsedImage& image, const std::string& function) {
  const llvm::MemoryBufferRef bytes(
      llvm::StringRef(reinterpret_cast<const char*>(image.bytes.data()), image.bytes.size()),
      image.name);
  llvm::LLVMContext context;
  // Lazy: only the function's prototype is read, not every body.
  auto module = llvm::getLazyBitcodeModule(bytes, context);
  if (!module) {
    llvm::consumeError(module.takeError());
    return PayloadInitOrder::unknown;
  }
  const llvm::Function* f = (*module)->getFunction(function);
  if (f == nullptr || f->isDeclaration()) return PayloadInitOrder::unknown;
  const llvm::FunctionType* type = f->getFunctionType();
  if (type->getNumParams() != 4) return PayloadInitOrder::unknown;
  const llvm::Type* fourth = type->getParamType(3);
  if (fourth->isIntegerTy()) return PayloadInitOrder::payload_first;
  if (fourth->isPointerTy()) return PayloadInitOrder::source_first;
  return PayloadInitOrder::unknown;
}

}  // namespace

PayloadInitOrder payload_init_order(std::span<const std::byte> container,
                                    const std::string& function) {
  const std::vector<ParsedImage> images = parse_container(container);
  // This host's image first (the one that runs here), then any other.
  const std::string host = host_triple();
  for (const bool this_host : {true, false}) {
    for (const ParsedImage& image : images) {
      if (image.kind != CodecId::bitcode || same_target(image.triple, host) != this_host) continue;
      if (const PayloadInitOrder order = order_in(image, function);
          order != PayloadInitOrder::unknown)
        return order;
    }
  }
  return PayloadInitOrder::unknown;
}

}  // namespace threechains
