// Code containers as concatenated llvm::object::OffloadBinary images.
#include "jit/bitcode_strip.hpp"
#include "jit/compression.hpp"
#include "jit/container_images.hpp"
#include "trust/envelope.hpp"

#include <threechains/container.hpp>
#include <threechains/error.hpp>

#include <llvm/ADT/StringExtras.h>
#include <llvm/Object/OffloadBinary.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>

#include <cstring>

namespace threechains {
namespace {

// A triple's first component, its architecture, as written.
std::string_view arch_of_triple(std::string_view triple) {
  return triple.substr(0, triple.find('-'));
}

using llvm::object::OffloadBinary;

constexpr llvm::StringLiteral kProducer = "threechains";

std::string take_message(llvm::Error error) {
  return llvm::toString(std::move(error));
}

// OffloadBinary::create trusts the offsets of its string table; a frame comes
// off the network, so every offset is checked here before LLVM reads it.
void check_offload_bounds(std::span<const std::byte> bytes, std::size_t at) {
  using Header = OffloadBinary::Header;
  using Entry = OffloadBinary::Entry;
  using StringEntry = OffloadBinary::StringEntry;
  const auto fail = [&](const std::string& what) {
    throw Error(errc::bad_container,
                "code container image at byte " + std::to_string(at) + ": " + what);
  };
  if (bytes.size() < sizeof(Header))
    fail("truncated header (" + std::to_string(bytes.size()) + " bytes)");
  Header header;
  std::memcpy(&header, bytes.data(), sizeof(header));
  static constexpr uint8_t kMagic[4] = {0x10, 0xFF, 0x10, 0xAD};
  if (std::memcmp(header.Magic, kMagic, 4) != 0) fail("bad magic, not an LLVM offload binary");
  if (header.Size > bytes.size()) {
    fail("claims " + std::to_string(header.Size) + " bytes, only " + std::to_string(bytes.size()) +
         " present");
  }
  if (header.Size < sizeof(Header) + sizeof(Entry) || header.EntrySize != sizeof(Entry) ||
      header.EntryOffset > header.Size - sizeof(Entry)) {
    fail("entry out of bounds");
  }
  // LLVM reads the entry and the string table through typed pointers: an
  // offset that breaks their alignment is undefined behaviour there (found by
  // tests/fuzz/fuzz_container).
  if (header.EntryOffset % alignof(Entry) != 0) fail("misaligned entry");
  Entry entry;
  std::memcpy(&entry, bytes.data() + header.EntryOffset, sizeof(entry));
  if (entry.ImageOffset > header.Size || entry.ImageSize > header.Size - entry.ImageOffset) {
    fail("image out of bounds");
  }
  if (entry.NumStrings > header.Size / sizeof(StringEntry) || entry.StringOffset > header.Size ||
      entry.NumStrings * sizeof(StringEntry) > header.Size - entry.StringOffset) {
    fail("string table out of bounds");
  }
  if (entry.StringOffset % alignof(StringEntry) != 0) fail("misaligned string table");
  const auto c_string_in_bounds = [&](uint64_t offset) {
    if (offset >= header.Size) return false;
    const void* end = std::memchr(bytes.data() + offset, 0, header.Size - offset);
    return end != nullptr;
  };
  for (uint64_t i = 0; i < entry.NumStrings; ++i) {
    StringEntry string;
    std::memcpy(&string, bytes.data() + entry.StringOffset + i * sizeof(StringEntry),
                sizeof(string));
    if (!c_string_in_bounds(string.KeyOffset) || !c_string_in_bounds(string.ValueOffset)) {
      fail("string " + std::to_string(i) + " out of bounds");
    }
  }
}

std::vector<std::string> split_list(llvm::StringRef text) {
  std::vector<std::string> out;
  llvm::SmallVector<llvm::StringRef, 4> parts;
  text.split(parts, ';', -1, false);
  for (llvm::StringRef p : parts) out.emplace_back(p.str());
  return out;
}

}  // namespace

std::vector<ParsedImage> parse_container(std::span<const std::byte> signed_or_not) {
  // A signature envelope is checked (against the Receiver's Trust) before
  // anything reaches here; parsing looks at what it wraps.
  const std::span<const std::byte> wire = container_body(signed_or_not);
  if (wire.empty()) throw Error(errc::bad_container, "code container is empty");
  std::vector<std::byte> inflated;
  if (is_compressed(wire)) inflated = decompress(wire);
  const std::span<const std::byte> container =
      inflated.empty() ? wire : std::span<const std::byte>(inflated);
  // OffloadBinary wants 8-byte aligned input; a code section inside a frame is
  // not, so parse from an aligned copy (this is the uncached, slow path anyway).
  std::vector<ParsedImage> images;
  std::size_t at = 0;
  while (at < container.size()) {
    const auto rest = container.subspan(at);
    check_offload_bounds(rest, at);
    uint64_t size = 0;
    std::memcpy(&size, rest.data() + offsetof(OffloadBinary::Header, Size), sizeof(size));
    auto buffer = llvm::WritableMemoryBuffer::getNewUninitMemBuffer(size);
    std::memcpy(buffer->getBufferStart(), rest.data(), size);
    auto binary = OffloadBinary::create(buffer->getMemBufferRef());
    if (!binary) {
      throw Error(errc::bad_container, "code container image at byte " + std::to_string(at) + ": " +
                                           take_message(binary.takeError()));
    }
    ParsedImage image;
    const OffloadBinary& b = **binary;
    image.triple = b.getTriple().str();
    image.name = b.getString("name").str();
    image.deps = split_list(b.getString("deps"));
    switch (b.getImageKind()) {
      case llvm::object::IMG_Bitcode:
        image.kind = CodecId::bitcode;
        break;
      case llvm::object::IMG_Object:
        image.kind = CodecId::binary;
        break;
      default:
        throw Error(errc::bad_container,
                    "code container image for '" + image.triple + "' is " +
                        llvm::object::getImageKindName(b.getImageKind()).str() +
                        ", expected bitcode or object");
    }
    const llvm::StringRef bytes = b.getImage();
    image.bytes.assign(reinterpret_cast<const std::byte*>(bytes.data()),
                       reinterpret_cast<const std::byte*>(bytes.data()) + bytes.size());
    if (image.name.empty())
      throw Error(errc::bad_container, "code container image has no ifunc name");
    if (image.triple.empty())
      throw Error(errc::bad_container, "code container image has no triple");
    if (is_gpu_triple(image.triple) && image.kind != CodecId::bitcode) {
      throw Error(errc::bad_container, "code container image for the GPU triple '" + image.triple +
                                           "' is not bitcode (GPU code travels as bitcode only)");
    }
    images.push_back(std::move(image));
    // Images are padded to OffloadBinary's 8-byte alignment.
    at += (size + 7) & ~uint64_t{7};
  }
  for (std::size_t i = 0; i < images.size(); ++i) {
    const ParsedImage& image = images[i];
    if (image.name != images.front().name) {
      throw Error(errc::bad_container, "code container mixes ifuncs ('" + images.front().name +
                                           "' and '" + image.name + "')");
    }
    // Both kinds may travel together (a tiered container), one image of each per triple.
    for (std::size_t j = 0; j < i; ++j) {
      // Triples of different architectures (the usual fat container) need no
      // parsing: LLVM's triple parser is a cold-cache cost of every first call.
      // Two spellings of one architecture (amd64, x86_64) pass unnoticed: the
      // target takes the first image that runs there, as it would anyway.
      if (images[j].kind != image.kind ||
          arch_of_triple(images[j].triple) != arch_of_triple(image.triple))
        continue;
      if (same_target(images[j].triple, image.triple)) {
        throw Error(errc::bad_container, "code container has two " +
                                             std::string(to_string(image.kind)) + " images for " +
                                             image.triple);
      }
    }
  }
  return images;
}

CodecId codec_of(const std::vector<ParsedImage>& images) {
  // GPU images are bitcode whatever the CPU images are: they do not make a
  // binary container tiered.
  const ParsedImage* first = nullptr;
  for (const ParsedImage& image : images) {
    if (is_gpu_triple(image.triple)) continue;
    if (first == nullptr) first = &image;
    if (image.kind != first->kind) return CodecId::tiered;
  }
  return first == nullptr ? CodecId::bitcode : first->kind;
}

bool is_gpu_triple(std::string_view triple) noexcept {
  const std::string_view arch = arch_of_triple(triple);
  return arch == "nvptx64" || arch == "nvptx";
}

std::vector<std::byte> pack_container(const IfuncLibrary& library) {
  if (library.name.empty()) throw Error(errc::bad_container, "an ifunc library needs a name");
  if (library.images.empty())
    throw Error(errc::bad_container, "ifunc '" + library.name + "' has no images");
  std::string deps;
  for (const std::string& d : library.deps) deps += (deps.empty() ? "" : ";") + d;
  for (std::size_t i = 0; i < library.images.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (library.images[j].kind == library.images[i].kind &&
          same_target(library.images[j].triple, library.images[i].triple)) {
        throw Error(errc::bad_container, "ifunc '" + library.name + "' has two " +
                                             to_string(library.images[i].kind) + " images for " +
                                             library.images[i].triple);
      }
    }
  }
  std::vector<std::byte> out;
  for (const CodeImage& image : library.images) {
    OffloadBinary::OffloadingImage entry;
    entry.TheImageKind =
        image.kind == CodecId::bitcode ? llvm::object::IMG_Bitcode : llvm::object::IMG_Object;
    entry.TheOffloadKind = llvm::object::OFK_None;
    const std::string triple = llvm::Triple::normalize(image.triple);
    entry.StringData["triple"] = triple;
    entry.StringData["name"] = library.name;
    entry.StringData["producer"] = kProducer;
    if (!deps.empty()) entry.StringData["deps"] = deps;
    const std::vector<std::byte> shipped = image.kind == CodecId::bitcode && !image.bytes.empty()
                                               ? strip_bitcode(image.bytes)
                                               : image.bytes;
    entry.Image = llvm::MemoryBuffer::getMemBuffer(
        llvm::StringRef(reinterpret_cast<const char*>(shipped.data()), shipped.size()), "", false);
    const llvm::SmallString<0> written = OffloadBinary::write(entry);
    const auto* begin = reinterpret_cast<const std::byte*>(written.data());
    out.insert(out.end(), begin, begin + written.size());
    out.resize((out.size() + 7) & ~std::size_t{7}, std::byte{0});
  }
  // One zstd frame over all images also folds what they repeat (bitcode's
  // fixed tables, the strings); ship whichever form is smaller. Not below
  // 4 KiB: there the bytes saved cost under a microsecond to send on any
  // link of 10 Gb/s, and inflating them costs the target's first call
  // 20-50 us when zstd's code and tables are cold (a pre-linked counter's
  // load, threechains-bench-jit after 30 ms idle: most of its parse).
  constexpr std::size_t kCompressFrom = 4096;
  if (out.size() < kCompressFrom) return out;
  std::vector<std::byte> packed = compress(out);
  return packed.size() < out.size() ? packed : out;
}

namespace detail {
std::vector<std::byte> pack_container_as(CodecId codec, const IfuncLibrary& library) {
  for (const CodeImage& image : library.images) {
    if (codec != CodecId::tiered && image.kind != codec && !is_gpu_triple(image.triple)) {
      throw Error(errc::bad_container, "image for " + image.triple + " is " +
                                           to_string(image.kind) + ", but this codec ships " +
                                           to_string(codec));
    }
  }
  return pack_container(library);
}
}  // namespace detail

std::vector<std::byte> unpacked_container(std::span<const std::byte> signed_or_not) {
  const std::span<const std::byte> container = container_body(signed_or_not);
  if (is_compressed(container)) return decompress(container);
  return {container.begin(), container.end()};
}

ContainerInfo inspect_container(std::span<const std::byte> container) {
  const std::vector<ParsedImage> images = parse_container(container);
  ContainerInfo info;
  info.name = images.front().name;
  info.codec = codec_of(images);
  info.deps = images.front().deps;
  if (const std::optional<Envelope> envelope = read_envelope(container))
    info.claimed_signer = envelope->signer.hex();
  for (const ParsedImage& image : images) {
    info.triples.push_back(image.triple);
    info.image_sizes.push_back(image.bytes.size());
  }
  return info;
}

std::string host_triple() {
  return llvm::Triple::normalize(llvm::sys::getProcessTriple());
}

bool same_target(const std::string& a, const std::string& b) {
  const llvm::Triple ta(llvm::Triple::normalize(a));
  const llvm::Triple tb(llvm::Triple::normalize(b));
  if (ta.getArch() != tb.getArch() || ta.getSubArch() != tb.getSubArch() ||
      ta.getOS() != tb.getOS()) {
    return false;
  }
  return ta.getEnvironment() == tb.getEnvironment() ||
         ta.getEnvironment() == llvm::Triple::UnknownEnvironment ||
         tb.getEnvironment() == llvm::Triple::UnknownEnvironment;
}

}  // namespace threechains
