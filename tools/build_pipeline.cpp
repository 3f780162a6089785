#include "build_pipeline.hpp"
#include "prelink_script.hpp"

#include <threechains/codec.hpp>
#include <threechains/trust.hpp>

#include <fmt/core.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace threechains::build {
namespace {

namespace fs = std::filesystem;

enum class Language { c_family, fortran, rust, prebuilt_bitcode, prebuilt_object };

Language language_of(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".f" || ext == ".f90" || ext == ".f95" || ext == ".f03" || ext == ".f08")
    return Language::fortran;
  if (ext == ".rs") return Language::rust;
  if (ext == ".bc" || ext == ".ll") return Language::prebuilt_bitcode;
  if (ext == ".o") return Language::prebuilt_object;
  if (ext == ".c" || ext == ".cc" || ext == ".cpp" || ext == ".cxx" || path.ends_with(".C"))
    return Language::c_family;
  throw std::runtime_error("'" + path + "': unknown kind of source (C, C++, Fortran, Rust, " +
                           ".bc, .ll or .o)");
}

bool on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// A tool: $<variable> if set, else the first candidate that exists.
std::string tool(const char* variable, std::initializer_list<const char*> candidates,
                 const char* package) {
  if (const char* chosen = std::getenv(variable); chosen != nullptr && *chosen != '\0')
    return chosen;
  for (const char* candidate : candidates) {
    if (on_path(candidate)) return candidate;
  }
  throw std::runtime_error(fmt::format("no {} found (install the Debian package {}, or set {})",
                                       *candidates.begin(), package, variable));
}

void run(const std::vector<std::string>& command, bool verbose) {
  std::string line;
  for (const std::string& word : command) line += (line.empty() ? "" : " ") + word;
  if (verbose) fmt::print("{}\n", line);
  std::vector<char*> argv;
  for (const std::string& word : command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  pid_t child = 0;
  if (const int error = posix_spawnp(&child, argv[0], nullptr, nullptr, argv.data(), environ);
      error != 0) {
    throw std::runtime_error(fmt::format("cannot run {}: {}", argv[0], std::strerror(error)));
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid: " + std::string(std::strerror(errno)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error("failed: " + line);
}

std::vector<std::byte> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path.string() + "'");
  const std::vector<char> raw((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::byte> bytes(raw.size());
  std::memcpy(bytes.data(), raw.data(), raw.size());
  return bytes;
}

// Where <threechains/ifunc.h> is: next to this tool's install, or the source
// tree it was built from.
std::string ifunc_include_dir() {
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    const fs::path installed = exe.parent_path().parent_path() / "include";
    if (fs::exists(installed / "threechains" / "ifunc.h")) return installed.string();
  }
  return THREECHAINS_SOURCE_INCLUDE_DIR;
}

// A directory of its own, removed with everything in it.
struct Scratch {
  fs::path path;
  Scratch() {
    std::string pattern = (fs::temp_directory_path() / "threechains-build-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = pattern;
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

struct Input {
  std::string triple;  // empty: every triple
  std::string path;
  Language language;
};

std::string arch_of(const std::string& triple) {
  return triple.substr(0, triple.find('-'));
}

std::string host_arch() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "";
#endif
}

class Pipeline {
 public:
  Pipeline(const Request& request, const fs::path& scratch) : request_(request), scratch_(scratch) {
    for (const std::string& spec : request.sources) {
      const std::size_t eq = spec.find('=');
      Input input;
      if (eq != std::string::npos && spec.find('/') > eq) {
        input.triple = spec.substr(0, eq);
        input.path = spec.substr(eq + 1);
      } else {
        input.path = spec;
      }
      input.language = language_of(input.path);
      const bool prebuilt = input.language == Language::prebuilt_bitcode ||
                            input.language == Language::prebuilt_object;
      if (prebuilt && input.triple.empty() && request.triples.size() > 1) {
        throw std::runtime_error("'" + input.path + "' is built for one triple: give it as " +
                                 "TRIPLE=" + input.path + " or build for one --triple");
      }
      if (!fs::exists(input.path)) throw std::runtime_error("no such file '" + input.path + "'");
      inputs_.push_back(std::move(input));
    }
  }

  // The image for one triple and codec, compiled and linked in scratch.
  fs::path image(const std::string& triple, CodecId codec) {
    const bool bitcode = codec == CodecId::bitcode;
    std::vector<std::string> parts;
    bool needs_link = false;
    for (const Input& input : inputs_) {
      if (!input.triple.empty() && input.triple != triple) continue;
      if (input.language == Language::prebuilt_bitcode ||
          input.language == Language::prebuilt_object) {
        if ((input.language == Language::prebuilt_bitcode) != bitcode) {
          throw std::runtime_error(
              fmt::format("'{}' cannot go into a {} container", input.path, to_string(codec)));
        }
        needs_link |= input.path.ends_with(".ll");  // text IR: llvm-link writes bitcode
        parts.push_back(input.path);
        continue;
      }
      parts.push_back(compile(input, triple, codec).string());
    }
    if (parts.empty()) throw std::runtime_error("nothing to build for " + triple);
    if (!bitcode && request_.prelinked) return prelink(triple, parts);
    if (parts.size() == 1 && !needs_link) return parts.front();
    const fs::path linked = scratch_ / fmt::format("linked.{}.{}", triple, bitcode ? "bc" : "o");
    std::vector<std::string> command;
    if (bitcode) {
      command = {tool("THREECHAINS_LLVM_LINK", {"llvm-link-22", "/usr/lib/llvm-22/bin/llvm-link"},
                      "llvm-22")};
    } else {
      command = {tool("THREECHAINS_LLD", {"ld.lld-22", "/usr/lib/llvm-22/bin/ld.lld"}, "lld-22"),
                 "-r"};
    }
    command.insert(command.end(), parts.begin(), parts.end());
    command.insert(command.end(), {"-o", linked.string()});
    run(command, request_.verbose);
    return linked;
  }

  // The objects of one triple linked into a pre-linked image, as
  // threechains_add_ifunc PRELINKED links them (the same flags and script).
  fs::path prelink(const std::string& triple, const std::vector<std::string>& objects) {
    const fs::path script = scratch_ / "threechains-prelink.ld";
    if (!fs::exists(script)) std::ofstream(script) << kPrelinkScript;
    const fs::path image = scratch_ / fmt::format("prelinked.{}.so", triple);
    std::vector<std::string> command = {
        tool("THREECHAINS_LLD", {"ld.lld-22", "/usr/lib/llvm-22/bin/ld.lld"}, "lld-22"),
        "-shared", "-Bsymbolic", "-z", "now", "-z", "norelro", "-z", "noexecstack",
        "--no-rosegment", "--hash-style=gnu"};
    command.insert(command.end(), objects.begin(), objects.end());
    command.insert(command.end(), {script.string(), "-o", image.string()});
    run(command, request_.verbose);
    return image;
  }

  // What the sources depend on (for --depfile): sources, prebuilt inputs, and
  // the headers clang reported while compiling them.
  [[nodiscard]] std::set<std::string> dependencies() const {
    std::set<std::string> all;
    for (const Input& input : inputs_) all.insert(input.path);
    for (const fs::path& file : depfiles_) {
      std::ifstream in(file);
      std::string text((std::istreambuf_iterator<char>(in)), {});
      const std::size_t colon = text.find(": ");
      if (colon == std::string::npos) continue;
      std::stringstream words(text.substr(colon + 1));
      for (std::string word; words >> word;) {
        if (word != "\\") all.insert(word);
      }
    }
    return all;
  }

 private:
  fs::path compile(const Input& input, const std::string& triple, CodecId codec) {
    const bool bitcode = codec == CodecId::bitcode;
    const fs::path out =
        scratch_ / fmt::format("{}.{}.{}.{}", counter_++, fs::path(input.path).stem().string(),
                               triple, bitcode ? "bc" : "o");
    const std::string level = fmt::format("-O{}", request_.optimisation);
    std::vector<std::string> command;
    if (is_gpu_triple(triple)) {
      // GPU code: freestanding C or C++, shipped unoptimised as bitcode (the
      // target compiles it for its GPU; docs/gpu.md).
      if (input.language != Language::c_family)
        throw std::runtime_error(input.path + ": GPU code is built from C and C++ sources only");
      command = {tool("THREECHAINS_CLANG", {"clang-22", "/usr/lib/llvm-22/bin/clang"}, "clang-22"),
                 "--target=" + triple, "-ffreestanding", level, "-g0", "-emit-llvm",
                 // The builtins of PTX 7.8 (sm_90's; not whatever CUDA is
                 // installed here): the target compiles for its own GPU.
                 "-Xclang", "-target-feature", "-Xclang", "+ptx78",
                 "-I" + ifunc_include_dir()};
      if (request_.optimisation > 0) command.insert(command.end(), {"-Xclang", "-disable-llvm-optzns"});
      for (const std::string& dir : request_.include_dirs) command.push_back("-I" + dir);
      for (const std::string& define : request_.defines) command.push_back("-D" + define);
      command.insert(command.end(), request_.extra_flags.begin(), request_.extra_flags.end());
      command.insert(command.end(), {"-c", input.path, "-o", out.string()});
      run(command, request_.verbose);
      return out;
    }
    switch (input.language) {
      case Language::c_family: {
        command = {
            tool("THREECHAINS_CLANG", {"clang-22", "/usr/lib/llvm-22/bin/clang"}, "clang-22"),
            "--target=" + triple};
        if (arch_of(triple) != host_arch() && fs::exists("/usr/" + triple + "/include"))
          command.push_back("--sysroot=/usr/" + triple);
        command.insert(command.end(), {level, "-fPIC", "-g0", "-fno-asynchronous-unwind-tables",
                                       "-fno-unwind-tables", "-fno-stack-protector",
                                       "-ffunction-sections", "-I" + ifunc_include_dir()});
        if (bitcode) {
          command.push_back("-emit-llvm");
          // -O2 semantics without the passes: the target optimises for its CPU.
          if (!request_.preoptimised && request_.optimisation > 0)
            command.insert(command.end(), {"-Xclang", "-disable-llvm-optzns"});
        } else {
          command.push_back("-femulated-tls");  // JITLink has no native ELF TLS
        }
        for (const std::string& dir : request_.include_dirs) command.push_back("-I" + dir);
        for (const std::string& define : request_.defines) command.push_back("-D" + define);
        command.insert(command.end(), request_.extra_flags.begin(), request_.extra_flags.end());
        if (depfiles_.size() < inputs_.size()) {  // once per source is enough
          const fs::path depfile = out.string() + ".d";
          command.insert(command.end(), {"-MMD", "-MF", depfile.string()});
          depfiles_.push_back(depfile);
        }
        break;
      }
      case Language::fortran:
        command = {
            tool("THREECHAINS_FLANG", {"flang-22", "/usr/lib/llvm-22/bin/flang"}, "flang-22"),
            "--target=" + triple, level, "-fPIC"};
        if (bitcode) command.push_back("-emit-llvm");
        for (const std::string& dir : request_.include_dirs) command.push_back("-I" + dir);
        break;
      case Language::rust: {
        // x86_64-linux-gnu -> x86_64-unknown-linux-gnu, as rustc names targets.
        std::string rust_triple = triple;
        if (const std::size_t dash = triple.find("-linux-"); dash != std::string::npos)
          rust_triple = triple.substr(0, dash) + "-unknown" + triple.substr(dash);
        command = {tool("THREECHAINS_RUSTC", {"/usr/bin/rustc", "rustc"}, "rustc-web"),
                   "--crate-type=lib",
                   "--target=" + rust_triple,
                   fmt::format("-Copt-level={}", request_.optimisation),
                   "-Cpanic=abort",
                   "-Crelocation-model=pic",
                   "-Cdebuginfo=0"};
        if (bitcode) {
          command.push_back("--emit=llvm-bc");
          if (!request_.preoptimised && request_.optimisation > 0)
            command.push_back("-Cno-prepopulate-passes");
        } else {
          command.push_back("--emit=obj");
        }
        break;
      }
      case Language::prebuilt_bitcode:
      case Language::prebuilt_object:
        return input.path;
    }
    if (input.language != Language::rust) command.push_back("-c");
    command.insert(command.end(), {input.path, "-o", out.string()});
    run(command, request_.verbose);
    return out;
  }

  const Request& request_;
  fs::path scratch_;
  std::vector<Input> inputs_;
  std::vector<fs::path> depfiles_;
  int counter_ = 0;
};

void write_depfile(const Request& request, const std::set<std::string>& dependencies) {
  std::ofstream out(request.depfile, std::ios::trunc);
  std::string targets;
  for (const Output& output : request.outputs)
    targets += (targets.empty() ? "" : " ") + output.path;
  out << targets << ":";
  for (const std::string& file : dependencies) out << " \\\n  " << file;
  out << "\n";
  // As clang's -MP: a header that is deleted later does not break make.
  for (const std::string& file : dependencies) out << "\n" << file << ":\n";
  if (!out) throw std::runtime_error("cannot write '" + request.depfile + "'");
}

}  // namespace

std::vector<Built> build(const Request& request) {
  if (request.outputs.empty()) throw std::runtime_error("no output asked for");
  Scratch scratch;
  Pipeline pipeline(request, scratch.path);
  std::vector<Built> built;
  for (const Output& output : request.outputs) {
    IfuncLibrary library{request.name, {}, request.deps};
    std::string triples;
    for (const std::string& triple : request.triples) {
      library.images.push_back(
          {triple, output.codec, read_file(pipeline.image(triple, output.codec))});
      triples += (triples.empty() ? "" : ", ") + triple;
    }
    for (const std::string& gpu : request.gpus) {
      if (gpu != "nvptx64") throw std::runtime_error("GPU '" + gpu + "' is not supported (nvptx64 is)");
      const std::string triple = "nvptx64-nvidia-cuda";
      library.images.push_back(
          {triple, CodecId::bitcode, read_file(pipeline.image(triple, CodecId::bitcode))});
      triples += (triples.empty() ? "" : ", ") + triple;
    }
    std::vector<std::byte> container = output.codec == CodecId::bitcode
                                           ? BitcodeCodec::encode(library)
                                           : BinaryCodec::encode(library);
    if (!request.sign_key.empty())
      container = sign_container(container, KeyPair::load(request.sign_key));
    std::ofstream out(output.path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(container.data()),
              static_cast<std::streamsize>(container.size()));
    if (!out) throw std::runtime_error("cannot write '" + output.path + "'");
    built.push_back({output.path, output.codec, container.size(), triples});
  }
  if (!request.depfile.empty()) write_depfile(request, pipeline.dependencies());
  return built;
}

}  // namespace threechains::build
