// kwb verify BUNDLE: re-derive everything from the raw evidence; exit 0 only for an intact, consistent bundle. It
// also says what it established about who made the bundle: "authentic" (a key this machine trusts signed it, or
// this machine's ledger recorded it at the end of its run) or "self-consistent only" (the hashes agree, and that is
// all: anyone can recompute them after an edit). Self-consistent only still exits 0; `kwb keep` refuses it.
#include "cli/commands.h"
#include "ledger/bundle_entry.h"
#include "record/verify.h"
#include "util/error.h"
#include "util/json_text.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <iostream>

namespace kwb::cli {

namespace {

// The ledger of the bundle's task (bundle_ledger_path), when there is one to consult; verify never creates one.
std::optional<Ledger> existing_ledger(const std::filesystem::path& bundle, std::string& why_not) {
  const std::optional<std::filesystem::path> path = bundle_ledger_path(bundle);
  if (!path || !std::filesystem::is_regular_file(*path)) return std::nullopt;
  try {
    return Ledger::open(*path);
  } catch (const Error& e) {
    why_not = e.what();
    return std::nullopt;
  }
}

nlohmann::json to_json(const VerifyReport& r, const Authenticity& a) {
  nlohmann::json signature = {{"state", to_string(r.signature.state)}, {"detail", r.signature.detail}};
  if (!r.signature.public_key.empty()) signature["public_key"] = r.signature.public_key;
  nlohmann::json ledger = {{"recorded", a.recorded.has_value()}, {"detail", a.ledger_detail}};
  if (a.recorded) ledger["run"] = a.recorded->id;
  // A bundle with problems is not even self-consistent.
  return {{"established", !r.ok()       ? "not verified"
                          : a.authentic ? "authentic"
                                        : "self-consistent only"},
          {"summary", a.summary},
          {"manifest_sha256", r.seal.manifest_sha256},
          {"plan_digest", r.seal.plan_digest},
          {"decision", r.seal.decision},
          {"signature", signature},
          {"ledger", ledger}};
}

}  // namespace

Action add_verify(CLI::App& root) {
  auto dir = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  CLI::App* app = root.add_subcommand("verify",
                                      "Re-derive every statistic and the decision of an evidence bundle, "
                                      "and say whether it is authentic or only self-consistent");
  app->add_option("bundle", *dir, "Evidence bundle folder")->required();
  app->add_flag("--json", *json, "Print the result as JSON");
  return [dir, json]() {
    // A folder that is not there verifies nothing: a failed verification (exit 3, docs/cli.md), not a usage error.
    VerifyReport r;
    if (std::filesystem::is_directory(*dir)) {
      r = verify_bundle(*dir);
    } else {
      r.problems.push_back(
          fmt::format("{}: no such bundle folder (give the folder validate wrote, e.g. "
                      "kwb-runs/<task>-<time>)",
                      *dir));
    }
    std::string ledger_error;
    const std::optional<Ledger> ledger =
        std::filesystem::is_directory(*dir) ? existing_ledger(*dir, ledger_error) : std::nullopt;
    Authenticity a = authenticity(r, ledger ? &*ledger : nullptr);
    if (!ledger_error.empty()) a.ledger_detail = "the ledger could not be read: " + ledger_error;
    if (*json) {
      std::cout << json_text({{"schema", "kwb.verify"},
                              {"schema_version", 2},
                              {"bundle", *dir},
                              {"ok", r.ok()},
                              {"problems", r.problems},
                              {"verified", r.verified},
                              {"warnings", r.warnings},
                              {"authenticity", to_json(r, a)}},
                             2)
                << "\n";
    } else {
      for (const std::string& v : r.verified) std::cout << "ok      " << v << "\n";
      for (const std::string& p : r.problems) std::cout << "PROBLEM " << p << "\n";
      for (const std::string& w : r.warnings) std::cout << "WARNING " << w << "\n";
      if (!r.ok()) {
        std::cout << fmt::format("\nbundle {}: {} problem(s)\n", *dir, r.problems.size());
      } else if (a.authentic) {
        std::cout << fmt::format("\nbundle {} is intact and its decision follows from its evidence\n{}\n", *dir,
                                 a.summary);
      } else {
        std::cout << fmt::format(
            "\nbundle {} is intact and its decision follows from its evidence, but it is "
            "SELF-CONSISTENT ONLY, NOT AUTHENTIC:\n  {}\n  {}\n  anyone could have edited it "
            "and recomputed every hash; kwb keep refuses it\n",
            *dir, r.signature.detail, a.ledger_detail);
      }
    }
    return r.ok() ? 0 : static_cast<int>(ExitCode::invalid);
  };
}

}  // namespace kwb::cli
