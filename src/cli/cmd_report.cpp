// kwb report BUNDLE: (re)render report.md and report.html from the bundle's JSON and samples. Rendering is
// deterministic (no clocks, no randomness), so re-rendering an intact bundle reproduces the manifest's hashes.
#include "cli/commands.h"
#include "report/report.h"
#include "util/error.h"

#include <fmt/format.h>

#include <filesystem>
#include <iostream>

namespace kwb::cli {

Action add_report(CLI::App& root) {
  auto dir = std::make_shared<std::string>();
  CLI::App* app = root.add_subcommand("report", "Render report.md and report.html for an evidence bundle");
  app->add_option("bundle", *dir, "Evidence bundle folder")->required();
  return [dir]() {
    // report cannot read a bundle that is not there: exit 74, as for any bundle it cannot read (docs/cli.md).
    if (!std::filesystem::is_directory(*dir)) {
      throw Error(ExitCode::io_error, fmt::format("{}: no such bundle folder to report on", *dir));
    }
    // A compare --output-dir folder is not a bundle: it has its result (compare.json) and samples, no plan and no
    // decision, and a report of it would say nothing (docs/cli.md).
    const std::filesystem::path folder(*dir);
    if (!std::filesystem::exists(folder / "plan.json")) {
      throw Error(ExitCode::io_error,
                  std::filesystem::exists(folder / "compare.json")
                      ? fmt::format("{}: a compare result, not a validate bundle: kwb report renders the bundles of "
                                    "kwb validate (its compare.json is the result, and compare printed it)",
                                    *dir)
                      : fmt::format("{}: not a validate bundle (no plan.json)", *dir));
    }
    write_reports(*dir);
    std::cout << fmt::format("wrote {}/report.md and {}/report.html\n", *dir, *dir);
    return 0;
  };
}

}  // namespace kwb::cli
