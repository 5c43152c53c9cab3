// kwb verify BUNDLE: re-derive everything from the raw evidence; exit 0 only for an intact, consistent bundle.
#include "cli/commands.h"
#include "util/json_text.h"
#include "record/verify.h"
#include "util/error.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <iostream>

namespace kwb::cli {

Action add_verify(CLI::App& root) {
  auto dir = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  CLI::App* app = root.add_subcommand("verify", "Re-derive every statistic and the decision of an evidence bundle");
  app->add_option("bundle", *dir, "Evidence bundle folder")->required();
  app->add_flag("--json", *json, "Print the result as JSON");
  return [dir, json]() {
    if (!std::filesystem::is_directory(*dir)) throw UsageError(fmt::format("{}: not a bundle folder", *dir));
    VerifyReport r = verify_bundle(*dir);
    if (*json) {
      std::cout << json_text({{"schema", "kwb.verify"}, {"schema_version", 1}, {"bundle", *dir},
                              {"ok", r.ok()}, {"problems", r.problems}, {"verified", r.verified},
                              {"warnings", r.warnings}},
                             2)
                << "\n";
    } else {
      for (const std::string& v : r.verified) std::cout << "ok      " << v << "\n";
      for (const std::string& p : r.problems) std::cout << "PROBLEM " << p << "\n";
      for (const std::string& w : r.warnings) std::cout << "WARNING " << w << "\n";
      std::cout << (r.ok() ? fmt::format("\nbundle {} is intact and its decision follows from its evidence\n", *dir)
                           : fmt::format("\nbundle {}: {} problem(s)\n", *dir, r.problems.size()));
    }
    return r.ok() ? 0 : static_cast<int>(ExitCode::invalid);
  };
}

}  // namespace kwb::cli
