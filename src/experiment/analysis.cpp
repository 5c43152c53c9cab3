#include "experiment/analysis.h"

#include "stats/distributions.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace kwb {

namespace {

// The p of fast_p: 0 is "correct" (KernelBench's fast_0), 1 "faster than the baseline at all".
const std::vector<double> k_fast_p = {0.0, 1.0, 1.1, 1.25, 1.5, 2.0};

double mean_of(const std::vector<double>& x) {
  return x.empty() ? 0.0 : std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
}

double variance_of(const std::vector<double>& x) {  // sample variance (n - 1)
  if (x.size() < 2) return 0.0;
  const double m = mean_of(x);
  double s = 0.0;
  for (double v : x) s += (v - m) * (v - m);
  return s / static_cast<double>(x.size() - 1);
}

std::string fast_key(double p) { return p == 0.0 ? "0" : fmt::format("{:g}", p); }

}  // namespace

TrajectoryOutcome outcome_of(const nlohmann::json& r) {
  TrajectoryOutcome o;
  o.id = r.value("id", "");
  o.arm = r.value("arm_index", 0);
  o.task = r.value("task", "");
  o.seed = r.value("seed", std::int64_t{0});
  o.repeat = r.value("repeat", 1);
  o.status = r.value("status", "missing");
  o.detail = r.value("detail", "");
  double lineage = 0.0;  // ln(incumbent / baseline) from the kept attempts so far
  for (const nlohmann::json& a : r.value("attempts", nlohmann::json::array())) {
    if (a.value("kept", false)) ++o.keeps;
    const std::string category = a.value("category", "error");
    ++o.categories[category];
    const nlohmann::json sp = a.value("speedup", nlohmann::json());
    const bool has_own = sp.is_object() && sp.value("log_speedup", nlohmann::json()).is_number();
    const double own = has_own ? sp["log_speedup"].get<double>() : 0.0;  // its A/B against the incumbent
    if (category != "error" && category != "invalid" && category != "controls") {
      TrajectoryOutcome::Kernel k;
      k.correct = category == "kept" || category == "slower" || category == "inconclusive";
      if (k.correct && has_own) k.log_speedup = lineage + own;
      o.kernels.push_back(k);
    }
    if (a.value("kept", false)) lineage += own;
    if (a.contains("generator") && a["generator"].is_object()) {
      const nlohmann::json& g = a["generator"];
      o.generator_wall_s += g.value("wall_seconds", 0.0);
      o.generator_cpu_s += g.value("cpu_seconds", 0.0);
      o.violations +=
          static_cast<int>(g.value("violations", nlohmann::json::array()).size()) + g.value("violations_dropped", 0);
    }
    o.validate_s += a.value("validate_seconds", 0.0);
    o.validate_lock_wait_s += a.value("validate_lock_wait_seconds", 0.0);
    if (a.contains("model") && a["model"].is_object()) {
      const nlohmann::json& m = a["model"];
      o.model_requests += m.value("requests", std::uint64_t{0});
      o.model_input_tokens += m.value("input_tokens", std::uint64_t{0});
      o.model_output_tokens += m.value("output_tokens", std::uint64_t{0});
      o.model_usd += m.value("usd", 0.0);
    }
  }
  if (const nlohmann::json f = r.value("final", nlohmann::json()); f.is_object()) {
    o.validate_s += f.value("validate_seconds", 0.0);
    o.validate_lock_wait_s += f.value("validate_lock_wait_seconds", 0.0);
    const std::string s = f.value("status", "");
    if (o.status == "done" && (s == "measured" || s == "baseline")) {
      o.measured = s == "measured";
      o.log_speedup = f.value("log_speedup", 0.0);
      o.log_low = f.value("log_low", 0.0);
      o.log_high = f.value("log_high", 0.0);
    }
  }
  return o;
}

PairedInterval paired_interval(const std::map<std::string, std::vector<double>>& by_task, double confidence) {
  PairedInterval out;
  std::vector<double> all;
  bool stratifiable = !by_task.empty();
  for (const auto& [task, d] : by_task) {
    all.insert(all.end(), d.begin(), d.end());
    if (d.size() < 2) stratifiable = false;
  }
  out.pairs = all.size();
  if (all.empty()) {
    out.method = "none";
    return out;
  }
  const double alpha = 1.0 - confidence;
  if (stratifiable) {
    // Tasks weighted equally: the mean of the task means; Var = sum_t (1/T)^2 s_t^2 / n_t; Welch-Satterthwaite df.
    const double T = static_cast<double>(by_task.size());
    double mean = 0.0, var = 0.0, df_den = 0.0;
    for (const auto& [task, d] : by_task) {
      const double n = static_cast<double>(d.size());
      const double v = variance_of(d) / (T * T * n);
      mean += mean_of(d) / T;
      var += v;
      df_den += v * v / (n - 1.0);
    }
    out.mean = mean;
    out.method = "stratified paired t";
    if (var <= 0.0) {
      out.low = out.high = mean;
      out.df = std::numeric_limits<double>::infinity();
      return out;
    }
    out.df = var * var / df_den;
    const double q = stats::student_t_quantile(1.0 - alpha / 2.0, out.df);
    out.low = mean - q * std::sqrt(var);
    out.high = mean + q * std::sqrt(var);
    return out;
  }
  out.mean = mean_of(all);
  if (all.size() < 2) {
    out.method = "none";
    out.low = out.high = out.mean;
    return out;
  }
  out.method = "paired t";
  const double var = variance_of(all) / static_cast<double>(all.size());
  out.df = static_cast<double>(all.size() - 1);
  if (var <= 0.0) {
    out.low = out.high = out.mean;
    return out;
  }
  const double q = stats::student_t_quantile(1.0 - alpha / 2.0, out.df);
  out.low = out.mean - q * std::sqrt(var);
  out.high = out.mean + q * std::sqrt(var);
  return out;
}

namespace {

// Every planned trajectory, with its outcome or as missing; `missing` lists those without a final figure.
std::vector<TrajectoryOutcome> planned_outcomes(const nlohmann::json& plan,
                                                const std::vector<TrajectoryOutcome>& outcomes,
                                                nlohmann::json& missing) {
  std::map<std::string, TrajectoryOutcome> by_id;
  for (const TrajectoryOutcome& o : outcomes) by_id[o.id] = o;
  std::vector<TrajectoryOutcome> all;
  missing = nlohmann::json::array();
  for (const nlohmann::json& t : plan["trajectories"]) {
    const std::string id = t["id"].get<std::string>();
    TrajectoryOutcome o;
    if (auto it = by_id.find(id); it != by_id.end()) {
      o = it->second;
    } else {
      o.id = id;
      o.arm = t["arm_index"].get<int>();
      o.task = t["task"].get<std::string>();
      o.seed = t["seed"].get<std::int64_t>();
      o.repeat = t.value("repeat", 1);
      o.status = "missing";
      o.detail = "no trajectory record";
    }
    if (!o.log_speedup) missing.push_back({{"id", id}, {"status", o.status}, {"detail", o.detail}});
    all.push_back(std::move(o));
  }
  return all;
}

// The pairs: (task, seed) with both arms' outcomes, their differences d = ln(speedup_B) - ln(speedup_A) by task,
// and who won each.
struct Pairs {
  nlohmann::json rows = nlohmann::json::array();
  std::map<std::string, std::vector<double>> d_by_task;
  size_t b_wins = 0, a_wins = 0, ties = 0;
  size_t measured = 0;  // pairs in which at least one arm kept something: a final comparison ran
};

Pairs pair_up(const nlohmann::json& plan, const std::vector<TrajectoryOutcome>& all) {
  Pairs out;
  for (const nlohmann::json& task : plan["tasks"]) {
    const std::string name = task["name"].get<std::string>();
    for (const nlohmann::json& seed_j : plan["settings"]["seeds"]) {
      const std::int64_t seed = seed_j.get<std::int64_t>();
      // Each arm's side of the pair: its repeats' mean ln(speedup), known when every repeat has one.
      struct Side {
        std::string id;  // the first repeat's (the report's row)
        int repeats = 0, known = 0;
        double log_sum = 0.0;
        bool measured = false;
      } side[2];
      for (const TrajectoryOutcome& o : all) {
        if (o.task != name || o.seed != seed || o.arm < 0 || o.arm > 1) continue;
        Side& s = side[o.arm];
        if (s.id.empty() || o.repeat == 1) s.id = o.id;
        ++s.repeats;
        s.measured = s.measured || o.measured;
        if (o.log_speedup) {
          ++s.known;
          s.log_sum += *o.log_speedup;
        }
      }
      const auto mean = [](const Side& s) {
        return s.repeats > 0 && s.known == s.repeats ? std::optional<double>(s.log_sum / s.repeats) : std::nullopt;
      };
      const std::optional<double> la = mean(side[0]), lb = mean(side[1]);
      nlohmann::json p = {{"task", name},
                          {"seed", seed},
                          {"a", side[0].id},
                          {"b", side[1].id},
                          {"repeats", std::max(side[0].repeats, side[1].repeats)},
                          {"log_speedup_a", la ? nlohmann::json(*la) : nlohmann::json(nullptr)},
                          {"log_speedup_b", lb ? nlohmann::json(*lb) : nlohmann::json(nullptr)},
                          {"measured_a", side[0].measured},
                          {"measured_b", side[1].measured},
                          {"d", nullptr}};
      if (la && lb) {
        const double d = *lb - *la;
        p["d"] = d;
        out.d_by_task[name].push_back(d);
        ++(d > 0.0 ? out.b_wins : d < 0.0 ? out.a_wins : out.ties);
        out.measured += side[0].measured || side[1].measured;
      }
      out.rows.push_back(std::move(p));
    }
  }
  return out;
}

// The verdict from the interval, and why: INVALID with evidence missing, INCONCLUSIVE without an interval or when it
// contains 0, the better arm otherwise.
std::string verdict_of(const PairedInterval& iv, size_t measured, size_t missing, size_t trajectories,
                       double confidence, const std::vector<std::string>& arm_names,
                       std::vector<std::string>& reasons) {
  if (missing > 0) {
    reasons.push_back(
        fmt::format("{} of {} trajectories have no outcome (failed, invalid or not run): nothing is "
                    "decided with evidence missing; see `missing`",
                    missing, trajectories));
    return "INVALID";
  }
  if (iv.pairs > 0 && measured == 0) {
    reasons.push_back(fmt::format(
        "nothing was measured: neither arm kept a candidate in any of the {} pair(s), so no final comparison ran and "
        "every speedup is 1 by construction (each attempt's own A/B is in its trajectory)",
        iv.pairs));
    return "INCONCLUSIVE";
  }
  if (iv.method == "none") {
    reasons.push_back(fmt::format("{} pair(s): an interval needs at least two", iv.pairs));
    return "INCONCLUSIVE";
  }
  if (iv.low > 0.0 || iv.high < 0.0) {
    const bool b = iv.low > 0.0;
    reasons.push_back(
        fmt::format("{} better: the {:.0f}% interval of the mean log-speedup difference, [{:+.4f}, "
                    "{:+.4f}], lies {} 0",
                    arm_names[b ? 1 : 0], confidence * 100.0, iv.low, iv.high, b ? "above" : "below"));
    return b ? "B_BETTER" : "A_BETTER";
  }
  reasons.push_back(
      fmt::format("no difference shown: the {:.0f}% interval of the mean log-speedup difference, "
                  "[{:+.4f}, {:+.4f}], contains 0 (ratio {:.3f}x to {:.3f}x)",
                  confidence * 100.0, iv.low, iv.high, std::exp(iv.low), std::exp(iv.high)));
  return "INCONCLUSIVE";
}

// One arm's totals over its trajectories.
struct ArmTotals {
  int n = 0, correct = 0, keeps = 0, violations = 0, attempts = 0;
  double gw = 0, gc = 0, vs = 0, lw = 0, log_sum = 0, usd = 0;
  std::uint64_t requests = 0, input_tokens = 0, output_tokens = 0;
  std::map<std::string, int> cats;
  std::vector<double> speedups;
  std::vector<const TrajectoryOutcome::Kernel*> kernels;
};

ArmTotals arm_totals(int a, const std::vector<TrajectoryOutcome>& all) {
  ArmTotals t;
  for (const TrajectoryOutcome& o : all) {
    if (o.arm != a) continue;
    ++t.n;
    t.keeps += o.keeps;
    t.violations += o.violations;
    t.gw += o.generator_wall_s;
    t.gc += o.generator_cpu_s;
    t.vs += o.validate_s;
    t.lw += o.validate_lock_wait_s;
    t.requests += o.model_requests;
    t.input_tokens += o.model_input_tokens;
    t.output_tokens += o.model_output_tokens;
    t.usd += o.model_usd;
    for (const auto& [c, k] : o.categories) {
      t.cats[c] += k;
      t.attempts += k;
    }
    if (o.log_speedup) {
      ++t.correct;
      t.speedups.push_back(std::exp(*o.log_speedup));
      t.log_sum += *o.log_speedup;
    }
    for (const TrajectoryOutcome::Kernel& k : o.kernels) t.kernels.push_back(&k);
  }
  return t;
}

// fast_p per trajectory (its final kernel) and per generated kernel (null where the arm generated none).
void fast_p(const ArmTotals& t, nlohmann::json& per_trajectory, nlohmann::json& per_kernel) {
  per_trajectory = nlohmann::json::object();
  per_kernel = nlohmann::json::object();
  for (double p : k_fast_p) {
    const auto k = std::count_if(t.speedups.begin(), t.speedups.end(), [p](double s) { return p == 0.0 || s > p; });
    per_trajectory[fast_key(p)] = t.n == 0 ? 0.0 : static_cast<double>(k) / t.n;
    const auto fast = std::count_if(t.kernels.begin(), t.kernels.end(), [p](const TrajectoryOutcome::Kernel* g) {
      return g->correct && (p == 0.0 || (g->log_speedup && *g->log_speedup > std::log(p)));
    });
    per_kernel[fast_key(p)] = t.kernels.empty()
                                  ? nlohmann::json(nullptr)
                                  : nlohmann::json(static_cast<double>(fast) / static_cast<double>(t.kernels.size()));
  }
}

nlohmann::json arm_cost(const ArmTotals& t) {
  const auto per = [](double x, double by) { return by <= 0.0 ? nlohmann::json(nullptr) : nlohmann::json(x / by); };
  return {{"generator_wall_seconds", t.gw},
          {"generator_cpu_seconds", t.gc},
          {"validate_seconds", t.vs},
          {"validate_lock_wait_seconds", t.lw},
          {"generator_cpu_seconds_per_attempt", t.attempts == 0 ? 0.0 : t.gc / t.attempts},
          {"model_requests", t.requests},
          {"model_input_tokens", t.input_tokens},
          {"model_output_tokens", t.output_tokens},
          {"model_usd", t.usd},
          {"model_usd_per_attempt", t.attempts == 0 ? 0.0 : t.usd / t.attempts},
          {"model_usd_per_keep", per(t.usd, t.keeps)},
          // Speedup per unit of cost: the arm's summed ln(final speedup) over its trajectories per dollar of
          // model calls and per hour of generator wall time (null where that cost is zero or nothing was measured).
          {"log_speedup_per_usd", t.correct == 0 ? nlohmann::json(nullptr) : per(t.log_sum, t.usd)},
          {"log_speedup_per_generator_hour", t.correct == 0 ? nlohmann::json(nullptr) : per(t.log_sum, t.gw / 3600.0)}};
}

// One arm's summary: outcomes, keeps, fast_p, attempts by category, sandbox violations and cost.
nlohmann::json arm_summary(int a, const std::string& name, const std::vector<TrajectoryOutcome>& all) {
  const ArmTotals t = arm_totals(a, all);
  nlohmann::json fast, fast_k;
  fast_p(t, fast, fast_k);
  const auto count = [&](const char* c) { return t.cats.contains(c) ? t.cats.at(c) : 0; };
  return {
      {"name", name},
      {"label", a == 0 ? "A" : "B"},
      {"trajectories", t.n},
      {"with_outcome", t.correct},
      {"keeps", t.keeps},
      {"geomean_speedup", t.correct == 0 ? nlohmann::json(nullptr) : nlohmann::json(std::exp(t.log_sum / t.correct))},
      {"fast_p", fast},
      {"kernels", t.kernels.size()},
      {"fast_p_kernels", fast_k},
      {"attempts", t.attempts},
      {"categories", t.cats},
      {"cheats", count("cheat")},
      {"sandbox", count("sandbox")},
      {"sandbox_violations", t.violations},
      {"cost", arm_cost(t)},
  };
}

}  // namespace

nlohmann::json analyze_experiment(const nlohmann::json& plan, const std::vector<TrajectoryOutcome>& outcomes,
                                  const std::string& digest) {
  const double confidence = plan["settings"].value("confidence", 0.95);
  std::vector<std::string> arm_names;
  for (const nlohmann::json& a : plan["arms"]) arm_names.push_back(a["name"].get<std::string>());
  nlohmann::json missing;
  const std::vector<TrajectoryOutcome> all = planned_outcomes(plan, outcomes, missing);
  const Pairs pairs = pair_up(plan, all);
  const PairedInterval iv = paired_interval(pairs.d_by_task, confidence);
  const size_t planned_pairs = plan["tasks"].size() * plan["settings"]["seeds"].size();
  std::vector<std::string> reasons;
  const std::string verdict =
      verdict_of(iv, pairs.measured, missing.size(), all.size(), confidence, arm_names, reasons);
  const std::string verdict_text = verdict == "B_BETTER"   ? arm_names[1] + " better"
                                   : verdict == "A_BETTER" ? arm_names[0] + " better"
                                                           : verdict;
  nlohmann::json by_task = nlohmann::json::array();
  for (const auto& [task, d] : pairs.d_by_task) {
    // The task's own interval beside the pooled one: the paired t over its seeds (none with fewer than two).
    const PairedInterval t = paired_interval({{task, d}}, confidence);
    const bool has = t.df > 0.0;
    by_task.push_back({{"task", task},
                       {"pairs", d.size()},
                       {"mean_d", mean_of(d)},
                       {"low", has ? nlohmann::json(t.low) : nlohmann::json(nullptr)},
                       {"high", has ? nlohmann::json(t.high) : nlohmann::json(nullptr)},
                       {"ratio", std::exp(mean_of(d))},
                       {"ratio_low", has ? nlohmann::json(std::exp(t.low)) : nlohmann::json(nullptr)},
                       {"ratio_high", has ? nlohmann::json(std::exp(t.high)) : nlohmann::json(nullptr)},
                       {"d", d}});
  }
  nlohmann::json arms = nlohmann::json::array();
  for (int a = 0; a < 2; ++a) arms.push_back(arm_summary(a, arm_names[static_cast<size_t>(a)], all));

  const auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  const double b_rate = iv.pairs == 0 ? 0.0
                                      : (static_cast<double>(pairs.b_wins) + 0.5 * static_cast<double>(pairs.ties)) /
                                            static_cast<double>(iv.pairs);
  return {{"schema", "kwb.experiment_analysis"},
          {"schema_version", k_experiment_analysis_schema_version},
          {"plan_digest", digest},
          {"name", plan.value("name", "")},
          {"verdict", verdict},
          {"verdict_text", verdict_text},
          {"reasons", reasons},
          {"confidence", confidence},
          {"difference",
           {{"estimand", "mean over (task, seed) pairs, tasks weighted equally, of ln(speedup_B) - ln(speedup_A)"},
            {"method", iv.method},
            {"pairs", iv.pairs},
            {"measured_pairs", pairs.measured},
            {"planned_pairs", planned_pairs},
            {"mean", iv.mean},
            {"low", iv.low},
            {"high", iv.high},
            {"df", num(iv.df)},
            {"ratio", std::exp(iv.mean)},
            {"ratio_low", std::exp(iv.low)},
            {"ratio_high", std::exp(iv.high)}}},
          {"win_rate", {{"b_wins", pairs.b_wins}, {"a_wins", pairs.a_wins}, {"ties", pairs.ties}, {"b_rate", b_rate}}},
          {"by_task", by_task},
          {"arms", arms},
          {"pairs", pairs.rows},
          {"missing", missing}};
}

}  // namespace kwb
