#include "util/elf_code.h"

#include "util/sha256.h"

#include <elf.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace kwb {

std::optional<std::string> elf_code_sha256(std::string_view bytes, std::string& why) {
  auto fits = [&](uint64_t offset, uint64_t size) { return offset <= bytes.size() && size <= bytes.size() - offset; };
  Elf64_Ehdr eh;
  if (!fits(0, sizeof eh)) {
    why = "shorter than an ELF header";
    return std::nullopt;
  }
  std::memcpy(&eh, bytes.data(), sizeof eh);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_phentsize != sizeof(Elf64_Phdr)) {
    why = "not a 64-bit little-endian ELF file";
    return std::nullopt;
  }
  std::vector<Elf64_Phdr> loads, notes;
  for (uint16_t i = 0; i < eh.e_phnum; ++i) {
    const uint64_t at = eh.e_phoff + uint64_t{i} * sizeof(Elf64_Phdr);
    if (!fits(at, sizeof(Elf64_Phdr))) {
      why = "program headers run past the end of the file";
      return std::nullopt;
    }
    Elf64_Phdr ph;
    std::memcpy(&ph, bytes.data() + at, sizeof ph);
    if (ph.p_type == PT_LOAD) loads.push_back(ph);
    if (ph.p_type == PT_NOTE) notes.push_back(ph);
  }
  if (loads.empty()) {
    why = "no PT_LOAD segment";
    return std::nullopt;
  }
  Sha256 h;
  h.update("kwb elf code v1\n");
  for (const Elf64_Phdr& ph : loads) {
    if (!fits(ph.p_offset, ph.p_filesz)) {
      why = "a PT_LOAD segment runs past the end of the file";
      return std::nullopt;
    }
    std::string segment(bytes.substr(ph.p_offset, ph.p_filesz));
    for (const Elf64_Phdr& n : notes) {  // the notes mapped in this segment, zeroed (the build-id among them)
      if (!fits(n.p_offset, n.p_filesz)) continue;
      const uint64_t begin = std::max(n.p_offset, ph.p_offset);
      const uint64_t end = std::min(n.p_offset + n.p_filesz, ph.p_offset + ph.p_filesz);
      if (begin < end) std::memset(segment.data() + (begin - ph.p_offset), 0, end - begin);
    }
    if (ph.p_offset == 0) {  // the ELF header's section-table fields: where the unmapped sections lie, not code
      Elf64_Ehdr mapped;
      if (segment.size() >= sizeof mapped) {
        std::memcpy(&mapped, segment.data(), sizeof mapped);
        mapped.e_shoff = 0;
        mapped.e_shnum = 0;
        mapped.e_shstrndx = 0;
        std::memcpy(segment.data(), &mapped, sizeof mapped);
      }
    }
    h.update(
        fmt::format("segment vaddr {} memsz {} flags {} filesz {}\n", ph.p_vaddr, ph.p_memsz, ph.p_flags, ph.p_filesz));
    h.update(segment);
  }
  return h.hex_digest();
}

}  // namespace kwb
