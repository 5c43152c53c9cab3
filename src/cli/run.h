// kwb's whole command line, for main (cli/main.cpp) and for tests: parses argv, runs the chosen verb and returns
// the process's exit code (util/error.h: ExitCode; 128 + the signal when interrupted). Installs kwb's process-wide
// handlers first (SIGPIPE ignored, safe terminal output, the interruption handlers once argv has parsed).
#pragma once

namespace kwb::cli {

int run(int argc, char** argv);

}  // namespace kwb::cli
