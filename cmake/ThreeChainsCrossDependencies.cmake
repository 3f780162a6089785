# The dependencies of a cross build (cmake/toolchains/aarch64-linux-gnu.cmake):
# the same imported target names as ThreeChainsDependencies.cmake, made by
# hand from the target architecture's runtime libraries (THREECHAINS_CROSS_LIBDIR)
# and the build machine's headers, gathered into a directory of their own so
# that nothing else of the build machine's /usr/include is seen.
set(shim ${PROJECT_BINARY_DIR}/cross-shim)
file(MAKE_DIRECTORY ${shim}/include ${shim}/lib)
foreach(header ucm ucp ucs uct fmt CLI sodium sodium.h xxhash.h zstd.h zstd_errors.h)
  file(CREATE_LINK /usr/include/${header} ${shim}/include/${header} SYMBOLIC)
endforeach()
foreach(header llvm llvm-c)
  file(CREATE_LINK /usr/lib/llvm-22/include/${header} ${shim}/include/${header} SYMBOLIC)
endforeach()

# name: imported target; file: the runtime library (soname) in THREECHAINS_CROSS_LIBDIR.
function(threechains_cross_library name file)
  set(path ${THREECHAINS_CROSS_LIBDIR}/${file})
  if(NOT EXISTS ${path})
    message(FATAL_ERROR "cross build: ${path} is missing (install the :${CMAKE_SYSTEM_PROCESSOR} "
                        "package that has it; scripts/aarch64-target.sh lists them)")
  endif()
  add_library(${name} SHARED IMPORTED GLOBAL)
  set_target_properties(${name} PROPERTIES IMPORTED_LOCATION ${path}
    INTERFACE_INCLUDE_DIRECTORIES ${shim}/include)
endfunction()
threechains_cross_library(ucx::ucs libucs.so.0)
threechains_cross_library(ucx::ucp libucp.so.0)
threechains_cross_library(ucx::uct libuct.so.0)
target_link_libraries(ucx::ucp INTERFACE ucx::ucs)
threechains_cross_library(fmt::fmt libfmt.so.9)
threechains_cross_library(PkgConfig::XXHASH libxxhash.so.0)
threechains_cross_library(PkgConfig::ZSTD libzstd.so.1)
threechains_cross_library(PkgConfig::SODIUM libsodium.so.23)
threechains_cross_library(LLVM libLLVM.so.22.1)
add_library(CLI11::CLI11 INTERFACE IMPORTED GLOBAL)
set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${shim}/include)
# The libraries' own dependencies resolve at link time from the same place.
add_link_options(-Wl,-rpath-link,${THREECHAINS_CROSS_LIBDIR})
set(LLVM_INCLUDE_DIRS ${shim}/include)
set(LLVM_DEFINITIONS -D_GNU_SOURCE -D__STDC_CONSTANT_MACROS -D__STDC_FORMAT_MACROS -D__STDC_LIMIT_MACROS)
find_package(Threads REQUIRED)
# clang (the build machine's) still builds ifunc containers, for any triple.
find_program(THREECHAINS_CLANG NAMES clang-22 clang HINTS /usr/lib/llvm-22/bin REQUIRED)
