// The Codec concept: what a way of shipping code must provide. A codec knows
// its id, turns an ifunc library on the source into a code section, and turns
// a received code section into an entry point on the target (through the JIT
// cache). A type opts in explicitly with `using codec_concept = codec_tag;`,
// so nothing satisfies Codec by accident.
#pragma once

#include <threechains/container.hpp>
#include <threechains/frame.hpp>
#include <threechains/jit_cache.hpp>

#include <concepts>
#include <cstddef>
#include <span>
#include <vector>

namespace threechains {

struct codec_tag {};

template <class C>
concept opts_into_codec = std::same_as<typename C::codec_concept, codec_tag>;

template <class C>
concept names_its_codec = requires {
  { C::id } -> std::convertible_to<CodecId>;
};

template <class C>
concept encodes_ifunc_library = requires(const IfuncLibrary& library) {
  { C::encode(library) } -> std::same_as<std::vector<std::byte>>;
};

template <class C>
concept decodes_code_section = requires(JitCache& cache, CodeId id,
                                        std::span<const std::byte> code) {
  { C::decode(cache, id, code) } -> std::same_as<LoadResult>;
};

template <class C>
concept Codec =
    opts_into_codec<C> && names_its_codec<C> && encodes_ifunc_library<C> && decodes_code_section<C>;

namespace detail {
template <CodecId Id>
struct ContainerCodec {
  using codec_concept = codec_tag;
  static constexpr CodecId id = Id;

  // Packs the library's images (all of this codec's kind; both kinds for
  // tiered) into a fat container.
  [[nodiscard]] static std::vector<std::byte> encode(const IfuncLibrary& library) {
    return pack_container_as(Id, library);
  }

  // Compiles (bitcode) or links (binary) the image for this host.
  [[nodiscard]] static LoadResult decode(JitCache& cache, CodeId id,
                                         std::span<const std::byte> code) {
    return cache.load(id, Id, code);
  }
};
}  // namespace detail

// Code travels as LLVM bitcode, one module per triple; the target JIT-compiles
// it for its own CPU.
struct BitcodeCodec : detail::ContainerCodec<CodecId::bitcode> {};
// Code travels as a relocatable object per ISA; the target links it with JITLink.
struct BinaryCodec : detail::ContainerCodec<CodecId::binary> {};

// Both per triple: the object runs at once, the IR is compiled for the
// target's CPU in the background and replaces it (JitOptions::tiering).
struct TieredCodec : detail::ContainerCodec<CodecId::tiered> {};

static_assert(Codec<BitcodeCodec>, "BitcodeCodec must model Codec");
static_assert(Codec<TieredCodec>, "TieredCodec must model Codec");
static_assert(Codec<BinaryCodec>, "BinaryCodec must model Codec");

}  // namespace threechains
