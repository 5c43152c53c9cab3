// One file per verb. Each adds its subcommand to the root app and returns the action to run when it is chosen.
#pragma once

#include "util/backend_kind.h"

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace kwb::cli {

using Action = std::function<int()>;

Action add_check(CLI::App& root);
Action add_compare(CLI::App& root);
Action add_validate(CLI::App& root);
Action add_verify(CLI::App& root);
Action add_report(CLI::App& root);
Action add_profile(CLI::App& root);
Action add_keep(CLI::App& root);
Action add_history(CLI::App& root);
Action add_mcp(CLI::App& root);
Action add_revalidate(CLI::App& root);
Action add_new_task(CLI::App& root);

// Before any build or worker of a verb: a device backend is opened once in a worker that loads nothing, and its
// device is named on stderr; where it cannot be opened, Error(unavailable) says why (exit 69). Returns the
// device's description ("" for cpu).
std::string require_backend(BackendKind backend);

// The command line as given, for provenance (plan.json records it).
inline std::vector<std::string> g_argv;

}  // namespace kwb::cli
