#include "experiment/plan.h"

#include "campaign/runner.h"
#include "task/task.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json_text.h"
#include "util/provenance.h"
#include "util/sha256.h"
#include "util/timing_lock.h"

#include <fmt/format.h>

#include <sys/stat.h>

namespace kwb {

namespace fs = std::filesystem;

namespace {

// Copies `from` (a file or a folder) to `to`, readable by everyone (a generator may run as a user of its own,
// util/worker_user.h) and writable by none but kwb's user.
void copy_public(const fs::path& from, const fs::path& to) {
  fs::create_directories(to.parent_path());
  if (fs::is_directory(from)) {
    fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  } else {
    fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  }
}

void make_world_readable(const fs::path& dir) {
  ::chmod(dir.c_str(), 0755);
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_symlink()) continue;
    ::chmod(it->path().c_str(), it->is_directory() ? 0755 : 0644);
  }
}

// What the plan holds but its time: a resumed experiment must freeze to exactly this.
nlohmann::json without_time(nlohmann::json j) {
  j.erase("created");
  return j;
}

// The first key path where two plans differ, for the message that refuses a changed experiment.
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& where = "") {
  if (a.type() != b.type()) return where.empty() ? "the plan" : where;
  if (a.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      std::string key = where.empty() ? it.key() : where + "." + it.key();
      if (!b.contains(it.key())) return key;
      if (a[it.key()] != b[it.key()]) return first_difference(a[it.key()], b[it.key()], key);
    }
    for (auto it = b.begin(); it != b.end(); ++it) {
      if (!a.contains(it.key())) return where.empty() ? it.key() : where + "." + it.key();
    }
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return where + " (its length)";
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] != b[i]) return first_difference(a[i], b[i], fmt::format("{}[{}]", where, i));
    }
  }
  return where.empty() ? "the plan" : where;
}

}  // namespace

nlohmann::json frozen_file_list(const fs::path& dir) {
  std::vector<std::pair<std::string, std::string>> files;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_regular_file()) files.emplace_back(it->path().lexically_relative(dir).string(), sha256_file(it->path()));
  }
  std::sort(files.begin(), files.end());
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [path, digest] : files) out.push_back({{"path", path}, {"sha256", digest}});
  return out;
}

nlohmann::json mounted_file_list(const fs::path& mount, bool hash) {
  std::vector<fs::path> files;
  if (fs::is_regular_file(mount)) {
    files.push_back(mount);
  } else {
    for (auto it = fs::recursive_directory_iterator(mount); it != fs::recursive_directory_iterator(); ++it) {
      if (it->is_regular_file()) files.push_back(it->path());
    }
  }
  std::sort(files.begin(), files.end());
  nlohmann::json list = nlohmann::json::array();
  for (const fs::path& f : files) {
    nlohmann::json e = {
        {"path", f == mount ? "" : f.lexically_relative(mount).string()},
        {"bytes", fs::file_size(f)},
        {"mtime_ns",
         std::chrono::duration_cast<std::chrono::nanoseconds>(fs::last_write_time(f).time_since_epoch()).count()}};
    if (hash) e["sha256"] = sha256_file(f);
    list.push_back(std::move(e));
  }
  return {{"path", mount.string()}, {"files", list}};
}

std::vector<TrajectoryPlan> plan_trajectories(const Experiment& x) {
  std::vector<TrajectoryPlan> out;
  for (const ExperimentTask& t : x.tasks) {
    for (const std::int64_t seed : x.seeds) {
      for (int r = 1; r <= x.repeats; ++r) {
        for (size_t a = 0; a < x.arms.size(); ++a) {
          TrajectoryPlan p;
          p.arm = x.arms[a].name;
          p.arm_index = static_cast<int>(a);
          p.task = t.name;
          p.seed = seed;
          p.repeat = r;
          p.id = fmt::format("{}--{}--s{}", p.arm, p.task, seed);
          if (x.repeats > 1) p.id += fmt::format("--r{}", r);
          out.push_back(std::move(p));
        }
      }
    }
  }
  return out;
}

std::vector<fs::path> public_task_files(const fs::path& task_dir, BackendKind backend) {
  const Task task = load_task(task_dir);
  std::vector<fs::path> out = {"task.toml"};
  if (fs::is_regular_file(task_dir / "README.md")) out.emplace_back("README.md");
  out.push_back(task.backends.at(backend).baseline.lexically_relative(task_dir));
  return out;
}

namespace {

// The tasks' public copies into staging/tasks/<name>, and their plan entries.
nlohmann::json freeze_tasks(const Experiment& x, const fs::path& staging) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const ExperimentTask& t : x.tasks) {
    const fs::path pub = staging / "tasks" / t.name;
    for (const fs::path& rel : public_task_files(t.dir, x.backend)) copy_public(t.dir / rel, pub / rel);
    make_world_readable(pub);
    tasks.push_back({{"name", t.name},
                     {"dir", t.dir.string()},
                     {"digest", task_digest(t.dir)},
                     {"baseline", load_task(t.dir).backends.at(x.backend).baseline.lexically_relative(t.dir).string()},
                     {"public_files", frozen_file_list(pub)}});
  }
  return tasks;
}

nlohmann::json budget_json(const ModelBudget& b) {
  const auto opt = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  return {{"requests", opt(b.requests)},
          {"input_tokens", opt(b.input_tokens)},
          {"output_tokens", opt(b.output_tokens)},
          {"usd", opt(b.usd)}};
}

// The arms' files into staging/arms/<name>, and their plan entries.
nlohmann::json freeze_arms(const Experiment& x, const fs::path& staging) {
  nlohmann::json arms = nlohmann::json::array();
  for (const ExperimentArm& a : x.arms) {
    const fs::path dir = staging / "arms" / a.name;
    fs::create_directories(dir);
    for (const fs::path& f : a.files) copy_public(f, dir / f.filename());
    make_world_readable(dir);
    nlohmann::json env = nlohmann::json::object();
    for (const auto& [k, v] : a.env) env[k] = v;
    nlohmann::json arm = {{"name", a.name},
                          {"command", a.command},
                          {"env", env},
                          {"timeout_seconds", a.timeout_seconds},
                          {"cpu_seconds", a.cpu_seconds},
                          {"work_quota_mib", a.work_quota_mib},
                          {"files", frozen_file_list(dir)}};
    // Only where set, so that a plan frozen before these existed still freezes to itself.
    if (a.address_space_gib != 4.0) arm["address_space_gib"] = a.address_space_gib;
    if (!a.mounts.empty()) {
      arm["mounts"] = nlohmann::json::array();
      for (const fs::path& m : a.mounts) arm["mounts"].push_back(mounted_file_list(m, true));
    }
    if (!a.endpoints.empty()) {
      arm["endpoints"] = nlohmann::json::array();
      for (const ModelEndpoint& e : a.endpoints) {
        arm["endpoints"].push_back(
            {{"name", e.name}, {"url", e.url}, {"key_env", e.key_env}, {"key_header", e.key_header}});
      }
      arm["budget_per_attempt"] = budget_json(a.budget_per_attempt);
      arm["budget_per_arm"] = budget_json(a.budget_per_arm);
    }
    arms.push_back(std::move(arm));
  }
  return arms;
}

// The plan's settings: backend, validate's flags, seeds, attempts, confidence, budgets and the executor.
nlohmann::json plan_settings(const Experiment& x) {
  nlohmann::json validate = nlohmann::json::array();
  for (const ValidateFlag& f : x.validate) validate.push_back({{"flag", f.flag}, {"value", f.value}});
  nlohmann::json executor = {{"kind", std::string(to_string(x.executor.kind))}};
  if (x.executor.kind == ExecutorKind::slurm) {
    executor["partition"] = x.executor.slurm.partition;
    executor["account"] = x.executor.slurm.account;
    executor["sbatch_options"] = x.executor.slurm.sbatch_options;
  }
  nlohmann::json settings = {{"backend", std::string(to_string(x.backend))},
                             {"validate", validate},
                             {"seeds", x.seeds},
                             {"attempts", x.attempts},
                             {"confidence", x.confidence},
                             {"final_max_minutes", x.final_max_minutes},
                             {"run_limit_minutes", x.run_limit_minutes},
                             {"queue_limit_minutes", x.queue_limit_minutes},
                             {"executor", executor}};
  if (x.repeats > 1) settings["repeats"] = x.repeats;
  if (!x.prices.empty()) {
    settings["prices"] = nlohmann::json::array();
    for (const ModelPrice& p : x.prices) {
      settings["prices"].push_back({{"model", p.model},
                                    {"input_usd_per_mtok", p.input_usd_per_mtok},
                                    {"output_usd_per_mtok", p.output_usd_per_mtok}});
    }
  }
  if (!x.replay_from.empty()) {
    settings["replay"] = {{"from", x.replay_from.string()}, {"plan_sha256", plan_digest(x.replay_from)}};
  }
  return settings;
}

// A replay re-runs the recorded experiment: its tasks, arms, settings and trajectories must be the recorded ones
// (kwb's own identity and the replay's own storage aside), or the recorded answers belong to other questions.
void check_replay_plan(const Experiment& x, const nlohmann::json& plan) {
  if (fs::weakly_canonical(x.replay_from) == fs::weakly_canonical(x.storage)) {
    throw DataError(
        fmt::format("--replay {}: that is this experiment's own storage folder: replay into another "
                    "(set storage in a copy of the file, or give --storage)",
                    x.replay_from.string()));
  }
  nlohmann::json recorded = load_frozen_plan(x.replay_from);
  nlohmann::json mine = plan;
  for (nlohmann::json* j : {&recorded, &mine}) {
    for (const char* k : {"created", "file", "kwb", "name"}) j->erase(k);
    (*j)["settings"].erase("replay");
  }
  if (recorded != mine) {
    throw DataError(fmt::format(
        "--replay {}: the recorded experiment was frozen under another plan ({} differs): a replay answers the "
        "recorded requests only for the same tasks, arms and settings",
        x.replay_from.string(), first_difference(recorded, mine)));
  }
}

}  // namespace

nlohmann::json freeze_experiment(const Experiment& x) {
  const ExperimentPaths paths{x.storage};
  // The copies first, into a staging folder; they replace the previous copies only once the plan is known to agree.
  const fs::path staging = x.storage / ".freeze";
  fs::remove_all(staging);
  fs::create_directories(staging);
  nlohmann::json trajectories = nlohmann::json::array();
  for (const TrajectoryPlan& p : plan_trajectories(x)) {
    nlohmann::json t = {{"id", p.id}, {"arm", p.arm}, {"arm_index", p.arm_index}, {"task", p.task}, {"seed", p.seed}};
    if (x.repeats > 1) t["repeat"] = p.repeat;  // absent otherwise: an earlier plan freezes to itself
    trajectories.push_back(std::move(t));
  }
  const Provenance built = build_provenance();
  nlohmann::json plan = {
      {"schema", "kwb.experiment"},
      {"schema_version", k_experiment_schema_version},
      {"name", x.name},
      {"file", x.file.string()},
      {"created", clock_time(unix_now_ns())},
      {"kwb",
       {{"version", KWB_VERSION},
        {"git_sha", built.git_sha},
        {"git_dirty", built.git_dirty ? nlohmann::json(*built.git_dirty) : nlohmann::json(nullptr)},
        {"binary_sha256", sha256_file(fs::read_symlink("/proc/self/exe"))}}},
      {"settings", plan_settings(x)},
      {"tasks", freeze_tasks(x, staging)},
      {"arms", freeze_arms(x, staging)},
      {"trajectories", trajectories},
  };

  if (!x.replay_from.empty()) check_replay_plan(x, plan);
  if (fs::is_regular_file(paths.plan())) {
    nlohmann::json old = load_frozen_plan(x.storage);
    if (without_time(old) != without_time(plan)) {
      fs::remove_all(staging);
      throw DataError(fmt::format(
          "{}: the experiment changed since it was frozen in {} ({} differs): an experiment's evidence holds only "
          "under one plan. Restore what changed, or give the experiment a new storage folder",
          x.file.string(), x.storage.string(), first_difference(without_time(old), without_time(plan))));
    }
    fs::remove_all(staging);
    return old;
  }
  for (const char* part : {"tasks", "arms"}) {
    fs::remove_all(x.storage / part);
    fs::rename(staging / part, x.storage / part);
  }
  fs::remove_all(staging);
  const std::string text = json_text(plan, 2) + "\n";
  write_file_atomic(paths.plan(), text);
  write_file_atomic(x.storage / "experiment.sha256", sha256_hex(text) + "\n");
  return plan;
}

nlohmann::json load_frozen_plan(const fs::path& storage) {
  const ExperimentPaths paths{storage};
  if (!fs::is_regular_file(paths.plan())) {
    throw DataError(
        fmt::format("{}: no experiment.json: not an experiment's storage folder (kwb experiment run "
                    "freezes one)",
                    storage.string()));
  }
  const std::string text = read_file(paths.plan());
  std::string recorded;
  if (fs::is_regular_file(storage / "experiment.sha256")) recorded = read_file(storage / "experiment.sha256");
  while (!recorded.empty() && (recorded.back() == '\n' || recorded.back() == ' ')) recorded.pop_back();
  if (recorded != sha256_hex(text)) {
    throw DataError(
        fmt::format("{}: its SHA-256 is not the one recorded at the freeze ({}): the plan was changed "
                    "after it was frozen; the experiment's evidence cannot be trusted. Run it again into "
                    "a new storage folder",
                    paths.plan().string(), (storage / "experiment.sha256").string()));
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{}: not JSON: {}", paths.plan().string(), e.what()));
  }
  if (j.value("schema", "") != "kwb.experiment" || j.value("schema_version", 0) != k_experiment_schema_version) {
    throw DataError(fmt::format("{}: not a kwb.experiment plan of schema version {}", paths.plan().string(),
                                k_experiment_schema_version));
  }
  return j;
}

std::string plan_digest(const fs::path& storage) { return sha256_file(ExperimentPaths{storage}.plan()); }

}  // namespace kwb
