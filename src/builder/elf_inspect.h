// What a built shared object exports, read from its dynamic symbol table the way the dynamic loader reads it
// (PT_DYNAMIC: DT_SYMTAB, DT_STRTAB and the DT_GNU_HASH / DT_HASH tables), before any worker loads it. An
// implementation that defines a libc, libm, libstdc++, loader or timing function (clock_gettime, gettimeofday,
// malloc, memcpy, pthread_create, dlsym, operator new, std::chrono clocks...) is trying to interpose on the harness
// or on the libraries it shares with it, and is refused with `forbidden_symbol` (docs/threat-model.md).
#pragma once

#include "util/failure_reason.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

struct ElfSymbol {
  std::string name;
  bool function = false;  // STT_FUNC or STT_GNU_IFUNC
  bool weak = false;      // STB_WEAK (template and inline instantiations are emitted weak)
};

struct ElfInspection {
  bool ok = false;
  std::string error;                // why the file could not be read as a 64-bit shared object
  std::vector<ElfSymbol> exported;  // defined, global or weak, default or protected visibility
  std::vector<std::string> needed;  // DT_NEEDED
};

// Never throws for a malformed file: `ok` is false and `error` says what is wrong.
ElfInspection inspect_shared_object(const std::filesystem::path& path);

// The exports of `inspection` an implementation may not define, each with why. Empty: acceptable.
std::vector<std::string> forbidden_exports(const ElfInspection& inspection);

// Why a worker must not load `artifact`: reason `forbidden_symbol` (with every offending export in the detail), or
// `load_failed` when it is not a shared object the inspection can read. No reason: it may be loaded.
struct LoadRefusal {
  std::optional<FailureReason> reason;
  std::string detail;
};
LoadRefusal refuse_to_load(const std::filesystem::path& artifact);

}  // namespace kwb
