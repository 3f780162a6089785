// The category of UCX status codes (error.hpp): one instance per process, and
// out of the compile worker, which maps no UCX.
#include <threechains/error.hpp>

#include <ucs/type/status.h>

#include <string>

namespace threechains {

const std::error_category& ucs_category() noexcept {
  struct category final : std::error_category {
    [[nodiscard]] const char* name() const noexcept override { return "ucs"; }
    [[nodiscard]] std::string message(int value) const override {
      return ucs_status_string(static_cast<ucs_status_t>(value));
    }
  };
  static const category instance;
  return instance;
}

}  // namespace threechains
