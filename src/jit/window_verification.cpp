#include "jit/window_verification.hpp"

#if defined(__aarch64__)
#include "confine/verify_aarch64.hpp"
#elif defined(THREECHAINS_HAVE_WINDOW_VERIFIER)
#include "confine/verify_x86.hpp"
#endif

#include <exception>

namespace threechains {

confined::Verdict verify_window_code(const confined::VerifierInput& input) {
#if defined(__aarch64__)
  return confined::verify_window_code_aarch64(input);
#elif defined(THREECHAINS_HAVE_WINDOW_VERIFIER)
  return confined::verify_window_code_x86_64(input);
#else
  (void)input;
  confined::Verdict verdict;
  verdict.refusal = "this build has no verifier for the window tier";
  return verdict;
#endif
}

WindowVerification::WindowVerification(detail::HelperCpus cpus)
    : thread_(
          "tc-verify",
          [this](Job& job) {
            Verified verified;
            verified.id = job.id;
            verified.serial = job.serial;
            try {
              verified.link = jit::WindowLink::link(job.object, job.name, job.entry, *job.memory);
            } catch (const Error& error) {  // the object's: it does not link into a window
              verified.link_error = error;
            } catch (const std::exception& error) {  // no memory: this process's failure
              verified.link_error =
                  Error(errc::jit_failed, "ifunc '" + job.name + "': " + error.what());
              verified.target_failed = true;
            }
            if (!verified.link_error) {
              try {
                const uint64_t main = verified.link.entry();
                // The window holds this code only: every executable byte there.
                const std::vector<confined::CodeRange> code = job.mapper->executable_code();
                confined::VerifierInput input{code, {&main, 1}, job.window_base};
                input.stop = &stopping_;
                verified.verdict = verify_window_code(input);
                // Kept for the next load, which verifies it again: a stored
                // object is trusted no more than a compiled one.
                if (verified.verdict.accepted && job.store != nullptr)
                  (void)job.store->store(job.store_key, job.object);
              } catch (const std::exception& error) {
                // No memory for its tables: this process's failure.
                verified.verdict = {};
                verified.verdict.refusal =
                    std::string("the verifier could not finish: ") + error.what();
                verified.target_failed = true;
              }
            }
            return verified;
          },
          cpus) {}

}  // namespace threechains
