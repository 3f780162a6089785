// Admission policy (admission.hpp): whom a new connection evicts.
#include "engine/admission.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <array>
#include <map>

namespace threechains::detail {

namespace {

// The oldest of `proving` from `address`, if any.
std::optional<std::size_t> oldest_from(std::span<const ProvingPeer> proving,
                                       std::string_view address) {
  std::optional<std::size_t> oldest;
  for (std::size_t i = 0; i < proving.size(); ++i) {
    if (proving[i].address != address) continue;
    if (!oldest || proving[i].accepted_at < proving[*oldest].accepted_at) oldest = i;
  }
  return oldest;
}

}  // namespace

std::optional<std::size_t> choose_eviction(std::span<const ProvingPeer> proving,
                                           std::string_view newcomer, AdmissionLimits limits) {
  std::map<std::string_view, std::size_t> per_address;
  for (const ProvingPeer& peer : proving) ++per_address[peer.address];
  // The newcomer's address is at its cap: it gives way to itself.
  if (const auto own = per_address.find(newcomer);
      own != per_address.end() && own->second >= limits.max_pending_per_address)
    return oldest_from(proving, newcomer);
  if (proving.size() < limits.max_pending) return std::nullopt;
  // All full: the address with the most pending handshakes gives way (the
  // newcomer's counted with its newcomer; ties go to the one whose oldest is
  // oldest, so the eviction order stays first-come).
  std::string_view heaviest;
  std::size_t most = 0;
  std::optional<std::size_t> heaviest_oldest;
  for (const auto& [address, count] : per_address) {
    const std::size_t weight = count + (address == newcomer ? 1 : 0);
    const std::optional<std::size_t> oldest = oldest_from(proving, address);
    if (weight > most || (weight == most && proving[*oldest].accepted_at <
                                                proving[*heaviest_oldest].accepted_at)) {
      heaviest = address;
      most = weight;
      heaviest_oldest = oldest;
    }
  }
  return heaviest_oldest;
}

std::string host_of(const sockaddr_storage& address) {
  std::array<char, INET6_ADDRSTRLEN> text{};
  const void* raw = nullptr;
  if (address.ss_family == AF_INET)
    raw = &reinterpret_cast<const sockaddr_in&>(address).sin_addr;
  else if (address.ss_family == AF_INET6)
    raw = &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr;
  if (raw == nullptr || inet_ntop(address.ss_family, raw, text.data(), text.size()) == nullptr)
    return "unknown";
  return text.data();
}

}  // namespace threechains::detail
