// Internal: what the compile worker does with confined bitcode: parse it,
// check it, screen it, optimise it for this host, confine it, compile it to
// a relocatable object. Runs in the worker process only
// (compile_worker_main.cpp): this is the code hostile bitcode drives.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace threechains {

class ConfinedCompiler {
 public:
  struct Options {
    int optimisation_level = 2;        // JitOptions::optimisation_level
    int codegen_level = 2;             // JitOptions::codegen_level
    std::size_t max_global_bytes = 0;  // ConfinementOptions::max_global_bytes
    // ConfinementOptions::window_tier: the window shape (confine/pass.hpp,
    // shape_for_window) where the module takes it, the checked pass where
    // it does not. The target tells which from the object (it defines no
    // confined globals table) and verifies what claims the shape.
    bool window_shape = false;
  };
  // Describes this host to LLVM and builds its TargetMachines: everything
  // that reads the system, so that compile() needs only memory.
  explicit ConfinedCompiler(const Options& options);
  ~ConfinedCompiler();
  ConfinedCompiler(const ConfinedCompiler&) = delete;
  ConfinedCompiler& operator=(const ConfinedCompiler&) = delete;

  // The object compiled from `bitcode` (an IR image of ifunc `name`). Throws
  // Error as a load in the target would: bad_container (bad bitcode, IR the
  // verifier refuses), import_refused (what cannot be confined),
  // limit_exceeded (globals), jit_failed (an error the code generator reported).
  // With Options::window_shape, the module in the window shape if it takes
  // it (no imports, locals or memory intrinsics left after optimising).
  [[nodiscard]] std::vector<std::byte> compile(std::span<const std::byte> bitcode,
                                               const std::string& name);

 private:
  struct Machines;
  Options options_;
  std::unique_ptr<Machines> machines_;
};

}  // namespace threechains
