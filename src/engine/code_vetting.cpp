// What code_vetting.hpp says.
#include "engine/code_vetting.hpp"

#include "trust/envelope.hpp"

#include <exception>
#include <string>
#include <utility>

namespace threechains::detail {

CodeVetting::CodeVetting(const Trust& trust, HelperCpus cpus)
    : trust_(trust),
      thread_(
          "tc-vet", [this](Job& job) { return vet(job); }, cpus) {}

CodeVetting::Vetted CodeVetting::vet(Job& job) const {
  Vetted vetted;
  vetted.serial = job.serial;
  vetted.id = job.id;
  try {
    vetted.digest = content_digest(job.code);
    vetted.confine = check_code_trust(trust_, job.code);
  } catch (const Error& error) {
    vetted.error = error;
  } catch (const std::exception& error) {  // every job is answered, whatever one threw
    vetted.error = Error(errc::jit_failed, std::string("checking code: ") + error.what());
  }
  vetted.code = std::move(job.code);
  return vetted;
}

}  // namespace threechains::detail
