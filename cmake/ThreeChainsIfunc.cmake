# threechains_add_ifunc(<target> NAME <ifunc> SOURCES <src>... [CODEC bitcode|binary|tiered]
#                       [TRIPLES <triple>...] [DEPS <soname>...] [FLAGS <clang flag>...]
#                       [SIGN_KEY <secret key file> | UNSIGNED] [PREOPTIMISED] [PRELINKED]
#                       [GPU nvptx64 [GPU_ONLY]])
#
# Builds an ifunc library into a ThreeChains code container (<target>.tcc in the
# current binary dir): every source is compiled once per triple (C and C++ by
# clang-22, Fortran by flang-22, Rust by rustc: bind(c) / extern "C" entries), into
# LLVM bitcode (CODEC bitcode, the default), a relocatable object (CODEC binary)
# or both (CODEC tiered: the target links the object at once and switches to
# the IR compiled for its CPU in the background);
# several sources are linked into one image per triple (llvm-link-22 for bitcode,
# ld.lld-22 -r for objects), and the headers they include are tracked (DEPFILE),
# so editing one rebuilds the container. The images are packed with threechains-pack into one fat container that also
# records the ifunc's name and the shared libraries it needs on the target (DEPS).
# The container is signed with SIGN_KEY, or by default with the key in the
# variable THREECHAINS_SIGN_KEY if it is set (UNSIGNED: never). A Receiver runs
# only code signed by a key it trusts (docs/security.md).
# Bitcode ships unoptimised (clang -O2 -Xclang -disable-llvm-optzns): the
# target runs LLVM's O2 pipeline with its own CPU, so loops are vectorised for
# the host's vector width (docs/design.md, "CPU specialisation").
# PREOPTIMISED ships IR clang already optimised for the triple's baseline CPU
# instead (faster to load, slower to run where the host has wider vectors).
# PRELINKED (binary and tiered) links each triple's object here, at build time,
# into a position-independent image (ld.lld-22 -shared -Bsymbolic): the target
# maps it and fills its import table, with no linker on the first call
# (docs/design.md, "Pre-linked images"). It cannot hold native TLS or
# constructors, and gdb and perf do not see it (JitOptions::debugger_support
# and perf_support see JITLink'd code only).
# GPU nvptx64 also compiles the C and C++ sources for nvptx64-nvidia-cuda
# (freestanding, unoptimised bitcode, __NVPTX__ defined): a Receiver with a GPU
# (ReceiverOptions::gpu) compiles that image for its GPU's own sm_XX and runs
# <name>_main as a kernel (docs/gpu.md). One source can hold the CPU and the
# GPU versions (#ifdef __NVPTX__); GPU_ONLY ships the GPU image alone.
# The target property THREECHAINS_CONTAINER holds the container's path.
#
# threechains_use_ifuncs(<target> <MACRO>=<ifunc target>...)
#
# Defines each MACRO on <target>'s compile line as the path of that ifunc's
# container, and builds the container before <target>.
#
# threechains_add_key(<target> SECRET <file> PUBLIC <file>)
#
# Generates an Ed25519 key pair at build time with threechains-key (once: an
# existing secret key file is kept), for development and tests. Missing
# directories are made. Declare it before the ifuncs it signs: they then
# depend on its one rule, which a parallel build runs once.
set(THREECHAINS_DEFAULT_TRIPLES x86_64-linux-gnu aarch64-linux-gnu
    CACHE STRING "Triples an ifunc library is built for by default")
# Where <threechains/ifunc.h> is: the source tree, or the install prefix when the
# package config set it before including this file. Cached so every directory sees it.
if(NOT THREECHAINS_IFUNC_INCLUDE_DIR)
  set(THREECHAINS_IFUNC_INCLUDE_DIR "${CMAKE_CURRENT_LIST_DIR}/../include" CACHE INTERNAL "")
endif()

# What a pre-linked image is linked with besides lld's defaults (PRELINKED).
set(THREECHAINS_PRELINK_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/threechains-prelink.ld" CACHE INTERNAL "")

# Several sources per ifunc are linked into one image per triple.
find_program(THREECHAINS_LLVM_LINK NAMES llvm-link-22 llvm-link HINTS /usr/lib/llvm-22/bin)
find_program(THREECHAINS_LLD NAMES ld.lld-22 HINTS /usr/lib/llvm-22/bin)

# Fortran (flang-22) and Rust (rustc) sources of an ifunc. Both ship IR their
# own compiler optimised (flang has no way to stop after the front end at -O2;
# rustc's -C no-prepopulate-passes does, and is used unless PREOPTIMISED).
find_program(THREECHAINS_FLANG NAMES flang-22 flang-new-22 HINTS /usr/lib/llvm-22/bin)
# Debian's rustc (rustc-web, built on LLVM 22) before any other on the PATH.
find_program(THREECHAINS_RUSTC NAMES rustc PATHS /usr/bin NO_DEFAULT_PATH)
find_program(THREECHAINS_RUSTC NAMES rustc)

macro(_threechains_fortran_command out triple src obj)
  if(NOT THREECHAINS_FLANG)
    message(FATAL_ERROR "threechains_add_ifunc(${target}): ${src} needs flang-22 "
                        "(Debian package flang-22)")
  endif()
  set(${out} ${THREECHAINS_FLANG} --target=${triple} -O2 -fPIC)
  if(kind STREQUAL "bitcode")
    list(APPEND ${out} -emit-llvm)
  endif()
  list(APPEND ${out} -c ${src} -o ${obj})
endmacro()

macro(_threechains_rust_command out triple src obj)
  if(NOT THREECHAINS_RUSTC)
    message(FATAL_ERROR "threechains_add_ifunc(${target}): ${src} needs rustc "
                        "(Debian package rustc-web)")
  endif()
  # x86_64-linux-gnu -> x86_64-unknown-linux-gnu, as rustc names targets.
  string(REGEX REPLACE "^([^-]+)-linux-(.*)$" "\\1-unknown-linux-\\2" rust_triple ${triple})
  execute_process(COMMAND ${THREECHAINS_RUSTC} --print sysroot OUTPUT_VARIABLE rust_sysroot
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT EXISTS ${rust_sysroot}/lib/rustlib/${rust_triple}/lib)
    message(FATAL_ERROR "threechains_add_ifunc(${target}): ${src} for ${triple} needs Rust's "
                        "core library for ${rust_triple}, which ${THREECHAINS_RUSTC} lacks "
                        "(Debian: libstd-rust-web-dev for that architecture), or TRIPLES "
                        "without ${triple}")
  endif()
  set(${out} ${THREECHAINS_RUSTC} --crate-type=lib --target=${rust_triple} -C opt-level=2
             -C panic=abort -C relocation-model=pic -C debuginfo=0)
  if(kind STREQUAL "bitcode")
    list(APPEND ${out} --emit=llvm-bc)
    if(NOT ARG_PREOPTIMISED)
      list(APPEND ${out} -C no-prepopulate-passes)
    endif()
  else()
    list(APPEND ${out} --emit=obj)
  endif()
  list(APPEND ${out} ${src} -o ${obj})
endmacro()

function(threechains_add_ifunc target)
  cmake_parse_arguments(ARG "UNSIGNED;PREOPTIMISED;PRELINKED;GPU_ONLY" "NAME;CODEC;SIGN_KEY"
                        "SOURCES;TRIPLES;DEPS;FLAGS;GPU" ${ARGN})
  # A key made by a target of this build (threechains_add_key, named in
  # THREECHAINS_SIGN_KEY_TARGET) is a target dependency, not a file one: file
  # dependencies on another directory's custom command outputs do not carry.
  set(key_target)
  if(NOT ARG_SIGN_KEY AND NOT ARG_UNSIGNED AND THREECHAINS_SIGN_KEY)
    set(ARG_SIGN_KEY ${THREECHAINS_SIGN_KEY})
    set(key_target ${THREECHAINS_SIGN_KEY_TARGET})
  endif()
  set(sign_args)
  set(key_file)
  if(ARG_SIGN_KEY AND NOT ARG_UNSIGNED)
    get_filename_component(ARG_SIGN_KEY ${ARG_SIGN_KEY} ABSOLUTE)
    set(sign_args --sign-key ${ARG_SIGN_KEY})
    # A key threechains_add_key makes: its one rule, depended on as a target
    # as well as a file. As only a file dependency of several ifuncs, a
    # parallel build could run the rule once for each (make's generators copy
    # it into every target), and an ifunc signed with the first key would fail
    # against the second; ordered after the key's target, the copies find it
    # made. The file dependency re-signs the ifuncs when the key changes.
    if(NOT key_target)
      string(SHA1 key_id "${ARG_SIGN_KEY}")
      get_property(key_target GLOBAL PROPERTY THREECHAINS_KEY_TARGET_${key_id})
      set(key_file ${ARG_SIGN_KEY})
    endif()
  endif()
  if(NOT ARG_NAME)
    set(ARG_NAME ${target})
  endif()
  if(NOT ARG_CODEC)
    set(ARG_CODEC bitcode)
  endif()
  if(NOT ARG_TRIPLES)
    set(ARG_TRIPLES ${THREECHAINS_DEFAULT_TRIPLES})
  endif()
  if(ARG_GPU_ONLY)
    if(NOT ARG_GPU)
      message(FATAL_ERROR "threechains_add_ifunc(${target}): GPU_ONLY needs GPU nvptx64")
    endif()
    set(ARG_TRIPLES)
  endif()
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "threechains_add_ifunc(${target}): SOURCES is required")
  endif()
  if(ARG_CODEC STREQUAL "tiered")
    # Per triple an object (linked at once on the target) and IR (compiled for
    # the target's CPU in the background, then switched to).
    set(kinds binary bitcode)
  elseif(ARG_CODEC STREQUAL "bitcode" OR ARG_CODEC STREQUAL "binary")
    set(kinds ${ARG_CODEC})
  else()
    message(FATAL_ERROR "threechains_add_ifunc(${target}): CODEC must be bitcode, binary or tiered")
  endif()
  if(TARGET ThreeChains::threechains-pack)
    set(pack $<TARGET_FILE:ThreeChains::threechains-pack>)
  else()
    message(FATAL_ERROR "threechains_add_ifunc needs the threechains-pack tool")
  endif()

  # Shipped code carries no debug info or unwind tables: the target needs neither
  # to run it, and they would triple the size of a first (uncached) frame.
  set(common_flags -O2 -fPIC -g0 -fno-asynchronous-unwind-tables -fno-unwind-tables
      -fno-stack-protector -ffunction-sections -I${THREECHAINS_IFUNC_INCLUDE_DIR})
  set(out_dir ${CMAKE_CURRENT_BINARY_DIR}/${target}.d)
  set(images)
  set(image_args)
  foreach(triple IN LISTS ARG_TRIPLES)
    # A foreign triple compiles against Debian's cross libc headers
    # (libc6-dev-<arch>-cross installs them under /usr/<triple>).
    set(triple_flags)
    if(NOT triple MATCHES "^${CMAKE_SYSTEM_PROCESSOR}" AND EXISTS /usr/${triple}/include)
      set(triple_flags --sysroot=/usr/${triple})
    endif()
    foreach(kind IN LISTS kinds)
      if(kind STREQUAL "bitcode")
        set(kind_flag -emit-llvm)
        if(NOT ARG_PREOPTIMISED)
          # -O2 semantics (no optnone, TBAA, lifetimes) without running the passes.
          list(APPEND kind_flag -Xclang -disable-llvm-optzns)
        endif()
        set(ext bc)
      else()
        # JITLink has no native ELF TLS without the ORC runtime; emulated TLS
        # (__emutls_get_address, from libgcc_s) is what ORC itself uses for bitcode.
        set(kind_flag -femulated-tls)
        set(ext o)
      endif()
      set(objects)
      foreach(src IN LISTS ARG_SOURCES)
        get_filename_component(src_abs ${src} ABSOLUTE)
        get_filename_component(stem ${src} NAME_WE)
        get_filename_component(src_ext ${src} LAST_EXT)
        string(TOLOWER "${src_ext}" src_ext)
        set(obj ${out_dir}/${stem}.${triple}.${ext})
        if(src_ext MATCHES "^\\.(f|f90|f95|f03|f08)$")
          _threechains_fortran_command(compile ${triple} ${src_abs} ${obj})
          set(depfile_args)
        elseif(src_ext STREQUAL ".rs")
          # rustc writes its temporaries (<crate>.<crate>.<hash>-cgu.0.rcgu.*) next
          # to the output under names that do not depend on the target, so two
          # triples (or kinds) compiling in parallel in one directory race on
          # them: each gets a directory of its own.
          set(obj ${out_dir}/${triple}-${kind}/${stem}.${triple}.${ext})
          _threechains_rust_command(compile ${triple} ${src_abs} ${obj})
          set(depfile_args)
        elseif(src_ext STREQUAL ".ll")
          # LLVM assembly: clang assembles it (no headers, so no depfile).
          set(compile ${THREECHAINS_CLANG} --target=${triple} ${common_flags} ${kind_flag}
                      ${ARG_FLAGS} -Wno-override-module -Wno-unused-command-line-argument
                      -c ${src_abs} -o ${obj})
          set(depfile_args)
        else()
          # C and C++. The header dependencies clang finds, so editing a header
          # shared by the host program and the ifunc rebuilds the container.
          set(compile ${THREECHAINS_CLANG} --target=${triple} ${triple_flags} ${common_flags}
                      ${kind_flag} ${ARG_FLAGS} -MD -MF ${obj}.d -c ${src_abs} -o ${obj})
          set(depfile_args DEPFILE ${obj}.d)
        endif()
        get_filename_component(obj_dir ${obj} DIRECTORY)
        add_custom_command(OUTPUT ${obj}
          COMMAND ${CMAKE_COMMAND} -E make_directory ${obj_dir}
          COMMAND ${compile}
          DEPENDS ${src_abs}
          ${depfile_args}
          COMMENT "ifunc ${ARG_NAME}: ${stem} -> ${triple} ${kind}"
          VERBATIM)
        list(APPEND objects ${obj})
      endforeach()
      list(LENGTH objects n)
      if(n GREATER 1)
        # Several sources make one image: bitcode modules linked into one module
        # (llvm-link: the target's pipeline then inlines across them), objects
        # into one relocatable object (ld.lld -r).
        set(linked ${out_dir}/${target}.${triple}.linked.${ext})
        if(kind STREQUAL "bitcode")
          if(NOT THREECHAINS_LLVM_LINK)
            message(FATAL_ERROR "threechains_add_ifunc(${target}): several bitcode sources need "
                                "llvm-link-22 (Debian package llvm-22)")
          endif()
          set(link_command ${THREECHAINS_LLVM_LINK} ${objects} -o ${linked})
        else()
          if(NOT THREECHAINS_LLD)
            message(FATAL_ERROR "threechains_add_ifunc(${target}): several binary sources need "
                                "ld.lld-22 (Debian package lld-22)")
          endif()
          set(link_command ${THREECHAINS_LLD} -r ${objects} -o ${linked})
        endif()
        add_custom_command(OUTPUT ${linked}
          COMMAND ${link_command}
          DEPENDS ${objects}
          COMMENT "ifunc ${ARG_NAME}: linking ${n} ${triple} ${kind} images"
          VERBATIM)
        set(objects ${linked})
      endif()
      if(ARG_PRELINKED AND kind STREQUAL "binary")
        if(NOT THREECHAINS_LLD)
          message(FATAL_ERROR "threechains_add_ifunc(${target}): PRELINKED needs ld.lld-22 "
                              "(Debian package lld-22)")
        endif()
        # Everything resolved here but the base and the imports; no relro
        # segment (the loader protects by segment), no lazy binding, and
        # read-only data in the code's segment: one page protection to set
        # per load, not two (an mprotect costs microseconds on a VM).
        set(prelinked ${out_dir}/${target}.${triple}.prelinked.so)
        add_custom_command(OUTPUT ${prelinked}
          COMMAND ${THREECHAINS_LLD} -shared -Bsymbolic -z now -z norelro -z noexecstack --no-rosegment
                  --hash-style=gnu ${objects} ${THREECHAINS_PRELINK_SCRIPT} -o ${prelinked}
          DEPENDS ${objects} ${THREECHAINS_PRELINK_SCRIPT}
          COMMENT "ifunc ${ARG_NAME}: pre-linking the ${triple} image"
          VERBATIM)
        set(objects ${prelinked})
      endif()
      list(APPEND images ${objects})
      list(APPEND image_args --image ${triple}=${objects})
    endforeach()
  endforeach()
  # GPU images: bitcode for the GPU's triple, compiled by the target for its
  # own GPU. Freestanding: the GPU has no libc (math comes from libdevice,
  # __nv_sqrt and friends, or clang's __builtin_ functions). The PTX ISA
  # named here only decides which builtins the source may use (barrier.sync
  # needs 6.0): clang otherwise takes it from a CUDA installation it finds,
  # or none, and the target compiles for its own GPU's ISA whatever it says.
  foreach(gpu IN LISTS ARG_GPU)
    if(NOT gpu STREQUAL "nvptx64")
      message(FATAL_ERROR "threechains_add_ifunc(${target}): GPU ${gpu} is not supported (nvptx64 is)")
    endif()
    set(triple nvptx64-nvidia-cuda)
    set(objects)
    foreach(src IN LISTS ARG_SOURCES)
      get_filename_component(src_abs ${src} ABSOLUTE)
      get_filename_component(stem ${src} NAME_WE)
      get_filename_component(src_ext ${src} LAST_EXT)
      string(TOLOWER "${src_ext}" src_ext)
      if(NOT src_ext MATCHES "^\\.(c|cc|cpp|cxx)$")
        message(FATAL_ERROR "threechains_add_ifunc(${target}): GPU code is built from C and C++ "
                            "sources; ${src} is neither")
      endif()
      set(obj ${out_dir}/${stem}.${triple}.bc)
      add_custom_command(OUTPUT ${obj}
        COMMAND ${CMAKE_COMMAND} -E make_directory ${out_dir}
        COMMAND ${THREECHAINS_CLANG} --target=${triple} -ffreestanding -O2 -g0 -emit-llvm
                -Xclang -disable-llvm-optzns -Xclang -target-feature -Xclang +ptx78
                -I${THREECHAINS_IFUNC_INCLUDE_DIR} ${ARG_FLAGS}
                -MD -MF ${obj}.d -c ${src_abs} -o ${obj}
        DEPENDS ${src_abs}
        DEPFILE ${obj}.d
        COMMENT "ifunc ${ARG_NAME}: ${stem} -> ${triple} bitcode"
        VERBATIM)
      list(APPEND objects ${obj})
    endforeach()
    list(LENGTH objects n)
    if(n GREATER 1)
      if(NOT THREECHAINS_LLVM_LINK)
        message(FATAL_ERROR "threechains_add_ifunc(${target}): several GPU sources need "
                            "llvm-link-22 (Debian package llvm-22)")
      endif()
      set(linked ${out_dir}/${target}.${triple}.linked.bc)
      add_custom_command(OUTPUT ${linked}
        COMMAND ${THREECHAINS_LLVM_LINK} ${objects} -o ${linked}
        DEPENDS ${objects}
        COMMENT "ifunc ${ARG_NAME}: linking ${n} GPU images"
        VERBATIM)
      set(objects ${linked})
    endif()
    list(APPEND images ${objects})
    list(APPEND image_args --image ${triple}=${objects})
  endforeach()
  set(dep_args)
  foreach(dep IN LISTS ARG_DEPS)
    list(APPEND dep_args --dep ${dep})
  endforeach()
  set(container ${CMAKE_CURRENT_BINARY_DIR}/${target}.tcc)
  add_custom_command(OUTPUT ${container}
    COMMAND ${pack} --name ${ARG_NAME} --codec ${ARG_CODEC} ${image_args} ${dep_args} ${sign_args} -o ${container}
    DEPENDS ${images} ${pack} ${key_file}
    COMMENT "ifunc ${ARG_NAME}: packing ${ARG_CODEC} container"
    VERBATIM)
  add_custom_target(${target} ALL DEPENDS ${container})
  if(key_target)
    add_dependencies(${target} ${key_target})
  endif()
  set_target_properties(${target} PROPERTIES THREECHAINS_CONTAINER ${container})
endfunction()

# threechains_use_ifuncs(<target> <MACRO>=<ifunc target>...)
#
# Compiles <target> with each MACRO defined as the path of that ifunc's
# container (a string literal), and builds the container first:
#   threechains_use_ifuncs(my_app COUNTER_TCC=counter_ifunc)
#   ... tc::Ifunc::load(COUNTER_TCC)
function(threechains_use_ifuncs target)
  foreach(pair IN LISTS ARGN)
    if(NOT pair MATCHES "^([A-Za-z_][A-Za-z0-9_]*)=(.+)$")
      message(FATAL_ERROR "threechains_use_ifuncs(${target}): '${pair}' is not MACRO=ifunc_target")
    endif()
    set(macro ${CMAKE_MATCH_1})
    set(ifunc ${CMAKE_MATCH_2})
    target_compile_definitions(${target} PRIVATE
      ${macro}="$<TARGET_PROPERTY:${ifunc},THREECHAINS_CONTAINER>")
    add_dependencies(${target} ${ifunc})
  endforeach()
endfunction()

function(threechains_add_key target)
  cmake_parse_arguments(ARG "" "SECRET;PUBLIC" "" ${ARGN})
  if(NOT ARG_SECRET OR NOT ARG_PUBLIC)
    message(FATAL_ERROR "threechains_add_key(${target}): SECRET and PUBLIC are required")
  endif()
  if(TARGET ThreeChains::threechains-key)
    set(tool $<TARGET_FILE:ThreeChains::threechains-key>)
  else()
    message(FATAL_ERROR "threechains_add_key needs the threechains-key tool")
  endif()
  get_filename_component(ARG_SECRET ${ARG_SECRET} ABSOLUTE)
  get_filename_component(ARG_PUBLIC ${ARG_PUBLIC} ABSOLUTE)
  # The tool makes missing directories (the secret's owner-only).
  add_custom_command(OUTPUT ${ARG_SECRET} ${ARG_PUBLIC}
    COMMAND ${tool} generate --secret ${ARG_SECRET} --public ${ARG_PUBLIC}
    COMMENT "key pair ${ARG_PUBLIC}"
    VERBATIM)
  add_custom_target(${target} ALL DEPENDS ${ARG_SECRET} ${ARG_PUBLIC})
  # threechains_add_ifunc(... SIGN_KEY <this secret>) depends on this target.
  string(SHA1 key_id "${ARG_SECRET}")
  set_property(GLOBAL PROPERTY THREECHAINS_KEY_TARGET_${key_id} ${target})
endfunction()
