// The code of a shared object, apart from its name tags: what the loader maps (every PT_LOAD segment's bytes, with
// the address, size and permissions it is mapped with), with the notes inside them and the ELF header's
// section-table fields zeroed. Two builds with the same
// code_sha256 run the same instructions on the same constants: a source with a comment added, a dead local variable
// the optimizer removed, or the same file under another name (whose name is only in the unmapped .symtab, and in the
// GNU build-id note, which hashes the whole file) all give the baseline's. Used to decide a candidate that is the
// baseline's own code at once (record/decision.h, identical_to_baseline).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kwb {

// SHA-256 (hex) of the mapped code of the 64-bit little-endian ELF shared object `bytes`; nullopt, with `why`, when
// it is not one whose program headers can be read within its bytes.
std::optional<std::string> elf_code_sha256(std::string_view bytes, std::string& why);

}  // namespace kwb
