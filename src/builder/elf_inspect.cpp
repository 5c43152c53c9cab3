#include "builder/elf_inspect.h"

#include <elf.h>
#include <fmt/format.h>
#include <link.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>

namespace kwb {

namespace fs = std::filesystem;

namespace {

// A shared object is at most this big; anything larger is not something kwb built from one source file.
constexpr std::uintmax_t k_max_object_bytes = std::uintmax_t{256} << 20;

// Bounds-checked reads from the file image: every offset in an ELF file is data the candidate controls.
class Image {
public:
  explicit Image(std::string bytes) : m_bytes(std::move(bytes)) {}
  template <typename T>
  std::optional<T> at(uint64_t offset) const {
    if (offset > m_bytes.size() || m_bytes.size() - offset < sizeof(T)) return std::nullopt;
    T v;
    std::memcpy(&v, m_bytes.data() + offset, sizeof v);
    return v;
  }
  std::optional<std::string> c_string(uint64_t offset, uint64_t limit) const {
    limit = std::min<uint64_t>(limit, m_bytes.size());
    if (offset >= limit) return std::nullopt;
    const char* begin = m_bytes.data() + offset;
    const void* nul = std::memchr(begin, '\0', limit - offset);
    if (nul == nullptr) return std::nullopt;
    return std::string(begin, static_cast<const char*>(nul));
  }
  size_t size() const { return m_bytes.size(); }

private:
  std::string m_bytes;
};

struct Parsed {
  std::vector<Elf64_Phdr> loads;
  std::optional<uint64_t> symtab, strtab, strsz, hash, gnu_hash;
  std::vector<uint64_t> needed;  // string table offsets
};

// Virtual address -> file offset through the PT_LOAD segments, as the loader maps them.
std::optional<uint64_t> file_offset(const Parsed& p, uint64_t vaddr) {
  for (const Elf64_Phdr& ph : p.loads) {
    if (vaddr >= ph.p_vaddr && vaddr - ph.p_vaddr < ph.p_filesz) return ph.p_offset + (vaddr - ph.p_vaddr);
  }
  return std::nullopt;
}

// The number of symbols in .dynsym: DT_HASH says it (nchain); DT_GNU_HASH only implies it (the highest symbol
// index reachable from a bucket, then to the end of its chain).
std::optional<uint64_t> symbol_count(const Image& img, const Parsed& p) {
  uint64_t count = 0;
  bool known = false;
  if (p.hash) {
    if (auto off = file_offset(p, *p.hash)) {
      if (auto nchain = img.at<uint32_t>(*off + 4)) {
        count = std::max<uint64_t>(count, *nchain);
        known = true;
      }
    }
  }
  if (p.gnu_hash) {
    auto off = file_offset(p, *p.gnu_hash);
    if (!off) return std::nullopt;
    auto nbuckets = img.at<uint32_t>(*off);
    auto symoffset = img.at<uint32_t>(*off + 4);
    auto bloom_size = img.at<uint32_t>(*off + 8);
    if (!nbuckets || !symoffset || !bloom_size) return std::nullopt;
    const uint64_t buckets = *off + 16 + uint64_t{*bloom_size} * 8;
    const uint64_t chains = buckets + uint64_t{*nbuckets} * 4;
    uint64_t last = 0;
    for (uint32_t b = 0; b < *nbuckets; ++b) {
      auto v = img.at<uint32_t>(buckets + uint64_t{b} * 4);
      if (!v) return std::nullopt;
      last = std::max<uint64_t>(last, *v);
    }
    if (last >= *symoffset) {
      // Walk the last chain to its end (bit 0 set); bounded by the file size.
      for (uint64_t i = last;; ++i) {
        auto h = img.at<uint32_t>(chains + (i - *symoffset) * 4);
        if (!h) return std::nullopt;
        if ((*h & 1u) != 0) {
          last = i;
          break;
        }
      }
      count = std::max<uint64_t>(count, last + 1);
    } else {
      count = std::max<uint64_t>(count, *symoffset);
    }
    known = true;
  }
  if (!known) return std::nullopt;
  return count;
}

// Section headers, where present, name the same table; a hash table that hides symbols from the loader does not
// hide them from this count.
uint64_t section_symbol_count(const Image& img, const Elf64_Ehdr& eh) {
  uint64_t count = 0;
  for (uint16_t i = 0; i < eh.e_shnum; ++i) {
    auto sh = img.at<Elf64_Shdr>(eh.e_shoff + uint64_t{i} * sizeof(Elf64_Shdr));
    if (!sh) break;
    if (sh->sh_type == SHT_DYNSYM && sh->sh_entsize == sizeof(Elf64_Sym)) {
      count = std::max(count, sh->sh_size / sizeof(Elf64_Sym));
    }
  }
  return count;
}

ElfInspection fail(std::string why) {
  ElfInspection r;
  r.error = std::move(why);
  return r;
}

ElfInspection inspect_image(const Image& img) {
  auto eh = img.at<Elf64_Ehdr>(0);
  if (!eh || std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0) return fail("not an ELF file");
  if (eh->e_ident[EI_CLASS] != ELFCLASS64) return fail("not a 64-bit ELF file");
  if (eh->e_ident[EI_DATA] != ELFDATA2LSB) return fail("not a little-endian ELF file");
  if (eh->e_type != ET_DYN) return fail("not a shared object (e_type is not ET_DYN)");
  if (eh->e_phentsize != sizeof(Elf64_Phdr)) return fail("unexpected program header size");
  Parsed p;
  std::optional<Elf64_Phdr> dynamic;
  for (uint16_t i = 0; i < eh->e_phnum; ++i) {
    auto ph = img.at<Elf64_Phdr>(eh->e_phoff + uint64_t{i} * sizeof(Elf64_Phdr));
    if (!ph) return fail("program headers run past the end of the file");
    if (ph->p_type == PT_LOAD) p.loads.push_back(*ph);
    if (ph->p_type == PT_DYNAMIC) dynamic = *ph;
  }
  if (!dynamic) return fail("no PT_DYNAMIC segment: nothing the loader could bind");
  for (uint64_t off = dynamic->p_offset; off + sizeof(Elf64_Dyn) <= dynamic->p_offset + dynamic->p_filesz;
       off += sizeof(Elf64_Dyn)) {
    auto d = img.at<Elf64_Dyn>(off);
    if (!d) return fail("PT_DYNAMIC runs past the end of the file");
    if (d->d_tag == DT_NULL) break;
    switch (d->d_tag) {
      case DT_SYMTAB:
        p.symtab = d->d_un.d_ptr;
        break;
      case DT_STRTAB:
        p.strtab = d->d_un.d_ptr;
        break;
      case DT_STRSZ:
        p.strsz = d->d_un.d_val;
        break;
      case DT_HASH:
        p.hash = d->d_un.d_ptr;
        break;
      case DT_GNU_HASH:
        p.gnu_hash = d->d_un.d_ptr;
        break;
      case DT_NEEDED:
        p.needed.push_back(d->d_un.d_val);
        break;
      default:
        break;
    }
  }
  if (!p.symtab || !p.strtab) return fail("no dynamic symbol table (DT_SYMTAB/DT_STRTAB)");
  auto sym_off = file_offset(p, *p.symtab);
  auto str_off = file_offset(p, *p.strtab);
  if (!sym_off || !str_off) return fail("the dynamic symbol table lies outside the loaded segments");
  const uint64_t str_end = *str_off + p.strsz.value_or(img.size() - *str_off);
  auto count = symbol_count(img, p);
  if (!count) return fail("no usable DT_HASH or DT_GNU_HASH table");
  const uint64_t n = std::max(*count, section_symbol_count(img, *eh));
  if (n > img.size() / sizeof(Elf64_Sym)) return fail("the symbol count exceeds the file");

  ElfInspection r;
  for (uint64_t i = 1; i < n; ++i) {
    auto sym = img.at<Elf64_Sym>(*sym_off + i * sizeof(Elf64_Sym));
    if (!sym) return fail("the dynamic symbol table runs past the end of the file");
    const unsigned bind = ELF64_ST_BIND(sym->st_info);
    const unsigned type = ELF64_ST_TYPE(sym->st_info);
    const unsigned visibility = ELF64_ST_VISIBILITY(sym->st_other);
    if (sym->st_shndx == SHN_UNDEF) continue;  // an import, not a definition
    if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) continue;
    if (visibility != STV_DEFAULT && visibility != STV_PROTECTED) continue;
    auto name = img.c_string(*str_off + sym->st_name, str_end);
    if (!name) return fail("a symbol name lies outside the string table");
    r.exported.push_back({*name, type == STT_FUNC || type == STT_GNU_IFUNC, bind == STB_WEAK});
  }
  for (uint64_t off : p.needed) {
    if (auto name = img.c_string(*str_off + off, str_end)) r.needed.push_back(*name);
  }
  r.ok = true;
  return r;
}

// ---- what may not be defined ------------------------------------------------------------------------------------

// Timing, memory, loader, process, signal and thread entry points: defining one of these, even weak, is an attempt
// to interpose. (Everything else libc/libm/libstdc++ export is caught by export_names_of_system_libraries when
// defined strong; weak definitions of their names are template and inline instantiations, which cannot interpose
// on anything from an RTLD_LOCAL object.)
// clang-format off
constexpr std::string_view k_sensitive_names[] = {
    "clock_gettime", "__clock_gettime", "clock_getres", "clock_nanosleep", "clock_getcpuclockid", "gettimeofday",
    "time", "clock", "times", "timespec_get", "timespec_getres", "ftime", "getrusage", "nanosleep", "usleep",
    "sleep", "sched_yield", "pthread_getcpuclockid", "malloc", "free", "calloc", "realloc", "reallocarray",
    "aligned_alloc", "posix_memalign", "memalign", "valloc", "pvalloc", "malloc_usable_size", "mmap", "mmap64",
    "munmap", "mprotect", "mremap", "madvise", "brk", "sbrk", "memcpy", "memmove", "memset", "memcmp", "bcmp",
    "dlopen", "dlmopen", "dlsym", "dlvsym", "dlclose", "dlerror", "dladdr", "dladdr1", "dlinfo", "dl_iterate_phdr",
    "fork", "vfork", "clone", "execve", "execv", "execvp", "execvpe", "execl", "execlp", "execle", "fexecve",
    "system", "popen", "posix_spawn", "posix_spawnp", "_exit", "_Exit", "exit", "quick_exit", "abort", "atexit",
    "at_quick_exit", "on_exit", "kill", "raise", "signal", "sigaction", "sigprocmask", "ptrace", "prctl", "syscall",
    "seccomp", "open", "open64", "openat", "openat64", "creat", "read", "write", "close", "send", "sendto",
    "sendmsg", "recv", "recvfrom", "recvmsg", "socket", "connect", "poll", "ppoll", "select"
};
// clang-format on

bool sensitive_name(std::string_view n) {
  static const std::set<std::string_view> names(std::begin(k_sensitive_names), std::end(k_sensitive_names));
  if (names.contains(n)) return true;
  // Prefixes: the loader and libc internals, pthreads, the C++ ABI (atexit, exceptions, guards), operator
  // new/delete, std::chrono clocks.
  for (std::string_view prefix : {"__libc_", "_dl_", "__dl_", "__vdso_", "__tls_get_addr", "pthread_", "__pthread_",
                                  "__cxa_", "_Znw", "_Zna", "_Zdl", "_Zda", "_ZNSt6chrono"}) {
    if (n.starts_with(prefix)) return true;
  }
  return false;
}

// The dynamic exports of the system libraries every worker has loaded (it is a C++ program): libc, libm,
// libstdc++, libgcc_s and the loader. Read from the same files this (parent) process has mapped.
int collect_system_library(dl_phdr_info* info, size_t, void* out) {
  const std::string path = info->dlpi_name != nullptr ? info->dlpi_name : "";
  const std::string base = fs::path(path).filename().string();
  for (const char* lib : {"libc.so", "libm.so", "libstdc++.so", "libgcc_s.so", "ld-linux"}) {
    if (base.starts_with(lib)) {
      static_cast<std::vector<std::string>*>(out)->push_back(path);
      break;
    }
  }
  return 0;
}

const std::set<std::string>& export_names_of_system_libraries() {
  static std::set<std::string> names;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> paths;
    ::dl_iterate_phdr(collect_system_library, &paths);
    for (const std::string& p : paths) {
      ElfInspection lib = inspect_shared_object(p);
      for (const ElfSymbol& s : lib.exported) names.insert(s.name);
    }
  });
  return names;
}

}  // namespace

ElfInspection inspect_shared_object(const fs::path& path) {
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) return fail(fmt::format("cannot read {}: {}", path.string(), ec.message()));
  if (size > k_max_object_bytes) {
    return fail(fmt::format("{} is {} bytes, larger than any implementation", path.string(), size));
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) return fail("cannot read " + path.string());
  return inspect_image(Image(std::move(bytes)));
}

std::vector<std::string> forbidden_exports(const ElfInspection& inspection) {
  std::vector<std::string> out;
  const std::set<std::string>& system = export_names_of_system_libraries();
  for (const ElfSymbol& s : inspection.exported) {
    if (s.name.starts_with("kwb_")) continue;  // the ABI (kwb_run, kwb_setup, kwb_teardown, kwb_abi_version)
    if (sensitive_name(s.name)) {
      out.push_back(fmt::format("{} (a timing, memory, loader, process or C++ runtime entry point)", s.name));
    } else if (!s.weak && system.contains(s.name)) {
      out.push_back(fmt::format("{} (exported by libc, libm, libstdc++, libgcc_s or the loader)", s.name));
    }
  }
  return out;
}

LoadRefusal refuse_to_load(const fs::path& artifact) {
  ElfInspection r = inspect_shared_object(artifact);
  if (!r.ok) return {FailureReason::load_failed, fmt::format("{}: {}", artifact.string(), r.error)};
  std::vector<std::string> bad = forbidden_exports(r);
  if (bad.empty()) return {};
  return {FailureReason::forbidden_symbol,
          fmt::format("the implementation defines and exports {}; an implementation may export only kwb_* symbols "
                      "and must not interpose on the C/C++ runtime or on clocks (give other functions internal "
                      "linkage: static, an anonymous namespace, or hidden visibility)",
                      fmt::join(bad, ", "))};
}

}  // namespace kwb
