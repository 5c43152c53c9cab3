// One file per verb. Each adds its subcommand to the root app and returns the action to run when it is chosen.
#pragma once

#include "util/backend_kind.h"

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace kwb::cli {

using Action = std::function<int()>;

// The action owns what the subcommand's options parse into: keep it for as long as the app parses, or parsing
// writes into freed memory.
[[nodiscard]] Action add_check(CLI::App& root);
[[nodiscard]] Action add_compare(CLI::App& root);
[[nodiscard]] Action add_compare_saved(CLI::App& root);
[[nodiscard]] Action add_validate(CLI::App& root);
[[nodiscard]] Action add_verify(CLI::App& root);
[[nodiscard]] Action add_report(CLI::App& root);
[[nodiscard]] Action add_profile(CLI::App& root);
[[nodiscard]] Action add_keep(CLI::App& root);
[[nodiscard]] Action add_history(CLI::App& root);
[[nodiscard]] Action add_mcp(CLI::App& root);
[[nodiscard]] Action add_revalidate(CLI::App& root);
[[nodiscard]] Action add_new_task(CLI::App& root);
[[nodiscard]] Action add_campaign(CLI::App& root);
[[nodiscard]] Action add_experiment(CLI::App& root);
[[nodiscard]] Action add_doctor(CLI::App& root);

struct ValidateArgs;
// kwb validate's body, which revalidate runs too: checks the arguments, runs the workflow, prints, records the
// bundle in the ledger as `ledger_kind` (validate, revalidate).
int validate_command(const ValidateArgs& a, const std::string& ledger_kind);

// Before any build or worker of a verb: a device backend is opened once in a worker that loads nothing, and its
// device is named on stderr; where it cannot be opened, Error(unavailable) says why (exit 69). Returns the
// device's description ("" for cpu).
std::string require_backend(BackendKind backend);

// A campaign file's [validate] value checked as kwb validate's command line checks it (cli/options.h): why it is
// refused, or "" (campaign/campaign_file.h, FlagCheck).
std::string check_validate_flag(const std::string& flag, const std::string& value);

// The command line as given, for provenance (plan.json records it).
inline std::vector<std::string> g_argv;

}  // namespace kwb::cli
