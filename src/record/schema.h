// The schema names of the files validate writes into a bundle, and their one version. A reader refuses a file of
// another version with a message that says so (record/plan.h, record/verify.cpp): the bundle format has one
// version at a time, and a change to any of these files bumps it.
#pragma once

namespace kwb {

inline constexpr const char* k_plan_schema = "kwb.plan";
inline constexpr const char* k_decision_schema = "kwb.decision";
inline constexpr const char* k_stages_schema = "kwb.stages";
inline constexpr const char* k_controls_schema = "kwb.controls";
inline constexpr const char* k_final_schema = "kwb.final";
// 2: plan.json has one typed declaration (record/plan.h): a control's `expect` is null for every other role, the
// oracle is a record (never a name), and no field outside the declaration is accepted.
// 3: plan.json's task has `tolerances`, one per output (mode abs_rel, ulp or exact), for `tolerance`; a check's
// cases report their errors per output (check schema 3).
// 4: the timed and held-out data come from a secret drawn at run time: plan.json's seeds hold its commitment
// (data_commitment) in place of timing_nonce and final_nonce, and decision.json reveals it (data_secret).
// 5: plan.json's gates hold same_margin_pct, the A/B's margin of no practical difference (SAME), which verify
// replays; decision.json's inputs hold it too; plan.json's task holds its identity (task_identity, task/task.h), the
// lineage keep extends.
inline constexpr int k_bundle_schema_version = 5;

// A check's report (check --json, a bundle's checks/*.json), versioned on its own; verify refuses another version.
// 2: the "request" block (nonce, held_out, stop_after_reason). 3: each case's errors per output ("outputs").
inline constexpr const char* k_check_schema = "kwb.check";
inline constexpr int k_check_schema_version = 3;

// compare.json (compare --output-dir) and a bundle's comparisons/*.json, versioned on their own: verify refuses a
// comparison of another version, since it re-derives every figure in it.
// 2: layout sensitivity is bias-corrected (basic bootstrap) with a permutation test, and timing_lock records the
// queue (arrived_unix_ns, ticket, waiters_ahead), so that the order served can be checked.
// 3: a block interleaves its two visits' calls (samples.csv rows in the order they ran, with re-warm calls marked
// warm-up), and the final analysis spends the alpha kept for it (stats/alpha_spending_rule.h).
// 4: each workload's aa_bias_log: in validate's A/B, the bias its unsettled A/A leaves, which a PASS must clear the
// bar net of (verify replays a version 3 comparison without it, as it was run).
inline constexpr const char* k_compare_schema = "kwb.compare";
// 5: each workload's aging (stats/aging.h: long blocks, early against late calls), outside_window (device backends:
// work moved outside the timed window, stats/outside_window.h) and long_samples_per_visit; verify replays a
// version 3 or 4 comparison without either test, as it was run.
// 6: the gate's same_margin_pct, and an A/B workload may be SAME: its interval wholly within +-same_margin_pct, no
// practical difference (stats::ab_verdict); verify replays an older comparison without it (margin 0), as it was run.
// 7: a host sample is charged its CPU outside the window beyond its block's floor, the medians over arm A's calls of
// the block before (block 0: the pilot's; record/samples.h, block_floor), and each workload records the typical floor
// (block_floor_ns); verify re-derives each block's floor from samples.csv, and charges an older comparison's samples
// whole, as they were.
// 8: an A/B interval over a pool of layouts includes the layout floor (stats/layout_floor.h): the variance of the
// mean layout effect of the builds each arm drew, counted when the arm's builds explain the blocks; each A/B estimate
// records it (layout_floor), and verify replays it from the plan's layouts and the seed; an older comparison is
// replayed without it, as it was run.
inline constexpr int k_compare_schema_version = 8;
inline constexpr int k_compare_schema_oldest_verified = 3;

}  // namespace kwb
