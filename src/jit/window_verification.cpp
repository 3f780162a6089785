#include "jit/window_verification.hpp"

#if defined(THREECHAINS_HAVE_WINDOW_VERIFIER) || defined(__aarch64__)
#if defined(__aarch64__)
#include "confine/verify_aarch64.hpp"
#else
#include "confine/verify_x86.hpp"
#endif
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

WindowVerification::WindowVerification()
    : thread_("tc-verify", [](Job& job) {
        Verified verified{job.id, job.serial, {}};
        try {
          const confined::VerifierInput input{job.code, {&job.main, 1}, job.window_base};
          verified.verdict = verify_window_code(input);
        } catch (const std::exception& error) {  // no memory for its tables: refused, not crashed
          verified.verdict = {};
          verified.verdict.refusal = std::string("the verifier could not finish: ") + error.what();
        }
        return verified;
      }) {}

}  // namespace threechains
