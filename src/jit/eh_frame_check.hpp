// Checks a pre-linked image's unwind tables before the unwinder sees them.
// The unwinder takes a .eh_frame on trust: it walks its records by their
// lengths up to a zero terminator (at registration, and again whenever
// anything in the process throws), looks the code it describes up by the
// FDEs' address ranges (before the process's own objects: an FDE over host
// code would take over its unwinding), and cannot take back a section whose
// first record is the terminator (libgcc aborts the process). So every
// record is walked here, in the mapped image, after relocation: lengths
// within the section, each FDE's CIE in it, the CIE's augmentation
// understood, each FDE's code range inside the image's code, at least one
// record, then the terminator and nothing but zeros.
#pragma once

#include <llvm/ADT/STLFunctionalExtras.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace threechains::jit {

// `section` is the mapped .eh_frame, at `address`; `in_code(begin, end)`
// says whether [begin, end) lies in the image's executable segments. Throws
// Error(jit_failed) naming `name` and what is wrong.
void check_eh_frame(std::span<const std::byte> section, uint64_t address,
                    llvm::function_ref<bool(uint64_t begin, uint64_t end)> in_code,
                    const std::string& name);

}  // namespace threechains::jit
