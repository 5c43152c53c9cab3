// The sandbox an experiment arm's generator runs in (docs/threat-model.md, "Generators (kwb experiment)"). A
// generator (an AI agent's CLI, a shipped script) proposes kernels and is untrusted: kwb runs it under bubblewrap, as
// it runs compilers (builder/build_sandbox.h), and additionally records every attempt to reach outside what it sees.
//
// What it sees: the system roots as the build sandbox binds them (/usr, the merged-usr links, the few /etc entries),
// a fresh tmpfs /tmp, /dev, /proc (its own PID namespace), kwb-generator-shim, the read-only folders and the one
// writable folder, each at its own absolute path. No network (every namespace unshared, no user namespace of its own
// inside), no capabilities, a new session, rlimits, a wall-clock limit; nothing it starts outlives its main process.
// When kwb is root, the generator runs as a user of its own (util/worker_user.h), who owns the writable folder for the
// run only.
//
// What is recorded: kwb-generator-shim, the first program inside, loads a seccomp filter that hands every system call
// naming a path, every socket that is not AF_UNIX and every call naming a peer's address to kwb (seccomp user
// notification; generator_supervisor.h), then executes the generator. kwb, outside, reads the path from the caller's
// memory, resolves it against the caller's working folder or directory descriptor, and lets the call go on when it
// lies within the view; a peer is allowed on the sandbox's own loopback (where the loopback bridge to the model
// proxy listens). Anything else is a violation: recorded, and answered EACCES. The record is evidence on top of the
// isolation, not the isolation itself: a thread that rewrites the path after kwb read it can make the record miss an
// attempt, never make it succeed, because the mount and network namespaces are what enforce the view.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kwb {

struct GeneratorSpec {
  std::vector<std::string> argv;  // argv[0]: absolute, or looked up on PATH=/usr/local/bin:/usr/bin:/bin
  std::filesystem::path cwd;      // must lie within a bind (read_only or writable); empty: the writable folder
  // Bound read-only at the same absolute path. When kwb is root the generator runs as another user, so each must be
  // readable by others (o+r, and o+x for folders and every folder above): run_generator checks each and the folders
  // above it, and fails naming the one that is not; the caller keeps what is inside readable too.
  std::vector<std::filesystem::path> read_only;
  // Bound read-write at the same absolute path: an existing folder (not a symbolic link) that kwb made for this run.
  // When kwb is root it is handed to the generator's user for the run (every entry, never following a link; a file
  // with a second hard link is refused) and taken back afterwards.
  std::filesystem::path writable;
  std::vector<std::pair<std::string, std::string>> env;  // set besides PATH, HOME (=writable), TMPDIR (=/tmp),
                                                         // LANG=C.UTF-8, which it may not name
  std::chrono::milliseconds wall{60000};
  std::uint64_t address_space_bytes = 4ull << 30;  // RLIMIT_AS, per process
  std::uint64_t cpu_seconds = 120;                 // RLIMIT_CPU, per process
  std::uint64_t file_size_bytes = 64ull << 20;     // RLIMIT_FSIZE
  std::size_t max_output_bytes = 256 << 10;
  // The writable folder's bounds, checked when kwb takes it back after the run (and before a run, for what a run
  // kwb did not see end left): every regular file's bytes together at most work_quota_bytes, no folder deeper than
  // k_max_work_depth below it, no file with a second name (a hard link). A folder past one is reset (emptied) and
  // the run's result says why (GeneratorResult::folder_problems): the generator's doing, never kwb's error.
  std::uint64_t work_quota_bytes = 256ull << 20;
  // RLIMIT_NPROC (a fork bomb), applied only when kwb is root: then the generator's user is its own, and the count
  // is the sandbox's alone (otherwise it would count every process of the invoking user).
  std::uint64_t max_processes = 4096;
  // A descriptor (an eventfd) that becomes readable when the run must end before its time: the arm's model proxy
  // (experiment/model_proxy.h) once a budget is passed. The generator is then killed as at the wall-clock limit, and
  // the result says `stopped`. -1: none.
  int stop_fd = -1;
  // Work that must run on kwb's main thread while the generator runs (a check the generator asked for through the
  // proxy starts a kwb process, and children start only from the main thread: util/subprocess.h): when service_fd
  // becomes readable, run_generator calls service() from its loop. -1: none.
  int service_fd = -1;
  std::function<void()> service;
};

struct SandboxViolation {
  std::string kind;     // "network" or "path"
  std::string syscall;  // "socket", "openat", "execve", "newfstatat", ...
  // The path as resolved (absolute, lexically normal, as the generator names it inside), or the address family
  // ("AF_INET"). Untrusted text: escape it before showing it (util/text.h).
  std::string target;

  bool operator==(const SandboxViolation&) const = default;
};

struct GeneratorResult {
  // The generator's exit status. A generator killed by signal N exits 128 + N here: it is the sandbox's PID 1, and
  // bwrap passes its death on as that status (so does the kill at the wall limit: 137, with timed_out).
  int exit_code = -1;
  int signal = 0;  // the signal that ended bwrap itself (kwb's kill, when the generator had not started yet)
  bool timed_out = false;
  bool stopped = false;  // ended through GeneratorSpec::stop_fd
  std::string output;    // merged stdout+stderr, capped at max_output_bytes (a last line says so when cut)
  double wall_seconds = 0.0;
  // user+sys of every process in the sandbox (wait4 rusage of the sandbox's root process, bwrap, which waits for the
  // generator, which as PID 1 reaps everything it leaves).
  double cpu_seconds = 0.0;
  // Each distinct (kind, syscall, target) once, in the order first seen, at most 100.
  std::vector<SandboxViolation> violations;
  // Distinct violations beyond those 100 (exactly up to 65 536 of them; past that, every attempt counts).
  std::size_t violations_dropped = 0;
  // What the generator left in its writable folder past the folder's bounds (GeneratorSpec::work_quota_bytes): one
  // sentence each; the folder was reset. Empty when it kept within them.
  std::vector<std::string> folder_problems;
};

// The deepest a generator's writable folder may nest (folders below it); deeper is a folder problem.
inline constexpr int k_max_work_depth = 32;

// Runs the generator in its sandbox on the calling thread, which must be kwb's main thread (util/subprocess.h), and
// returns once it and everything it started are gone. Throws Error(ExitCode::unavailable) with what to install or
// enable when the sandbox cannot be set up (no bwrap, namespaces refused, seccomp user notification unsupported,
// kwb-generator-shim missing), DataError when the spec names what cannot be bound (a missing folder, a cwd outside
// the binds, a read-only folder others cannot read when kwb is root), Interrupted when kwb is. Never runs a
// generator unsandboxed or unsupervised.
GeneratorResult run_generator(const GeneratorSpec& spec);

// Reads `name` (a plain file name) from `dir` for the caller, safely: O_NOFOLLOW|O_NONBLOCK via openat on a dir fd
// opened O_DIRECTORY|O_NOFOLLOW, must be a regular file, at most max_bytes. nullopt + why (one sentence naming the
// file) otherwise.
std::optional<std::string> read_generated_file(const std::filesystem::path& dir, const std::string& name,
                                               size_t max_bytes, std::string& why);

}  // namespace kwb
