// Ifunc: the source's handle on one ifunc library, loaded from a code container.
// Immutable and cheap to copy; its code identity is computed once, here, never
// on the send path.
#pragma once

#include <threechains/container.hpp>
#include <threechains/frame.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace threechains {

// The C ABI of an ifunc's entry point, <name>_main.
using IfuncMain = void (*)(void* payload, std::size_t payload_size, void* target_args);

// One payload an ifunc is to run on (JitCache::invoke_each).
struct IfuncPayload {
  void* bytes = nullptr;
  std::size_t size = 0;
};

class Ifunc {
 public:
  // Takes a packed container (see pack_container / threechains-pack).
  [[nodiscard]] static Ifunc from_container(std::vector<std::byte> container);
  // Reads a .tcc container file. (A plain string, not std::filesystem::path:
  // <filesystem> would cost every user of the library its iostreams.)
  [[nodiscard]] static Ifunc load(const std::string& path);

  [[nodiscard]] const std::string& name() const noexcept { return state_->info.name; }
  [[nodiscard]] CodecId codec() const noexcept { return state_->info.codec; }
  [[nodiscard]] CodeId id() const noexcept { return state_->id; }
  [[nodiscard]] const ContainerInfo& info() const noexcept { return state_->info; }
  [[nodiscard]] std::span<const std::byte> code() const noexcept {
    // From pointer and size: the range constructor's concept checks cost
    // every includer tens of milliseconds of compile time.
    return {state_->code.data(), state_->code.size()};
  }

 private:
  struct State {
    std::vector<std::byte> code;
    ContainerInfo info;
    CodeId id = 0;
  };
  explicit Ifunc(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  std::shared_ptr<const State> state_;
};

}  // namespace threechains
