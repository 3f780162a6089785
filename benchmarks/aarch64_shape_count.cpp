// threechains-bench-aarch64-shape: what the window shape of issue 33 costs
// on aarch64, counted in instructions, on any host.
//
// The kernels of threechains-bench-window (benchmarks/kernels/saxpy.c and
// chase.c, as bitcode) are optimised by the host optimiser for an aarch64
// CPU, then compiled twice for it: as they are, and after shape_for_window
// (x21 + the low 32 bits of each pointer, compiled with +reserve-x21 and no
// SVE). The shaped object must be accepted by the aarch64 verifier, as it
// is linked into a window here by JITLink. For every loop (a backward
// branch) whose body is straight-line, the instructions it runs per
// iteration are counted in both: for such a loop that is exactly what it
// executes per trip, so the ratio is the dynamic instruction-count ratio
// of issue 33's aarch64 goal, which an x86 machine can measure without
// qemu (whose time would mean little). What it cannot say: cycles. The
// window tier does not yet run on aarch64 (docs/security.md, "The aarch64
// verifier").
#include "confine/pass.hpp"
#include "confine/verify_aarch64.hpp"
#include "confine/window.hpp"
#include "jit/host_optimiser.hpp"
#include "jit/window_memory.hpp"

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/MapperJITLinkMemoryManager.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/Orc/SelfExecutorProcessControl.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tc = threechains;

namespace {

template <class T>
T checked(llvm::Expected<T> value, const std::string& what) {
  if (!value) throw std::runtime_error(what + ": " + llvm::toString(value.takeError()));
  return std::move(*value);
}

std::unique_ptr<llvm::TargetMachine> machine(const std::string& cpu, bool window) {
  std::string error;
  const llvm::Triple triple("aarch64-unknown-linux-gnu");
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (target == nullptr) throw std::runtime_error("no aarch64 target in this LLVM: " + error);
  return std::unique_ptr<llvm::TargetMachine>(target->createTargetMachine(
      triple, cpu, window ? tc::kAarch64WindowFeatures : "", llvm::TargetOptions{},
      llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOptLevel::Default));
}

// The kernel's module optimised for `cpu`, then shaped if `window`.
std::unique_ptr<llvm::Module> compiled_module(const char* bitcode, llvm::LLVMContext& context,
                                              const std::string& cpu, bool window) {
  auto buffer = llvm::MemoryBuffer::getFile(bitcode);
  if (!buffer) throw std::runtime_error(std::string("cannot read ") + bitcode);
  std::unique_ptr<llvm::Module> module =
      checked(llvm::parseBitcodeFile(**buffer, context), bitcode);
  // clang wrote this host's CPU and features into the functions; the
  // target machine's are the ones that count.
  for (llvm::Function& f : *module)
    for (const char* attribute : {"target-cpu", "target-features", "tune-cpu"})
      f.removeFnAttr(attribute);
  tc::HostOptimiser(machine(cpu, window), 2).run(*module);
  if (window) tc::shape_for_window(*module, "kernel");
  return module;
}

// The A64 words of function `name` in `object`.
std::vector<uint32_t> function_words(const llvm::MemoryBuffer& object, const std::string& name) {
  auto file =
      checked(llvm::object::ObjectFile::createObjectFile(object.getMemBufferRef()), "the object");
  for (const llvm::object::SymbolRef& symbol : file->symbols()) {
    if (checked(symbol.getName(), "a symbol") != name) continue;
    const llvm::object::section_iterator section = checked(symbol.getSection(), name);
    const llvm::StringRef contents = checked(section->getContents(), name);
    const uint64_t offset = checked(symbol.getValue(), name);
    const uint64_t size = llvm::object::ELFSymbolRef(symbol).getSize();
    std::vector<uint32_t> words(size / 4);
    std::memcpy(words.data(), contents.data() + offset, words.size() * 4);
    return words;
  }
  throw std::runtime_error("no function " + name + " in the object");
}

// The straight-line loops of a function: [target, branch] of each backward
// branch whose body holds no other branch. Their sizes, in order.
std::vector<std::size_t> straight_loops(const std::vector<uint32_t>& words) {
  const auto branch_offset = [](uint32_t w) -> std::optional<int64_t> {
    const auto sign = [](uint32_t value, unsigned bits) {
      const auto v = static_cast<int64_t>(value);
      return v >= (int64_t{1} << (bits - 1)) ? v - (int64_t{1} << bits) : v;
    };
    if ((w & 0x7c000000) == 0x14000000) return sign(w & 0x3ffffff, 26);       // b, bl
    if ((w & 0x7e000000) == 0x34000000) return sign((w >> 5) & 0x7ffff, 19);  // cbz
    if ((w & 0x7e000000) == 0x36000000) return sign((w >> 5) & 0x3fff, 14);   // tbz
    if ((w & 0xff000000) == 0x54000000) return sign((w >> 5) & 0x7ffff, 19);  // b.cond
    return std::nullopt;
  };
  std::vector<std::size_t> loops;
  for (std::size_t at = 0; at < words.size(); ++at) {
    const std::optional<int64_t> offset = branch_offset(words[at]);
    if (!offset || *offset > 0 || static_cast<int64_t>(at) + *offset < 0) continue;
    const auto start = static_cast<std::size_t>(static_cast<int64_t>(at) + *offset);
    bool straight = true;
    for (std::size_t i = start; i < at; ++i) straight = straight && !branch_offset(words[i]);
    if (straight) loops.push_back(at - start + 1);
  }
  return loops;
}

// The shaped module linked into a window and verified there: only code the
// verifier accepts is counted.
void verify_in_window(llvm::MemoryBuffer& object, const std::vector<std::string>& entries) {
  tc::confined::Window window;
  auto session = std::make_unique<llvm::orc::ExecutionSession>(
      checked(llvm::orc::SelfExecutorProcessControl::Create(), "the process"));
  auto mapper = std::make_unique<tc::jit::WindowMemoryMapper>(window);
  tc::jit::WindowMemoryMapper* mapped = mapper.get();
  auto layer = std::make_unique<llvm::orc::ObjectLinkingLayer>(
      *session, std::make_unique<llvm::orc::MapperJITLinkMemoryManager>(std::size_t{1} << 20,
                                                                        std::move(mapper)));
  llvm::orc::JITDylib& dylib = session->createBareJITDylib("aarch64");
  if (auto error = layer->add(dylib, llvm::MemoryBuffer::getMemBufferCopy(object.getBuffer())))
    throw std::runtime_error(llvm::toString(std::move(error)));
  std::vector<uint64_t> addresses;
  for (const std::string& name : entries)
    addresses.push_back(
        checked(session->lookup({&dylib}, session->intern(name)), name).getAddress().getValue());
  const std::vector<tc::confined::CodeRange> code = mapped->executable_code();
  const tc::confined::Verdict verdict = tc::confined::verify_window_code_aarch64(
      {code, addresses, reinterpret_cast<uint64_t>(window.base())});
  if (auto error = session->endSession()) llvm::consumeError(std::move(error));
  layer.reset();
  if (!verdict) throw std::runtime_error("the aarch64 verifier refused: " + verdict.refusal);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the window shape (issue 33) on aarch64, in instructions per loop trip"};
  std::vector<std::string> cpus = {"neoverse-n1", "a64fx", "cortex-a72"};
  std::string json;
  std::string objects;
  app.add_option("--cpu", cpus, "aarch64 CPUs to compile for");
  app.add_option("--objects", objects,
                 "write each module and object here (<cpu>-<kernel>-{native,window}.{ll,o})");
  app.add_option("--json", json, "append one JSON line per loop to this file");
  CLI11_PARSE(app, argc, argv);
  LLVMInitializeAArch64TargetInfo();
  LLVMInitializeAArch64Target();
  LLVMInitializeAArch64TargetMC();
  LLVMInitializeAArch64AsmPrinter();
  struct Kernel {
    const char* name;
    const char* bitcode;
  };
  const Kernel kernels[] = {{"saxpy", THREECHAINS_BENCH_SAXPY_BC},
                            {"chase", THREECHAINS_BENCH_CHASE_BC}};
  std::FILE* out = json.empty() ? nullptr : std::fopen(json.c_str(), "a");
  try {
    fmt::print("{:<12} {:<7} {:>5} {:>13} {:>13} {:>7}\n", "cpu", "kernel", "loop", "native instr",
               "window instr", "ratio");
    for (const std::string& cpu : cpus) {
      for (const Kernel& kernel : kernels) {
        std::vector<std::size_t> loops[2];
        for (const bool window : {false, true}) {
          llvm::LLVMContext context;
          std::unique_ptr<llvm::Module> module =
              compiled_module(kernel.bitcode, context, cpu, window);
          if (!objects.empty()) {
            std::error_code error;
            llvm::raw_fd_ostream ir(fmt::format("{}/{}-{}-{}.ll", objects, cpu, kernel.name,
                                                window ? "window" : "native"),
                                    error);
            module->print(ir, nullptr);
          }
          std::unique_ptr<llvm::TargetMachine> target = machine(cpu, window);
          std::unique_ptr<llvm::MemoryBuffer> object =
              checked(llvm::orc::SimpleCompiler(*target)(*module), "compiling");
          if (!objects.empty()) {
            const std::string path = fmt::format("{}/{}-{}-{}.o", objects, cpu, kernel.name,
                                                 window ? "window" : "native");
            std::FILE* file = std::fopen(path.c_str(), "wb");
            if (file == nullptr) throw std::runtime_error("cannot write " + path);
            std::fwrite(object->getBufferStart(), 1, object->getBufferSize(), file);
            std::fclose(file);
          }
          if (window) verify_in_window(*object, {kernel.name});
          loops[window ? 1 : 0] = straight_loops(function_words(*object, kernel.name));
        }
        if (loops[0].size() != loops[1].size())
          throw std::runtime_error(fmt::format("{} on {}: {} loops native, {} shaped", kernel.name,
                                               cpu, loops[0].size(), loops[1].size()));
        for (std::size_t i = 0; i < loops[0].size(); ++i) {
          const double ratio = static_cast<double>(loops[1][i]) / static_cast<double>(loops[0][i]);
          fmt::print("{:<12} {:<7} {:>5} {:>13} {:>13} {:>6.2f}x\n", cpu, kernel.name, i,
                     loops[0][i], loops[1][i], ratio);
          if (out != nullptr)
            std::fprintf(out,
                         "{\"bench\":\"aarch64-shape\",\"cpu\":\"%s\",\"kernel\":\"%s\","
                         "\"loop\":%zu,\"native_instructions\":%zu,\"window_instructions\":%zu,"
                         "\"ratio\":%.3f}\n",
                         cpu.c_str(), kernel.name, i, loops[0][i], loops[1][i], ratio);
        }
      }
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "threechains-bench-aarch64-shape: %s\n", error.what());
    return 1;
  }
  if (out != nullptr) std::fclose(out);
  return 0;
}
