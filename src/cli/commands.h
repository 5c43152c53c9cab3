// One file per verb. Each adds its subcommand to the root app and returns the action to run when it is chosen.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace kwb::cli {

using Action = std::function<int()>;

Action add_check(CLI::App& root);
Action add_compare(CLI::App& root);

}  // namespace kwb::cli
