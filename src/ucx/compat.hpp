// Internal: where the UCX releases ThreeChains supports (1.13 to 1.22) differ
// in something it relies on, and what it does about each. A decision that
// depends on the version is made at run time, from the UCX this process
// runs (ucp_get_version: a program built against 1.13 may run on 1.22, the
// sonames are the same), never from the headers it was built with. Each
// entry names the UCX source (file, function, commit) that shows it; the
// tests in tests/test_ucx_compat.cpp hold each decision.
//
// | behaviour                                   | 1.13-1.16 | 1.17-1.20 | 1.21-1.22 |
// |---------------------------------------------|-----------|-----------|-----------|
// | name that turns tcp's PUT zcopy off         | PUT_ENABLE | TCP_PUT_ENABLE (PUT_ENABLE ignored, silently) | TCP_PUT_ENABLE (PUT_ENABLE refused) |
// | rkey unpack reads past the md blobs         | no        | no        | 1.20+: sys-dev distances, to a 0xff terminator, unbounded |
// | ucp_worker_fence, UCX_FENCE_MODE=auto       | weak (1.13-1.15); strong (1.16: new protocols on) | strong | strong: waits for the puts before it |
// | wire protocol between versions              | 1.13 and 1.22 peers cannot connect (measured) | | |
//
// The rkey tail is handled the same on every version (remote_checks.cpp).
// The fence: fence_mode. The wire protocol: not ours to
// bridge (docs/ucx-versions.md).
// The rest of what docs/security.md leans on reads the same in all four
// (checked in 1.16.0, 1.18.1 and 1.22.0's source): the software RMA/AMO
// handlers are registered only with UCP_FEATURE_RMA/AMO, uct_mm_rkey_ptr
// adds an offset with no bounds, posix/sysv attach a segment per unpack.
#pragma once

#include <compare>
#include <string>
#include <string_view>

namespace threechains::ucx_compat {

struct Version {
  unsigned major = 0;
  unsigned minor = 0;
  unsigned release = 0;
  friend constexpr auto operator<=>(const Version&, const Version&) = default;
  [[nodiscard]] std::string text() const;
};

// The oldest UCX this library runs on (Debian 12's).
inline constexpr Version kOldestSupported{1, 13, 0};

// The UCX this process runs, as its libucp says.
[[nodiscard]] Version running() noexcept;

// The name ucp_config_modify takes for uct tcp's PUT_ENABLE (which makes a
// tcp interface stop advertising a PUT that writes wherever its header
// says). UCX before 1.17 matches a uct key against the field's bare name;
// 1.17 (commit bca427bea3, uct_config_modify passing the table prefix) wants
// it with its table's prefix, and until 1.21 (2af4ba642b, ucp_config_modify
// checking ucs_config_global_list_has_field) ignores the bare name without
// a word: on 1.17-1.20 "PUT_ENABLE" would leave the PUT on.
[[nodiscard]] const char* tcp_put_enable_key(Version version) noexcept;

// Whether this UCX has the uct component `name` ("tcp", "rdmacm", "posix"):
// a build without rdma-core has no "rdmacm", and UCX then warns about every
// UCX_RDMA_CM_* variable as unused. Loads UCX's modules if they were not.
[[nodiscard]] bool has_component(std::string_view name) noexcept;

// The fence every Context asks for, or nullptr to leave UCX's own. We
// fence for order only: a source between a frame and its commit word (put
// delivery, Worker::fence), a target between a code refusal and the credit
// behind it. UCX_FENCE_MODE came in 1.14 (45bf647ff9); its `auto` is strong
// when the new protocols are on, the default from 1.16, and a strong fence
// flushes the whole worker and waits for it (flush.c:
// ucp_worker_fence_strong): a source then blocked on a target that was not
// polling, and a target on any peer that was not (1.16.0 over tcp: 30 s,
// every other peer unserved). With one RMA rail (UCX's default) our puts
// share one lane, and our control AMs one AM lane, where a weak fence orders
// them: UCX's own `ep_based` fence (1.19, 0ccdfbecde) takes the weak one in
// exactly that case and flushes only the endpoint otherwise, so from 1.19
// that.
[[nodiscard]] const char* fence_mode(Version version) noexcept;

}  // namespace threechains::ucx_compat
