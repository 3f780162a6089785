// The C payload helpers on the source: finding a library's helpers (a load
// and two lookups, once per ifunc), and send_init, whose instance of the
// send path is compiled here once rather than in every includer.
#include <threechains/payload_helpers.hpp>

#include <string>

namespace threechains {

std::optional<CPayloadHelpers> CPayloadHelpers::find(const Ifunc& ifunc, JitCache& cache) {
  (void)cache.load(ifunc.id(), ifunc.codec(), ifunc.code());
  void* max_size = cache.lookup(ifunc.id(), ifunc.name() + "_payload_get_max_size");
  void* init = cache.lookup(ifunc.id(), ifunc.name() + "_payload_init");
  if (max_size == nullptr || init == nullptr) return std::nullopt;
  return CPayloadHelpers(reinterpret_cast<threechains_payload_get_max_size_fn>(max_size),
                         reinterpret_cast<threechains_payload_init_fn>(init), ifunc.name());
}

void CPayloadHelpers::throw_init_failed(int rc) const {
  throw Error(errc::protocol, name_ + "_payload_init failed with " + std::to_string(rc));
}

SendStatus send_init(Channel& channel, const Ifunc& ifunc, const CPayloadHelpers& helpers,
                     void* source_args, std::size_t source_args_size) {
  const std::size_t reserve = helpers.max_size(source_args, source_args_size);
  return channel.send_with(ifunc, reserve, [&](std::byte* payload) -> std::size_t {
    return helpers.init(source_args, source_args_size, payload, reserve);
  });
}

}  // namespace threechains
