// C API: UCX context and worker, keys and trust, ifuncs.
#include "capi/handles.hpp"

using threechains::capi::all_given;
using threechains::capi::fail;
using threechains::capi::guarded;

namespace {
constexpr const char* kMissing = "a handle or out-pointer is NULL";
}

extern "C" {

threechains_status threechains_context_create(const char* transport, threechains_context** out) {
  if (!all_given(out)) return fail(THREECHAINS_INVALID_ARGUMENT, kMissing);
  return guarded("threechains_context_create", [&] {
    threechains::ContextOptions options;
    options.transport = threechains::parse_transport(transport != nullptr ? transport : "any");
    *out = new threechains_context{threechains::Context(options)};
  });
}
void threechains_context_destroy(threechains_context* context) { delete context; }

threechains_status threechains_worker_create(threechains_context* context,
                                             threechains_worker** out) {
  if (!all_given(context, out)) return fail(THREECHAINS_INVALID_ARGUMENT, kMissing);
  return guarded("threechains_worker_create",
                 [&] { *out = new threechains_worker{threechains::Worker(context->context)}; });
}
void threechains_worker_destroy(threechains_worker* worker) { delete worker; }
unsigned threechains_worker_progress(threechains_worker* worker) {
  return worker != nullptr ? worker->worker.progress() : 0;
}

threechains_status threechains_keypair_load(const char* secret_path, threechains_keypair** out) {
  if (!all_given(secret_path, out)) return fail(THREECHAINS_INVALID_ARGUMENT, kMissing);
  return guarded("threechains_keypair_load", [&] {
    *out = new threechains_keypair{threechains::KeyPair::load(secret_path)};
  });
}
threechains_status threechains_keypair_generate(threechains_keypair** out) {
  if (!all_given(out)) return fail(THREECHAINS_INVALID_ARGUMENT, kMissing);
  return guarded("threechains_keypair_generate",
                 [&] { *out = new threechains_keypair{threechains::KeyPair::generate()}; });
}
void threechains_keypair_destroy(threechains_keypair* key) { delete key; }
threechains_status threechains_public_key_load(const char* path, threechains_public_key** out) {
  if (!all_given(path, out)) return fail(THREECHAINS_INVALID_ARGUMENT, kMissing);
  return guarded("threechains_public_key_load", [&] {
    *out = new threechains_public_key{threechains::PublicKey::load(path)};
  });
}
threechains_status threechains_keypair_public(const threechains_keypair* key,
                                              threechains_public_key** out) {
  if (!all_given(key, out)) return fail(THREECHAINS_INVALID_ARGUMENT, kMissing);
  return guarded("threechains_keypair_public",
                 [&] { *out = new threechains_public_key{key->key.public_key()}; });
}
void threechains_public_key_destroy(threechains_public_key* key) { delete key; }

threechains_status threechains_trust_create(threechains_trust** out) {
  if (!all_given(out)) return fail(THREECHAINS_INVALID_ARGUMENT, kMissing);
  return guarded("threechains_trust_create", [&] { *out = new threechains_trust{}; });
}
threechains_status threechains_trust_anyone(threechains_trust** out) {
  if (!all_given(out)) return fail(THREECHAINS_INVALID_ARGUMENT, kMissing);
  return guarded("threechains_trust_anyone",
                 [&] { *out = new threechains_trust{threechains::Trust::anyone()}; });
}
threechains_status threechains_trust_allow_peer(threechains_trust* trust,
                                                const threechains_public_key* key) {
  if (!all_given(trust, key)) return fail(THREECHAINS_INVALID_ARGUMENT, kMissing);
  return guarded("threechains_trust_allow_peer", [&] { trust->trust.allow_peer(key->key); });
}
threechains_status threechains_trust_allow_code_signer(threechains_trust* trust,
                                                       const threechains_public_key* key) {
  if (!all_given(trust, key)) return fail(THREECHAINS_INVALID_ARGUMENT, kMissing);
  return guarded("threechains_trust_allow_code_signer",
                 [&] { trust->trust.allow_code_signer(key->key); });
}
threechains_status threechains_trust_allow_native_code_signer(threechains_trust* trust,
                                                              const threechains_public_key* key) {
  if (!all_given(trust, key)) return fail(THREECHAINS_INVALID_ARGUMENT, kMissing);
  return guarded("threechains_trust_allow_native_code_signer",
                 [&] { trust->trust.allow_native_code_signer(key->key); });
}
void threechains_trust_destroy(threechains_trust* trust) { delete trust; }

threechains_status threechains_ifunc_load(const char* path, threechains_ifunc** out) {
  if (!all_given(path, out)) return fail(THREECHAINS_INVALID_ARGUMENT, kMissing);
  return guarded("threechains_ifunc_load",
                 [&] { *out = new threechains_ifunc{threechains::Ifunc::load(path)}; });
}
threechains_status threechains_ifunc_from_memory(const void* container, std::size_t size,
                                                 threechains_ifunc** out) {
  if (!all_given(container, out)) return fail(THREECHAINS_INVALID_ARGUMENT, kMissing);
  return guarded("threechains_ifunc_from_memory", [&] {
    const auto* bytes = static_cast<const std::byte*>(container);
    *out = new threechains_ifunc{
        threechains::Ifunc::from_container(std::vector<std::byte>(bytes, bytes + size))};
  });
}
void threechains_ifunc_destroy(threechains_ifunc* ifunc) { delete ifunc; }
const char* threechains_ifunc_name(const threechains_ifunc* ifunc) {
  return ifunc != nullptr ? ifunc->ifunc.name().c_str() : "";
}
uint64_t threechains_ifunc_id(const threechains_ifunc* ifunc) {
  return ifunc != nullptr ? ifunc->ifunc.id() : 0;
}

}  // extern "C"
