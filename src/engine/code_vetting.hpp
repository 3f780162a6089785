// CodeVetting: the content digest and the signature check of large code,
// and of code that would run confined, on a thread beside the one that
// serves frames. Before any of a peer's code is parsed, the target hashes it
// (BLAKE2b-256: its ban and identity records go by content) and checks whose
// signature it carries (Trust). For a 500 KB container that is about 2 ms on
// the 2-core VM while a compile runs beside it (docs/performance.md, "The
// compile worker"), and for any container at least the Ed25519 check, 70 us
// there: between two frames of every other peer. Here it runs at nice 10,
// like the preparation of a confined compile; the Engine hands in a private
// copy of the code and takes back what finished between dispatches
// (Engine::finish_vetting).
#pragma once

#include "jit/container_images.hpp"
#include "jit/job_thread.hpp"
#include "trust/sodium.hpp"

#include <threechains/error.hpp>
#include <threechains/frame.hpp>
#include <threechains/trust.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace threechains::detail {

class CodeVetting {
 public:
  // Code at least this large is vetted here, whoever signed it
  // (container_images.hpp).
  static constexpr std::size_t kAside = kLargeContainer;
  // At most this much code waits for its check (a peer that connects, sends
  // large code and leaves, again and again, queues no more than this); past
  // it, code is checked on the serving thread, as before the thread was.
  static constexpr std::size_t kMaxWaitingBytes = std::size_t{64} << 20;

  struct Job {
    uint64_t serial = 0;  // tells its result from one for an earlier load of the same id
    CodeId id = 0;
    std::vector<std::byte> code;  // a private copy, which nobody else writes
  };
  struct Vetted {
    uint64_t serial = 0;
    CodeId id = 0;
    std::vector<std::byte> code;  // the job's, handed back for the load
    ContentDigest digest{};
    Confine confine = Confine::yes;  // how its signer's code runs here (if no error)
    std::optional<Error> error;      // the signature or the signer refused
  };

  // `trust` must outlive this object and not change while it lives (a
  // Receiver's is fixed when it starts).
  CodeVetting(const Trust& trust, HelperCpus cpus);
  CodeVetting(const CodeVetting&) = delete;
  CodeVetting& operator=(const CodeVetting&) = delete;
  // Stops the thread (~JobThread): a check under way finishes first (about
  // 2 ms for 500 KB on the 2-core VM; tens of ms for the largest code a
  // Receiver accepts); queued jobs are dropped.
  ~CodeVetting() = default;

  void submit(Job job) { thread_.submit(std::move(job)); }
  // Cheap enough for every poll: whether take_finished() has anything.
  [[nodiscard]] bool has_finished() const noexcept { return thread_.has_finished(); }
  [[nodiscard]] std::vector<Vetted> take_finished() { return thread_.take_finished(); }

 private:
  [[nodiscard]] Vetted vet(Job& job) const;  // on the thread: answers every job

  const Trust& trust_;
  JobThread<Job, Vetted> thread_;  // last: started after, and stopped before, what it uses
};

}  // namespace threechains::detail
