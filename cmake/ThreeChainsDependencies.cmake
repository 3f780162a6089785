# Every external dependency is found here, once, so the in-tree build and the
# installed package's config (ThreeChainsConfig.cmake.in) agree on what is needed.
find_package(ucx 1.13 CONFIG REQUIRED)          # ucx::ucp, ucx::ucs (Debian's libucx-dev)
find_package(fmt CONFIG REQUIRED)               # fmt::fmt
find_package(PkgConfig REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)  # code sections travel zstd-compressed
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)  # Ed25519 keys and signatures
find_package(Threads REQUIRED)
# The window verifier decodes x86-64 with Zydis, a decoder with no part in
# compiling the code it checks (src/confine/verify_x86.hpp).
find_package(zydis 4 CONFIG REQUIRED)           # Zydis::Zydis (Debian's libzydis-dev)

# LLVM is needed only to build src/jit; it never reaches a public header.
find_package(LLVM 22.1 CONFIG REQUIRED HINTS /usr/lib/llvm-22/lib/cmake/llvm)
message(STATUS "ThreeChains: LLVM ${LLVM_PACKAGE_VERSION} from ${LLVM_DIR}")

# clang of the same LLVM builds ifunc libraries into bitcode and objects.
find_program(THREECHAINS_CLANG NAMES clang-22 clang HINTS ${LLVM_TOOLS_BINARY_DIR} REQUIRED)

# Tools (threechains-pack is always built), demos and benchmarks are CLI11 programs.
find_package(CLI11 CONFIG REQUIRED)
