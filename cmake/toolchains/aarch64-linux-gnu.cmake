# Cross-building the library and a target program for aarch64 on an x86_64
# Debian 12 (scripts/aarch64-target.sh): Debian's cross compiler, and the arm64
# runtime libraries co-installed through multiarch (libucx0:arm64,
# libllvm22:arm64, ...), which come without -dev packages for arm64. Their
# headers are the amd64 ones: the same versions, and arch-neutral (LLVM's
# native-target macros excepted, which the JIT does not rely on).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# binfmt_misc may be absent: programs run under the emulator by name.
# No -L: the multiarch libc6:arm64 brings its own loader (/lib/ld-linux-aarch64.so.1);
# the cross sysroot's loader with the multiarch libc hangs in pthread_create.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static)
set(THREECHAINS_CROSS_LIBDIR /usr/lib/aarch64-linux-gnu CACHE PATH
    "Where the target architecture's runtime libraries are (Debian multiarch)")
# Only the cross compiler's own sysroot for headers and libraries: never the
# build machine's /usr/include or /usr/lib by accident.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
