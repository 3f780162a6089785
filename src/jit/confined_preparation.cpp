// What confined_preparation.hpp says.
#include "jit/confined_preparation.hpp"

#include <exception>
#include <string>
#include <utility>

namespace threechains {

ConfinedPreparation::ConfinedPreparation(Prepare prepare, detail::HelperCpus cpus)
    : prepare_(std::move(prepare)),
      thread_(
          "tc-prepare", [this](Job& job) { return this->prepare(job); }, cpus) {}

ConfinedPreparation::Prepared ConfinedPreparation::prepare(Job& job) const {
  Prepared prepared;
  prepared.serial = job.serial;
  prepared.id = job.id;
  try {
    prepare_(job, prepared);
  } catch (const Error& error) {
    prepared.error = error;
  } catch (const std::exception& error) {  // every job is answered, whatever one threw
    prepared.error = Error(errc::jit_failed, std::string("preparing a compile: ") + error.what());
    prepared.target_failed = true;  // no memory, most likely: not the code's doing
  }
  return prepared;
}

}  // namespace threechains
