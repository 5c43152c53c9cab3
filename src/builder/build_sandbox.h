// The compiler's sandbox (docs/threat-model.md, "Build"): a candidate's source is untrusted input to the compiler,
// and `#include "/etc/shadow"` or `.incbin` would otherwise embed any file the invoking user can read. Every compile
// of candidate code runs under bubblewrap with:
//   - read-only: the toolchain roots (/usr and the merged-usr links /bin /lib /lib64 /sbin, or binds where they are
//     real folders), the few /etc files the drivers need (alternatives, ld.so.cache), the compiler's own prefix
//     when it lives elsewhere (a CUDA toolkit outside /usr), kwb's ABI include folder, the candidate's folder;
//   - writable: one fresh private output folder (the object, the depfiles, the compiler's temporary files);
//   - every namespace unshared (no network, its own PID namespace killed with it), no capabilities, a new session;
//   - rlimits (address space, CPU, file size) and a wall-clock limit after which the whole sandbox is killed.
// Paths keep their absolute names inside, so compiler messages and depfiles name real paths.
// There is no unsandboxed fallback: where bubblewrap is missing or cannot create namespaces, builds fail with
// exit 69 (unavailable) and a message that says what to install or enable.
#pragma once

#include "util/subprocess.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace kwb {

struct BuildSandboxLimits {
  std::uint64_t address_space_bytes = 4ull << 30;  // RLIMIT_AS per process (nvcc's cicc and ptxas fit in 4 GiB)
  std::uint64_t cpu_seconds = 300;                 // RLIMIT_CPU per process
  std::uint64_t file_size_bytes = 1ull << 30;      // RLIMIT_FSIZE: no object or temporary larger than 1 GiB
  std::chrono::milliseconds wall{std::chrono::minutes(5)};
  std::size_t max_output_bytes = 1 << 20;  // compiler output kept (the rest is drained and dropped)
};

struct BuildSandboxSpec {
  std::vector<std::filesystem::path> read_only;  // bound read-only at the same path (besides the toolchain roots)
  std::filesystem::path writable;                // the private output folder, bound read-write; also $TMPDIR's parent
  std::filesystem::path workdir;                 // the compiler's working directory (the candidate's folder)
};

// The folders and files every compile may read: toolchain roots and the /etc entries the drivers need. A root that
// is a symlink (merged /usr) is recreated as the same symlink inside.
std::vector<std::filesystem::path> build_sandbox_system_roots();

// The prefix of a compiler outside the system roots that must be bound too: for /opt/cuda-x/bin/nvcc (after
// resolving PATH and symlinks) this is /opt/cuda-x. Empty when the compiler already lies under a system root.
std::filesystem::path compiler_prefix_to_bind(const std::string& compiler);

// Throws Error(unavailable) unless bubblewrap is installed and can create the namespaces the build needs. Probed
// once per process.
void require_build_sandbox();

// Runs argv inside the sandbox. argv[0] is looked up on the caller's PATH. The result's output is the compiler's
// merged stdout/stderr; timed_out when the wall-clock limit killed it. Throws Error(unavailable) when the sandbox
// itself cannot be set up.
CommandResult run_in_build_sandbox(const std::vector<std::string>& argv, const BuildSandboxSpec& spec,
                                   const BuildSandboxLimits& limits = {});

struct SandboxedCommand {
  std::vector<std::string> argv;
  BuildSandboxSpec spec;
};

// Runs each command as run_in_build_sandbox does, up to `jobs` at once; the results are in the commands' order.
// Every sandbox is started and reaped on the calling thread, which must be kwb's main thread (util/subprocess.h:
// a child dies with the thread that started it), and each has its own limits; the wall-clock limit counts from its
// own start. On an interruption, the sandboxes still running are killed and reaped before the exception leaves.
std::vector<CommandResult> run_all_in_build_sandbox(const std::vector<SandboxedCommand>& commands, std::size_t jobs,
                                                    const BuildSandboxLimits& limits = {});

// How many compiles kwb runs at once: the CPUs it may run on (its affinity mask), no more than 2 GiB of the
// machine's memory each can hold, at least 1.
std::size_t build_jobs();

// What of the machine and of kwb's environment reaches a compile of `compiler` and can change the object it makes,
// for the artifact cache's key (builder.h): the PATH the sandbox passes on (the driver finds the assembler and the
// linker through it), the compiler's resolved real path, and this CPU's model and feature flags (the flags target it:
// -march=native). The locale variables the sandbox also passes change only messages.
std::vector<std::string> build_environment_identity(const std::string& compiler);

// The pieces the generator sandbox (experiment/generator_sandbox.h) shares with the build's, so that both see the
// system the same way and die the same way.
// bwrap's absolute path (found on kwb's PATH, else /usr/bin/bwrap), "" when it is not installed. Looked up once.
std::string find_bubblewrap();
// The bwrap arguments for the toolchain roots: binds for real folders, the same symlinks for merged-usr links, and
// the /etc entries of build_sandbox_system_roots.
std::vector<std::string> sandbox_system_root_args();
// `bwrap` and the sandbox's fixed part: every namespace unshared, --die-with-parent, --new-session, no capabilities,
// the system roots, a fresh 256 MiB tmpfs /tmp, /dev and /proc.
std::vector<std::string> sandbox_base_args(const std::string& bwrap);
// The rlimits every sandbox starts under (inherited by everything in it): address space, CPU (SIGXCPU at the limit,
// SIGKILL 5 s later), file size, no core files.
std::vector<std::pair<RlimitResource, rlimit>> sandbox_rlimits(std::uint64_t address_space_bytes,
                                                               std::uint64_t cpu_seconds,
                                                               std::uint64_t file_size_bytes);

}  // namespace kwb
