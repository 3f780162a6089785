// The library's own error category and Error's cold members: out of the
// header every user compiles, and one instance of the category per process.
// Part of the compile worker too, which maps no UCX: the UCX status category
// is in ucx/status_category.cpp.
#include <threechains/error.hpp>

#include <string>

namespace threechains {

const std::error_category& threechains_category() noexcept {
  struct category final : std::error_category {
    [[nodiscard]] const char* name() const noexcept override { return "threechains"; }
    [[nodiscard]] std::string message(int value) const override {
      switch (static_cast<errc>(value)) {
        case errc::ok:
          return "ok";
        case errc::bad_magic:
          return "bad frame magic";
        case errc::bad_version:
          return "unsupported frame version";
        case errc::bad_codec:
          return "unknown codec";
        case errc::truncated_frame:
          return "truncated frame";
        case errc::bad_sequence:
          return "frame sequence mismatch";
        case errc::code_identity_mismatch:
          return "code section does not match its identity";
        case errc::frame_too_large:
          return "frame larger than a ring slot";
        case errc::bad_container:
          return "malformed code container";
        case errc::no_image_for_target:
          return "no code image for this target";
        case errc::jit_failed:
          return "JIT compilation or linking failed";
        case errc::symbol_not_found:
          return "symbol not found";
        case errc::dependency_not_found:
          return "dependency library not found";
        case errc::unknown_code:
          return "source does not hold the requested code";
        case errc::protocol:
          return "protocol violation";
        case errc::invalid_argument:
          return "invalid argument";
        case errc::peer_gone:
          return "peer went away";
        case errc::timeout:
          return "timed out";
        case errc::io:
          return "I/O error";
        case errc::peer_refused:
          return "peer refused";
        case errc::code_refused:
          return "code refused";
        case errc::import_refused:
          return "import refused";
        case errc::limit_exceeded:
          return "limit exceeded";
        case errc::code_trapped:
          return "code trapped";
        case errc::gpu_failed:
          return "GPU ifunc failed";
      }
      return "unknown threechains error";
    }
  };
  static const category instance;
  return instance;
}

std::string Error::context() const {
  const std::string text = what();
  const std::string suffix = ": " + code().message();
  if (text.size() >= suffix.size() &&
      text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return text.substr(0, text.size() - suffix.size());
  }
  return text;
}

}  // namespace threechains
