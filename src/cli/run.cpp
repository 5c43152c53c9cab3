// kwb's command line: the verbs, parsing, interruption and the exit code of every failure (cli/run.h).
#include "cli/run.h"

#include "cli/commands.h"
#include "cli/ledger.h"
#include "cli/progress.h"
#include "cli/safe_output.h"
#include "util/error.h"
#include "util/interrupt.h"
#include "util/provenance.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include <signal.h>
#include <iostream>

namespace kwb::cli {

int run(int argc, char** argv) {
  // A worker that dies while we write to it must not kill the referee.
  ::signal(SIGPIPE, SIG_IGN);
  install_safe_terminal_output();
  g_argv.assign(argv, argv + argc);
  CLI::App app{"kwb — kernel workbench: is this candidate kernel correct, and is it really faster?"};
  // The version and the commit it was built from (the same provenance every plan.json records).
  const kwb::Provenance built = kwb::build_provenance();
  app.set_version_flag("--version", fmt::format("kwb {} ({}{})", KWB_VERSION, built.git_sha,
                                                built.git_dirty.value_or(false) ? ", with uncommitted changes" : ""));
  app.require_subcommand(1);
  const std::vector<std::pair<std::string, Action>> verbs = {
      {"check", add_check(app)},
      {"compare", add_compare(app)},
      {"compare-saved", add_compare_saved(app)},
      {"validate", add_validate(app)},
      {"verify", add_verify(app)},
      {"report", add_report(app)},
      {"profile", add_profile(app)},
      {"keep", add_keep(app)},
      {"history", add_history(app)},
      {"revalidate", add_revalidate(app)},
      {"mcp", add_mcp(app)},
      {"new-task", add_new_task(app)},
      {"campaign", add_campaign(app)},
      {"experiment", add_experiment(app)},
      {"doctor", add_doctor(app)},
  };
  // A first word that is no command would otherwise read "A subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    names.reserve(verbs.size());
    for (const auto& v : verbs) names.push_back(v.first);
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      std::cerr << fmt::format("kwb: error: '{}' is not a kwb command; the commands are: {} (kwb --help)\n", argv[1],
                               fmt::join(names, ", "));
      return static_cast<int>(kwb::ExitCode::usage);
    }
  }
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
    end_progress_line();
    std::cerr << "kwb: interrupted by " << kwb::signal_name(sig) << "; every process it started has been ended\n";
    return 128 + sig;
  };
  try {
    for (const auto& [name, action] : verbs) {
      if (app.got_subcommand(name)) {
        const int rc = action();
        close_pending_run("ERROR", fmt::format("ended without recording a result (exit {})", rc));
        if (const int sig = kwb::interrupt_signal(); sig != 0) return interrupted_exit(sig);
        return rc;
      }
    }
    return static_cast<int>(kwb::ExitCode::usage);
  } catch (const kwb::Interrupted& i) {
    close_pending_run("INTERRUPTED", i.what());
    return interrupted_exit(i.signal());
  } catch (const kwb::Error& e) {
    std::cerr << "kwb: error: " << e.what() << "\n";
    close_pending_run("ERROR", e.what());
    if (const int sig = kwb::interrupt_signal(); sig != 0) return interrupted_exit(sig);
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::cerr << "kwb: internal error: " << e.what() << "\n";
    close_pending_run("ERROR", std::string("internal error: ") + e.what());
    if (const int sig = kwb::interrupt_signal(); sig != 0) return interrupted_exit(sig);
    return static_cast<int>(kwb::ExitCode::internal);
  }
}

}  // namespace kwb::cli
