// What window_memory.hpp says.
#include "jit/window_memory.hpp"

#include <threechains/error.hpp>

#include <llvm/ExecutionEngine/JITLink/JITLink.h>
#include <llvm/ExecutionEngine/Orc/Shared/AllocationActions.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/Memory.h>
#include <llvm/Support/Process.h>

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

namespace threechains::jit {

using llvm::orc::ExecutorAddr;

namespace {

llvm::Error failure(const std::string& what) {
  return llvm::make_error<llvm::StringError>(what, llvm::inconvertibleErrorCode());
}

bool has(llvm::orc::MemProt protection, llvm::orc::MemProt flag) {
  return (static_cast<unsigned>(protection) & static_cast<unsigned>(flag)) != 0;
}

std::size_t whole_pages(std::size_t bytes, std::size_t page) {
  return (bytes + page - 1) / page * page;
}

}  // namespace

WindowMemoryMapper::~WindowMemoryMapper() {
  std::vector<ExecutorAddr> left;
  for (const auto& [address, bytes] : reservations_) left.push_back(address);
  release(left, [](llvm::Error e) { llvm::consumeError(std::move(e)); });
}

unsigned int WindowMemoryMapper::getPageSize() {
  return llvm::sys::Process::getPageSizeEstimate();
}

void WindowMemoryMapper::reserve(size_t bytes, OnReservedFunction on_reserved) {
  std::span<std::byte> pages;
  try {
    const std::lock_guard<std::mutex> lock(mutex_);
    pages = window_.allocate(bytes, true);
    // Inaccessible until a graph is prepared there: what the window's code
    // could otherwise write in the reservation's unused pages (and read
    // back for another caller, or leave for the next code in the window)
    // would outlive every wipe (an attacker review, 2026-11-28).
    if (mprotect(pages.data(), whole_pages(bytes, getPageSize()), PROT_NONE) != 0)
      throw Error(
          errc::limit_exceeded,
          std::string("cannot protect a window's code reservation: ") + std::strerror(errno));
    reservations_[ExecutorAddr::fromPtr(pages.data())] = whole_pages(bytes, getPageSize());
  } catch (const Error& error) {
    return on_reserved(failure(error.what()));
  }
  on_reserved(llvm::orc::ExecutorAddrRange(ExecutorAddr::fromPtr(pages.data()),
                                           llvm::orc::ExecutorAddrDiff(pages.size())));
}

char* WindowMemoryMapper::prepare(llvm::jitlink::LinkGraph& graph, ExecutorAddr /*address*/,
                                  size_t content_size) {
  // Working memory outside the window, from the graph's own allocator:
  // the window's pages stay inaccessible until initialize() copies the
  // linked segment there, where a failure to open them is reported.
  return graph.allocateBuffer(content_size).data();
}

void WindowMemoryMapper::initialize(AllocInfo& allocation, OnInitializedFunction on_initialized) {
  ExecutorAddr lowest(~uint64_t{0});
  ExecutorAddr highest(0);
  std::vector<confined::CodeRange> code;
  std::vector<std::span<std::byte>> data;
  // On failure, what was opened so far is dropped again: the next graph
  // linked there reads nothing of this one.
  const auto refuse = [&](llvm::Error error) {
    if (lowest < highest)
      (void)mmap(lowest.toPtr<void*>(), whole_pages(highest - lowest, getPageSize()), PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    on_initialized(std::move(error));
  };
  for (const AllocInfo::SegInfo& segment : allocation.Segments) {
    const ExecutorAddr base = allocation.MappingBase + segment.Offset;
    const std::size_t size = segment.ContentSize + segment.ZeroFillSize;
    lowest = std::min(lowest, base);
    highest = std::max(highest, base + size);
    const llvm::orc::MemProt protection = segment.AG.getMemProt();
    if (has(protection, llvm::orc::MemProt::Write) && has(protection, llvm::orc::MemProt::Exec)) {
      return refuse(
          failure("a segment asks to be writable and executable in a confinement window"));
    }
    if (mprotect(base.toPtr<void*>(), whole_pages(size, getPageSize()), PROT_READ | PROT_WRITE) !=
        0) {
      return refuse(failure(std::string("cannot open window pages for linked code: ") +
                            std::strerror(errno)));
    }
    std::memcpy(base.toPtr<void*>(), segment.WorkingMem, segment.ContentSize);
    std::memset((base + segment.ContentSize).toPtr<void*>(), 0, segment.ZeroFillSize);
    if (const std::error_code ec = llvm::sys::Memory::protectMappedMemory(
            llvm::sys::MemoryBlock(base.toPtr<void*>(), size),
            llvm::orc::toSysMemoryProtectionFlags(protection))) {
      return refuse(llvm::errorCodeToError(ec));
    }
    if (has(protection, llvm::orc::MemProt::Exec)) {
      llvm::sys::Memory::InvalidateInstructionCache(base.toPtr<void*>(), size);
      code.push_back({base.getValue(), {base.toPtr<const std::byte*>(), segment.ContentSize}});
    }
    // Whole pages: the page's protection is the segment's, so what the code
    // writes past the segment's end on its last page must be set back too
    // (a test wrote a marker there for one caller and read it for the next).
    if (has(protection, llvm::orc::MemProt::Write) && size != 0)
      data.emplace_back(base.toPtr<std::byte*>(), whole_pages(size, getPageSize()));
  }
  // The graph's allocation actions are not run: each is a call into the
  // host with the graph's data (registering its .eh_frame with libgcc,
  // which searches registered frames before the process's own, handed an
  // attacker review the host's unwinding and a personality routine the
  // verifier never read). Window code is never unwound through, debugged
  // by a JIT interface or initialised: nothing of it runs but its entry.
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    initialized_[lowest] = {whole_pages(highest - lowest, getPageSize()), std::move(code),
                            std::move(data)};
  }
  on_initialized(lowest);
}

llvm::Error WindowMemoryMapper::unlink(ExecutorAddr address) {
  const auto it = initialized_.find(address);
  if (it == initialized_.end()) return failure("no linked allocation at this address");
  // Fresh pages, inaccessible, as reserve() left them: the next graph
  // linked here reads nothing of this one (initialize() opens them again).
  const bool cleared =
      mmap(address.toPtr<void*>(), it->second.bytes, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) != MAP_FAILED;
  const int error = errno;
  initialized_.erase(it);
  if (!cleared) return failure(std::string("cannot clear unlinked code: ") + std::strerror(error));
  return llvm::Error::success();
}

void WindowMemoryMapper::deinitialize(llvm::ArrayRef<ExecutorAddr> allocations,
                                      OnDeinitializedFunction on_deinitialized) {
  llvm::Error all = llvm::Error::success();
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const ExecutorAddr address : llvm::reverse(allocations))
      all = llvm::joinErrors(std::move(all), unlink(address));
  }
  on_deinitialized(std::move(all));
}

void WindowMemoryMapper::release(llvm::ArrayRef<ExecutorAddr> reservations,
                                 OnReleasedFunction on_released) {
  llvm::Error all = llvm::Error::success();
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const ExecutorAddr reservation : reservations) {
      const auto it = reservations_.find(reservation);
      if (it == reservations_.end()) {
        all = llvm::joinErrors(std::move(all), failure("no reservation at this address"));
        continue;
      }
      const ExecutorAddr end = reservation + it->second;
      std::vector<ExecutorAddr> inside;
      for (const auto& [address, linked] : initialized_)
        if (address >= reservation && address < end) inside.push_back(address);
      for (const ExecutorAddr address : inside)
        all = llvm::joinErrors(std::move(all), unlink(address));
      window_.retire({reservation.toPtr<std::byte*>(), it->second});
      reservations_.erase(it);
    }
  }
  on_released(std::move(all));
}

std::vector<confined::CodeRange> WindowMemoryMapper::executable_code() {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::vector<confined::CodeRange> code;
  for (const auto& [address, linked] : initialized_)
    code.insert(code.end(), linked.code.begin(), linked.code.end());
  return code;
}

std::vector<std::span<std::byte>> WindowMemoryMapper::writable_data() {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::span<std::byte>> data;
  for (const auto& [address, linked] : initialized_)
    data.insert(data.end(), linked.data.begin(), linked.data.end());
  return data;
}

}  // namespace threechains::jit
