// The supervisor of a generator's sandbox (experiment/generator_sandbox.h; docs/threat-model.md, "Generators"): kwb's
// side of the seccomp user notification that kwb-generator-shim sets up. It reads each supervised call's path or
// peer address from the caller's memory, lets a call within the sandbox's view go on, and records and refuses
// (EACCES) one that reaches outside it.
#pragma once

#include "experiment/generator_sandbox.h"

#include <filesystem>
#include <memory>
#include <vector>

namespace kwb {

// Absolute and lexically normal, without a trailing separator ("/a/b/" is "/a/b").
std::filesystem::path normal_path(const std::filesystem::path& p);

// What the generator sees, by absolute path inside: the binds, at the same paths as outside, and the sandbox's own
// fresh /tmp. A bind below /tmp (a writable folder in /tmp/kwb-XXXX/arm/out) has folders above it inside /tmp that
// bwrap made empty (/tmp/kwb-XXXX, /tmp/kwb-XXXX/arm): a path below those that is not within a bind names the host's
// file beside the bind (/tmp/kwb-XXXX/arm/secret), which the generator must not reach, so it is not the fresh /tmp.
class SandboxView {
public:
  void bind(const std::filesystem::path& root) { m_binds.push_back(normal_path(root)); }
  void fresh(const std::filesystem::path& root) { m_fresh.push_back(normal_path(root)); }
  bool contains(const std::filesystem::path& p) const;
  // `p` is a folder above something bound (/, /work when /work/x is bound): inside, an empty folder bwrap made.
  bool is_above(const std::filesystem::path& p) const;

private:
  // Whether p and b (both within f) share at least the first folder below f, and that folder is b's ancestor, not b.
  static bool shares_folder_below(const std::filesystem::path& p, const std::filesystem::path& b,
                                  const std::filesystem::path& f);
  std::vector<std::filesystem::path> m_binds;
  std::vector<std::filesystem::path> m_fresh;
};

// Answers the notifications of one sandbox and records its violations into `result` (which it must not outlive).
class GeneratorSupervisor {
public:
  GeneratorSupervisor(const SandboxView& view, GeneratorResult& result);
  ~GeneratorSupervisor();
  GeneratorSupervisor(const GeneratorSupervisor&) = delete;
  GeneratorSupervisor& operator=(const GeneratorSupervisor&) = delete;

  // Receives one notification and answers it. A caller that is gone meanwhile is no error; any other failure to
  // receive is returned (errno), after which the caller closes the listener.
  int serve(int notify_fd);
  // The generator's main process (a pidfd), once its first supervised call was seen; -1 before.
  int main_pidfd() const;

private:
  class Impl;
  std::unique_ptr<Impl> m_impl;
};

// The notification descriptor kwb-generator-shim sends (SCM_RIGHTS); -1 when the socket ended without one (bwrap or
// the shim failed before), or, with `wait` false, when none is there now.
int receive_notify_fd(int socket_fd, bool wait);

}  // namespace kwb
