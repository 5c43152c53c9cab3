// kwb — the kernel workbench. Decides, with evidence, whether a candidate kernel should replace a baseline.
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/safe_output.h"
#include "util/error.h"
#include "util/interrupt.h"

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
      {"keep", kwb::cli::add_keep(app)},
      {"history", kwb::cli::add_history(app)},
      {"revalidate", kwb::cli::add_revalidate(app)},
      {"mcp", kwb::cli::add_mcp(app)},
      {"new-task", kwb::cli::add_new_task(app)},
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : static_cast<int>(kwb::ExitCode::usage);
  }
  // SIGINT, SIGTERM and SIGHUP end every process kwb started (util/interrupt.h); kwb then records what it can and
  // exits with 128 + the signal's number, whatever else went wrong on the way.
  kwb::install_interrupt_handlers();
  auto interrupted_exit = [](int sig) {
    kwb::cli::end_progress_line();
    std::cerr << "kwb: interrupted by " << kwb::signal_name(sig) << "; every process it started has been ended\n";
    return 128 + sig;
  };
  try {
    for (const auto& [name, action] : verbs) {
      if (app.got_subcommand(name)) {
        const int rc = action();
        if (const int sig = kwb::interrupt_signal(); sig != 0) return interrupted_exit(sig);
        return rc;
      }
    }
    return static_cast<int>(kwb::ExitCode::usage);
  } catch (const kwb::Interrupted& i) {
    return interrupted_exit(i.signal());
  } catch (const kwb::Error& e) {
    std::cerr << "kwb: error: " << e.what() << "\n";
    if (const int sig = kwb::interrupt_signal(); sig != 0) return interrupted_exit(sig);
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::cerr << "kwb: internal error: " << e.what() << "\n";
    if (const int sig = kwb::interrupt_signal(); sig != 0) return interrupted_exit(sig);
    return static_cast<int>(kwb::ExitCode::internal);
  }
}
