// kwb — the kernel workbench. Decides, with evidence, whether a candidate kernel should replace a baseline.
#include "cli/commands.h"
#include "cli/safe_output.h"
#include "util/error.h"

#include <fmt/format.h>

#include <iostream>
#include <signal.h>

#ifndef KWB_VERSION
#define KWB_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {
  // A worker that dies while we write to it must not kill the referee.
  ::signal(SIGPIPE, SIG_IGN);
  kwb::cli::install_safe_terminal_output();
  kwb::cli::g_argv.assign(argv, argv + argc);
  CLI::App app{"kwb — kernel workbench: is this candidate kernel correct, and is it really faster?"};
  app.set_version_flag("--version", std::string("kwb ") + KWB_VERSION);
  app.require_subcommand(1);
  const std::vector<std::pair<std::string, kwb::cli::Action>> verbs = {
      {"check", kwb::cli::add_check(app)},
      {"compare", kwb::cli::add_compare(app)},
      {"validate", kwb::cli::add_validate(app)},
      {"verify", kwb::cli::add_verify(app)},
      {"report", kwb::cli::add_report(app)},
      {"profile", kwb::cli::add_profile(app)},
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : static_cast<int>(kwb::ExitCode::usage);
  }
  try {
    for (const auto& [name, action] : verbs) {
      if (app.got_subcommand(name)) return action();
    }
    return static_cast<int>(kwb::ExitCode::usage);
  } catch (const kwb::Error& e) {
    std::cerr << "kwb: error: " << e.what() << "\n";
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::cerr << "kwb: internal error: " << e.what() << "\n";
    return static_cast<int>(kwb::ExitCode::internal);
  }
}
