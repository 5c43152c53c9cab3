// plan.json has one declaration (record/plan.h) that its writer and every reader walk. These tests hold the contract
// to it generically: they derive every field from what to_json writes, so renaming, adding or retyping a field in
// the declaration changes what they check, and never leaves a reader behind.
#include "record/plan.h"
#include "ledger/bundle_entry.h"
#include "record/bundle_reader.h"
#include "record/decision_record.h"
#include "record/verify.h"
#include "report/report.h"
#include "support/build_paths.h"
#include "util/error.h"
#include "util/fs.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path k_golden_bundle = fs::path(KWB_SOURCE_DIR) / "tests" / "golden" / "bundle_decode";

json golden_plan() { return json::parse(kwb::read_file(k_golden_bundle / "plan.json")); }

// Every field path the declaration owns in `j` (objects the plan stores whole, like an identity or the environment,
// are one field): found by asking the reader which keys it refuses to lose.
void declared_paths(const json& plan, const json& node, const json::json_pointer& at,
                    std::vector<json::json_pointer>& out) {
  if (!node.is_object()) return;
  for (const auto& [k, v] : node.items()) {
    const json::json_pointer p = at / k;
    if (p.to_string() == "/schema" || p.to_string() == "/schema_version") continue;
    json without = plan;
    without[p.parent_pointer()].erase(k);
    bool refused = false;
    try {
      kwb::plan_from_json(without);
    } catch (const kwb::json_fields::FormatError&) {
      refused = true;
    }
    if (!refused) continue;  // inside a value stored whole
    out.push_back(p);
    declared_paths(plan, v, p, out);
  }
}

std::string dotted(const json::json_pointer& p) {
  std::string s = p.to_string().substr(1);
  for (char& c : s) c = c == '/' ? '.' : c;
  return s;
}

TEST(plan_test, writing_what_was_read_gives_the_same_plan_json) {
  const json j = golden_plan();
  EXPECT_EQ(kwb::to_json(kwb::plan_from_json(j)), j);
}

TEST(plan_test, every_declared_field_is_required_and_named_by_its_path_when_missing) {
  const json plan = golden_plan();
  std::vector<json::json_pointer> paths;
  declared_paths(plan, plan, json::json_pointer(), paths);
  // The top-level fields and those of the records inside them; implementations are an array, so not walked here.
  EXPECT_GE(paths.size(), 40u);
  for (const json::json_pointer& p : paths) {
    json without = plan;
    without[p.parent_pointer()].erase(p.back());
    try {
      kwb::plan_from_json(without);
      ADD_FAILURE() << p.to_string() << " removed, and the plan still parsed";
    } catch (const kwb::json_fields::FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + dotted(p) + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(plan_test, a_field_outside_the_declaration_or_of_the_wrong_type_is_refused_by_name) {
  json plan = golden_plan();
  plan["implementations"][1]["rolle"] = "candidate";
  try {
    kwb::plan_from_json(plan);
    ADD_FAILURE() << "an undeclared field was accepted";
  } catch (const kwb::json_fields::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'implementations[1].rolle' is not one this kwb writes"), std::string::npos)
        << e.what();
  }
  plan = golden_plan();
  plan["layout"]["layouts"] = "8";
  EXPECT_THROW(kwb::plan_from_json(plan), kwb::json_fields::FormatError);
  plan = golden_plan();
  plan["implementations"][0]["role"] = "baseline_copy";
  try {
    kwb::plan_from_json(plan);
    ADD_FAILURE() << "an unknown role was accepted";
  } catch (const kwb::json_fields::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'implementations[0].role' must be one of baseline, candidate"),
              std::string::npos)
        << e.what();
  }
}

TEST(plan_test, the_plans_own_invariants_hold_or_it_is_refused) {
  auto refused = [](const std::function<void(json&)>& edit, const std::string& words) {
    json plan = golden_plan();
    edit(plan);
    try {
      kwb::plan_from_json(plan);
      return testing::AssertionFailure() << "accepted";
    } catch (const kwb::json_fields::FormatError& e) {
      if (std::string(e.what()).find(words) == std::string::npos) return testing::AssertionFailure() << e.what();
      return testing::AssertionSuccess();
    }
  };
  EXPECT_TRUE(refused([](json& p) { p["gates"]["alpha"] = 1.5; }, "gates.alpha"));
  EXPECT_TRUE(refused([](json& p) { p["layout"]["layouts"] = 0; }, "layout.layouts"));
  EXPECT_TRUE(refused([](json& p) { p["task"]["oracle"]["source_sha256"] = "abc"; }, "64 hex digits"));
  EXPECT_TRUE(refused([](json& p) { p["implementations"][0]["expect"] = "numeric_mismatch"; }, "expect"));
  EXPECT_TRUE(refused(
      [](json& p) {
        json& impls = p["implementations"];
        for (json& im : impls) {
          if (im["role"] == "candidate") im["role"] = "baseline_layout";
        }
      },
      "no implementation with role 'candidate'"));
  EXPECT_TRUE(refused(
      [](json& p) {
        for (const json& im : json(p["implementations"])) {
          if (im["role"] == "control") p["implementations"].push_back(im);
        }
      },
      "planned twice"));
}

TEST(plan_test, an_arms_pool_is_its_plain_build_then_its_built_layouts_in_order) {
  kwb::Plan plan = kwb::plan_from_json(golden_plan());
  for (kwb::ImplRole arm : {kwb::ImplRole::baseline, kwb::ImplRole::candidate}) {
    const std::vector<size_t> pool = plan.pool(arm);
    ASSERT_EQ(pool.size(), static_cast<size_t>(plan.layout.layouts));
    EXPECT_EQ(plan.implementations[pool[0]].role, arm);
    for (size_t v = 1; v < pool.size(); ++v) {
      EXPECT_EQ(plan.implementations[pool[v]].role, kwb::layout_role(arm));
      EXPECT_EQ(plan.implementations[pool[v]].layout, static_cast<int>(v));
    }
  }
  // A padded build that did not build is left out of its pool.
  for (kwb::PlannedImpl& im : plan.implementations) {
    if (im.role == kwb::ImplRole::candidate_layout && im.layout == 2) im.built = false;
  }
  EXPECT_EQ(plan.pool(kwb::ImplRole::candidate).size(), static_cast<size_t>(plan.layout.layouts) - 1);
}

// The four readers of plan.json (verify, both reports, the ledger) read it through plan_from_json: one field renamed
// on disk is the same named problem in each.
TEST(plan_test, every_reader_of_a_bundle_reads_the_plan_through_its_one_parser) {
  const fs::path d = fs::temp_directory_path() / ("kwb-plan-readers-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::copy(k_golden_bundle, d, fs::copy_options::recursive);
  json plan = golden_plan();
  plan["task_renamed"] = plan["task"];
  plan.erase("task");
  kwb::write_file_atomic(d / "plan.json", plan.dump(2) + "\n");
  const std::string said = "field 'task' is missing";

  const kwb::BundleData b = kwb::read_bundle(d);
  EXPECT_FALSE(b.plan.has_value());
  EXPECT_NE(b.plan_problem.find(said), std::string::npos) << b.plan_problem;

  bool verify_said = false;
  for (const std::string& p : kwb::verify_bundle(d).problems) verify_said = verify_said || p == "plan.json: " + said;
  EXPECT_TRUE(verify_said);
  EXPECT_NE(kwb::render_markdown(b).find("plan.json: " + said), std::string::npos);
  const std::string html = kwb::render_html(b);  // quotes are escaped in HTML
  EXPECT_NE(html.find("plan.json: field &#39;task&#39; is missing"), std::string::npos) << html.substr(0, 2000);
  try {
    kwb::run_from_bundle(d);
    ADD_FAILURE() << "the ledger accepted a bundle whose plan does not parse";
  } catch (const kwb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("plan.json: " + said), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}

// decision.json has its declaration too (record/decision_record.h), read once for the same readers.
TEST(plan_test, decision_json_reads_back_as_written_and_every_reader_names_a_renamed_field) {
  const json golden = json::parse(kwb::read_file(k_golden_bundle / "decision.json"));
  EXPECT_EQ(kwb::to_json(kwb::decision_record_from_json(golden)), golden);

  const fs::path d = fs::temp_directory_path() / ("kwb-decision-readers-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::copy(k_golden_bundle, d, fs::copy_options::recursive);
  json decision = golden;
  decision["why"] = decision["reasons"];
  decision.erase("reasons");
  kwb::write_file_atomic(d / "decision.json", decision.dump(2) + "\n");
  const std::string said = "decision.json: field 'reasons' is missing";
  const kwb::BundleData b = kwb::read_bundle(d);
  EXPECT_FALSE(b.decision.has_value());
  bool verify_said = false;
  for (const std::string& p : kwb::verify_bundle(d).problems) verify_said = verify_said || p == said;
  EXPECT_TRUE(verify_said);
  EXPECT_NE(kwb::render_markdown(b).find(said), std::string::npos);
  try {
    kwb::run_from_bundle(d);
    ADD_FAILURE() << "the ledger accepted a bundle whose decision does not parse";
  } catch (const kwb::Error& e) {
    EXPECT_NE(std::string(e.what()).find(said), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}

}  // namespace
