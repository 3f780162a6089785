// The research prototype's C payload helpers, on the source. A C ifunc library
// may define <name>_payload_get_max_size and <name>_payload_init to build its
// payload from source-side arguments; the source JIT-loads its own copy of the
// library (the image for this host) to call them, and the payload is written
// straight into the frame. C++ users send typed payloads instead (send()).
#pragma once

#include <threechains/ifunc.h>
#include <threechains/channel.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include <optional>
#include <string>

namespace threechains {

class CPayloadHelpers {
 public:
  // Loads `ifunc` into `cache` (which must outlive the helpers) and finds its
  // helpers; std::nullopt when the library does not define both.
  [[nodiscard]] static std::optional<CPayloadHelpers> find(const Ifunc& ifunc, JitCache& cache);

  [[nodiscard]] std::size_t max_size(void* source_args, std::size_t source_args_size) const {
    return max_size_(source_args, source_args_size);
  }

  // Builds the payload into `payload`; returns its size. Throws if init fails.
  std::size_t init(void* source_args, std::size_t source_args_size, void* payload,
                   std::size_t capacity) const {
    std::size_t size = capacity;
    if (const int rc = init_(source_args, source_args_size, payload, &size); rc != 0)
      throw_init_failed(rc);
    return size;
  }

 private:
  CPayloadHelpers(threechains_payload_get_max_size_fn m, threechains_payload_init_fn i,
                  std::string name)
      : max_size_(m), init_(i), name_(std::move(name)) {}
  [[noreturn]] void throw_init_failed(int rc) const;

  threechains_payload_get_max_size_fn max_size_;
  threechains_payload_init_fn init_;
  std::string name_;
};

// Sends `ifunc` with a payload its C helpers build from `source_args`, in place.
SendStatus send_init(Channel& channel, const Ifunc& ifunc, const CPayloadHelpers& helpers,
                     void* source_args, std::size_t source_args_size);

}  // namespace threechains
