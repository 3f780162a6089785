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
            Verified verified{job.id, job.serial, {}, false};
            try {
              confined::VerifierInput input{job.code, {&job.main, 1}, job.window_base};
              input.stop = &stopping_;
              verified.verdict = verify_window_code(input);
            } catch (const std::exception& error) {
              // No memory for its tables: this process's failure.
              verified.verdict = {};
              verified.verdict.refusal =
                  std::string("the verifier could not finish: ") + error.what();
              verified.target_failed = true;
            }
            return verified;
          },
          cpus) {}

}  // namespace threechains
