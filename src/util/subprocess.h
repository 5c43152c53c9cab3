#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace kwb {

struct CommandResult {
  int exit_code = -1;    // valid when !signaled && !timed_out
  int signal = 0;        // terminating signal, 0 if none
  bool timed_out = false;
  std::string output;    // stdout (and stderr, unless StderrMode::separate)
  std::string errors;    // stderr with StderrMode::separate
};

enum class StderrMode { merged, separate };

// Runs argv[0] (looked up in PATH) with stdin from /dev/null, capturing stdout+stderr. Killed after `timeout`.
CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          StderrMode stderr_mode = StderrMode::merged);

// First line of `cmd --version`-style output, or "" when the command cannot run.
std::string first_line_of(const std::vector<std::string>& argv);

}  // namespace kwb
