// kwb started in the background by an integration test, its stdout and stderr in files, and a polling helper: for
// tests that watch kwb while it runs (interrupt_test: signals; timing_lock_test: two kwb processes at once).
#pragma once

#include "support/build_paths.h"
#include "util/fs.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kwb::test {

// Polls `done` until it holds or `within` has passed.
template <typename F>
bool eventually(F done, std::chrono::milliseconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// kwb in the background, its stdout and stderr in files.
class BackgroundKwb {
public:
  explicit BackgroundKwb(std::vector<std::string> args, const std::vector<std::string>& extra_env = {}) {
    static int instances = 0;
    const std::string stem = "kwb-background-" + std::to_string(::getpid()) + "-" + std::to_string(++instances);
    m_out = std::filesystem::temp_directory_path() / (stem + ".out");
    m_err = std::filesystem::temp_directory_path() / (stem + ".err");
    args.insert(args.begin(), KWB_BINARY);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_strings(extra_env);
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, m_out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&actions, 2, m_err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int rc = ::posix_spawn(&m_pid, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) m_pid = -1;
  }
  ~BackgroundKwb() {
    if (m_pid > 0 && !m_status) {
      ::kill(m_pid, SIGKILL);
      (void)::waitpid(m_pid, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove(m_out, ec);
    std::filesystem::remove(m_err, ec);
  }
  BackgroundKwb(const BackgroundKwb&) = delete;
  BackgroundKwb& operator=(const BackgroundKwb&) = delete;

  pid_t pid() const { return m_pid; }
  // Its wait status, once it has ended within `within`.
  std::optional<int> wait(std::chrono::milliseconds within) {
    eventually(
        [&] {
          int status = 0;
          if (::waitpid(m_pid, &status, WNOHANG) == m_pid) m_status = status;
          return m_status.has_value();
        },
        within);
    return m_status;
  }
  bool ended() { return wait(std::chrono::milliseconds(0)).has_value(); }
  // Its standard output so far.
  std::string output() const {
    std::error_code ec;
    return std::filesystem::exists(m_out, ec) ? read_file(m_out) : "";
  }
  // Its standard error so far.
  std::string errors() const {
    std::error_code ec;
    return std::filesystem::exists(m_err, ec) ? read_file(m_err) : "";
  }
  std::string log() const {
    std::error_code ec;
    std::string s = std::filesystem::exists(m_out, ec) ? read_file(m_out) : "";
    if (std::filesystem::exists(m_err, ec)) s += read_file(m_err);
    return s.size() > 3000 ? s.substr(s.size() - 3000) : s;
  }

private:
  pid_t m_pid = -1;
  std::optional<int> m_status;
  std::filesystem::path m_out, m_err;
};

}  // namespace kwb::test
