#include "util/subprocess.h"

#include "util/error.h"
#include "util/fd.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace kwb {

CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          StderrMode stderr_mode) {
  int out_fds[2], err_fds[2];
  KWB_POSIX_CALL(::pipe2(out_fds, O_CLOEXEC));
  UniqueFd out_read(out_fds[0]), out_write(out_fds[1]);
  KWB_POSIX_CALL(::pipe2(err_fds, O_CLOEXEC));
  UniqueFd err_read(err_fds[0]), err_write(err_fds[1]);
  const bool separate = stderr_mode == StderrMode::separate;

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_write.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, separate ? err_write.get() : out_write.get(), 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  out_write.reset();
  err_write.reset();

  CommandResult result;
  if (rc != 0) {
    result.exit_code = 127;
    result.output = std::string("cannot run '") + argv[0] + "': " + std::strerror(rc);
    return result;
  }

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buffer[4096];
  std::vector<pollfd> fds = {{out_read.get(), POLLIN, 0}, {err_read.get(), POLLIN, 0}};
  std::string* sinks[2] = {&result.output, &result.errors};
  size_t open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      result.timed_out = true;
      break;
    }
    int pr = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fds[i].fd = -1;  // poll ignores negative descriptors
        --open_fds;
        continue;
      }
      sinks[i]->append(buffer, static_cast<size_t>(n));
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  return result;
}

std::string first_line_of(const std::vector<std::string>& argv) {
  CommandResult r = run_command(argv, std::chrono::seconds(30));
  if (r.exit_code != 0) return "";
  return r.output.substr(0, r.output.find('\n'));
}

}  // namespace kwb
