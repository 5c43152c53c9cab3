#include "experiment/experiment_file.h"

#include "campaign/toml_reader.h"
#include "task/task.h"

#include <set>

namespace kwb {

namespace {

namespace fs = std::filesystem;
using toml_file::fail;
using toml_file::line_of;
using toml_file::Reader;

bool is_name(const std::string& s) {
  if (s.empty() || s.size() > 32) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_'; });
}

bool is_env_name(const std::string& s) {
  return !s.empty() && std::isdigit(static_cast<unsigned char>(s.front())) == 0 &&
         std::all_of(s.begin(), s.end(), [](char c) {
           return std::isupper(static_cast<unsigned char>(c)) != 0 ||
                  std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '_';
         });
}

// A variable's name that says it holds a secret: its value would be stored in experiment.json and seen by the
// generator, so it goes through an endpoint's key_env instead.
bool names_a_secret(const std::string& key) {
  std::string upper = key;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (const char* word : {"KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"}) {
    if (upper.find(word) != std::string::npos) return true;
  }
  return false;
}

ModelBudget read_budget(const Reader& r, const toml::table& root, const std::string& key, const std::string& where) {
  ModelBudget b;
  const toml::node* n = root.get(key);
  if (n == nullptr) return b;
  const toml::table* t = n->as_table();
  if (t == nullptr) {
    fail(r.file(), line_of(*n), where, "must be a table, e.g. { requests = 20, output_tokens = 100000, usd = 2.5 }");
  }
  r.only(*t, where, {"requests", "input_tokens", "output_tokens", "usd"});
  for (const char* k : {"requests", "input_tokens", "output_tokens"}) {
    const toml::node* v = t->get(k);
    if (v == nullptr) continue;
    if (!v->is_integer() || *v->value<std::int64_t>() < 1) {
      fail(r.file(), line_of(*v), where + "." + k, "must be a whole number from 1");
    }
    const auto count = static_cast<std::uint64_t>(*v->value<std::int64_t>());
    (std::string_view(k) == "requests"       ? b.requests
     : std::string_view(k) == "input_tokens" ? b.input_tokens
                                             : b.output_tokens) = count;
  }
  b.usd = r.number(*t, "usd", where + ".usd", 0.0, 1e6);
  return b;
}

std::vector<ModelEndpoint> read_endpoints(const Reader& r, const toml::table& arm, const std::string& where) {
  std::vector<ModelEndpoint> out;
  const toml::node* n = arm.get("endpoints");
  if (n == nullptr) return out;
  const toml::array* a = n->as_array();
  if (a == nullptr) fail(r.file(), line_of(*n), where, "must be [[arms.endpoints]] tables (docs/arms.md)");
  std::set<std::string> names;
  for (size_t i = 0; i < a->size(); ++i) {
    const std::string at = fmt::format("{}[{}]", where, i);
    const toml::table* t = a->get(i)->as_table();
    if (t == nullptr) fail(r.file(), line_of(*a->get(i)), at, "must be a table with name and url");
    r.only(*t, at, {"name", "url", "key_env", "key_header"});
    ModelEndpoint e;
    e.name = r.text(*t, "name", at + ".name").value_or("");
    if (!is_name(e.name) || e.name == "kwb" || !names.insert(e.name).second) {
      fail(r.file(), line_of(*t), at + ".name",
           fmt::format(
               "'{}' is not a new endpoint name: give 1 to 32 letters, digits, '-' or '_', once per arm, "
               "and not \"kwb\" (kwb's own: the feedback check), e.g. name = \"anthropic\" (the path a generator calls "
               "starts with it)",
               e.name));
    }
    e.url = r.text(*t, "url", at + ".url").value_or("");
    while (e.url.ends_with('/')) e.url.pop_back();
    if (!(e.url.starts_with("https://") || e.url.starts_with("http://")) ||
        e.url.find_first_of(" \t\r\n") != std::string::npos) {
      fail(r.file(), line_of(*t), at + ".url",
           fmt::format("'{}' is not an http:// or https:// address, e.g. url = \"https://api.anthropic.com\"", e.url));
    }
    e.key_env = r.text(*t, "key_env", at + ".key_env").value_or("");
    if (!e.key_env.empty() && !is_env_name(e.key_env)) {
      fail(r.file(), line_of(*t), at + ".key_env",
           fmt::format("'{}' is not an environment variable's name: give the name of the variable that holds the key "
                       "where kwb runs (e.g. key_env = \"ANTHROPIC_API_KEY\"), never the key itself",
                       e.key_env));
    }
    e.key_header = r.text(*t, "key_header", at + ".key_header").value_or("authorization");
    std::transform(e.key_header.begin(), e.key_header.end(), e.key_header.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (e.key_header.empty() || !std::all_of(e.key_header.begin(), e.key_header.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-';
        })) {
      fail(r.file(), line_of(*t), at + ".key_header",
           "must be a header's name: \"authorization\" (sent as 'Bearer KEY') or e.g. \"x-api-key\"");
    }
    out.push_back(std::move(e));
  }
  return out;
}

ExperimentArm read_arm(const Reader& r, const toml::table& t, size_t index, const fs::path& base) {
  const std::string where = fmt::format("arms[{}]", index);
  r.only(t, where,
         {"name", "command", "env", "files", "timeout_seconds", "cpu_seconds", "work_quota_mib", "address_space_gib",
          "endpoints", "budget_per_attempt", "budget_per_arm", "mounts"});
  ExperimentArm a;
  a.line = line_of(t);
  a.name = r.text(t, "name", where + ".name").value_or("");
  if (!is_name(a.name)) {
    fail(r.file(), a.line, where + ".name",
         fmt::format("'{}' is not an arm name: give 1 to 32 letters, digits, '-' or '_', e.g. name = \"tuner\"",
                     a.name));
  }
  a.command = r.texts(t, "command", where + ".command");
  if (a.command.empty() || a.command.front().empty()) {
    fail(r.file(), t.get("command") ? line_of(*t.get("command")) : a.line, where + ".command",
         "missing or empty: give the generator's argv, e.g. command = [\"python3\", \"tuner.py\"] (docs/arms.md)");
  }
  if (const toml::node* n = t.get("env")) {
    const toml::table* e = n->as_table();
    if (e == nullptr) fail(r.file(), line_of(*n), where + ".env", "must be a table, e.g. env = { MODEL = \"x\" }");
    for (auto&& [k, v] : *e) {
      const std::string key(k.str());
      if (!v.is_string()) fail(r.file(), line_of(v), where + ".env." + key, "must be a string");
      if (key.starts_with("KWB_") || key == "PATH" || key == "HOME" || key == "TMPDIR") {
        fail(r.file(), line_of(v), where + ".env." + key,
             "is set by kwb for every generator (docs/arms.md, The protocol): remove it");
      }
      if (names_a_secret(key)) {
        fail(r.file(), line_of(v), where + ".env." + key,
             "looks like a secret, and an arm's env is stored in experiment.json and seen by the generator: name "
             "the variable in an endpoint's key_env instead ([[arms.endpoints]], docs/arms.md), and kwb's proxy adds "
             "the key to each request without the generator or any record holding it");
      }
      a.env.emplace_back(key, *v.value<std::string>());
    }
    std::sort(a.env.begin(), a.env.end());
  }
  std::set<std::string> names;
  for (const std::string& f : r.texts(t, "files", where + ".files")) {
    const fs::path p = fs::absolute(base / f).lexically_normal();
    if (!fs::exists(p)) {
      fail(r.file(), line_of(*t.get("files")), where + ".files",
           fmt::format("'{}' ({}) does not exist: name files or folders relative to the experiment file's folder", f,
                       p.string()));
    }
    if (!names.insert(p.filename().string()).second) {
      fail(r.file(), line_of(*t.get("files")), where + ".files",
           fmt::format("two entries are named '{}': each is copied into the arm's folder under its own name",
                       p.filename().string()));
    }
    a.files.push_back(p);
  }
  a.timeout_seconds = r.number(t, "timeout_seconds", where + ".timeout_seconds", 1.0, 86400.0).value_or(300.0);
  a.cpu_seconds = r.number(t, "cpu_seconds", where + ".cpu_seconds", 1.0, 86400.0).value_or(600.0);
  a.work_quota_mib = r.number(t, "work_quota_mib", where + ".work_quota_mib", 1.0, 1048576.0).value_or(256.0);
  for (const std::string& m : r.texts(t, "mounts", where + ".mounts")) {
    const fs::path p = fs::absolute(base / m).lexically_normal();
    if (!fs::exists(p)) {
      fail(r.file(), line_of(*t.get("mounts")), where + ".mounts",
           fmt::format("'{}' ({}) does not exist: name folders or files (a local model's weights) relative to the "
                       "experiment file's folder, or absolute",
                       m, p.string()));
    }
    a.mounts.push_back(p);
  }
  a.address_space_gib = r.number(t, "address_space_gib", where + ".address_space_gib", 0.25, 4096.0).value_or(4.0);
  a.endpoints = read_endpoints(r, t, where + ".endpoints");
  a.budget_per_attempt = read_budget(r, t, "budget_per_attempt", where + ".budget_per_attempt");
  a.budget_per_arm = read_budget(r, t, "budget_per_arm", where + ".budget_per_arm");
  return a;
}

ExperimentTask read_task(const Reader& r, const toml::table& t, size_t index, const fs::path& base, BackendKind backend,
                         const std::vector<ValidateFlag>& flags) {
  const std::string where = fmt::format("tasks[{}]", index);
  r.only(t, where, {"dir"});
  ExperimentTask et;
  et.line = line_of(t);
  const std::optional<std::string> dir = r.text(t, "dir", where + ".dir");
  if (!dir) fail(r.file(), et.line, where + ".dir", "missing: name the task folder, e.g. dir = \"tasks/rmsnorm\"");
  et.dir = fs::absolute(base / *dir).lexically_normal();
  if (!fs::is_regular_file(et.dir / "task.toml")) {
    fail(r.file(), line_of(*t.get("dir")), where + ".dir",
         fmt::format("'{}' ({}) holds no task.toml: name a task folder", *dir, et.dir.string()));
  }
  const Task task = load_task(et.dir);
  et.name = task.name;
  if (!task.backends.contains(backend)) {
    fail(r.file(), et.line, where + ".dir",
         fmt::format("task {} has no [backends.{}] section: pick another validate.backend", task.name, backend));
  }
  for (const ValidateFlag& f : flags) {
    if (f.flag != "--workload") continue;
    const Case* c = task.find_case(f.value);
    if (c == nullptr || c->role != CaseRole::timing) {
      fail(r.file(), f.line, "validate.workloads",
           fmt::format("task {} has no timing case '{}': name a timing case every task has", task.name, f.value));
    }
  }
  return et;
}

}  // namespace

namespace {

// seeds = [...]: the replicates, whole numbers from 0, each once.
std::vector<std::int64_t> read_seeds(const fs::path& file, const toml::table& root) {
  const toml::node* n = root.get("seeds");
  if (n == nullptr) fail(file, 1, "seeds", "missing: give the replicates per task, e.g. seeds = [1, 2, 3, 4]");
  const toml::array* a = n->as_array();
  if (a == nullptr || a->empty()) {
    fail(file, line_of(*n), "seeds", "must be a non-empty array of whole numbers, e.g. seeds = [1, 2, 3, 4]");
  }
  std::vector<std::int64_t> seeds;
  std::set<std::int64_t> seen;
  for (const toml::node& e : *a) {
    if (!e.is_integer() || *e.value<std::int64_t>() < 0) {
      fail(file, line_of(e), "seeds", "every seed must be a whole number from 0");
    }
    if (!seen.insert(*e.value<std::int64_t>()).second) {
      fail(file, line_of(e), "seeds",
           fmt::format("seed {} is given twice: each seed is one replicate", *e.value<std::int64_t>()));
    }
    seeds.push_back(*e.value<std::int64_t>());
  }
  return seeds;
}

// attempts, confidence, the final's budget and the executor's limits.
void read_limits(const Reader& r, const fs::path& file, const toml::table& root, const FlagCheck& check,
                 Experiment& x) {
  x.attempts = static_cast<int>(r.number(root, "attempts", "attempts", 1, 1000).value_or(5));
  if (const toml::node* n = root.get("attempts"); n != nullptr && !n->is_integer()) {
    fail(file, line_of(*n), "attempts", "must be a whole number, e.g. attempts = 5");
  }
  x.repeats = static_cast<int>(r.number(root, "repeats", "repeats", 1, 100).value_or(1));
  if (const toml::node* n = root.get("repeats"); n != nullptr && !n->is_integer()) {
    fail(file, line_of(*n), "repeats", "must be a whole number, e.g. repeats = 3");
  }
  x.confidence = r.number(root, "confidence", "confidence", 0.5, 0.999).value_or(0.95);
  if (const std::optional<double> m = r.number(root, "final_max_minutes", "final_max_minutes", 0.001, 10080.0)) {
    if (const std::string why = check("--max-minutes", fmt::format("{}", *m)); !why.empty()) {
      fail(file, line_of(*root.get("final_max_minutes")), "final_max_minutes", why);
    }
    x.final_max_minutes = *m;
  }
  x.run_limit_minutes = r.number(root, "run_limit_minutes", "run_limit_minutes", 0.1, 10080.0).value_or(120.0);
  x.queue_limit_minutes = r.number(root, "queue_limit_minutes", "queue_limit_minutes", 0.0, 10080.0).value_or(60.0);
}

// [[arms]]: exactly two, named apart.
std::vector<ExperimentArm> read_arms(const Reader& r, const fs::path& file, const toml::table& root,
                                     const fs::path& base) {
  const toml::array* arms = root["arms"].as_array();
  if (arms == nullptr || arms->size() != 2) {
    fail(file, arms ? line_of(*arms) : 1, "arms",
         "an experiment compares exactly two arms: give two [[arms]] tables (A first, then B), each with a name and "
         "a command");
  }
  std::vector<ExperimentArm> out;
  for (size_t i = 0; i < arms->size(); ++i) {
    const toml::table* t = arms->get(i)->as_table();
    if (t == nullptr) fail(file, line_of(*arms->get(i)), fmt::format("arms[{}]", i), "must be an [[arms]] table");
    out.push_back(read_arm(r, *t, i, base));
  }
  if (out[0].name == out[1].name) {
    fail(file, out[1].line, "arms[1].name",
         fmt::format("both arms are named '{}': give each its own name (two identical generators are an A/A "
                     "experiment, named e.g. \"a1\" and \"a2\")",
                     out[1].name));
  }
  return out;
}

// [[tasks]]: at least one, each task once.
std::vector<ExperimentTask> read_tasks(const Reader& r, const fs::path& file, const toml::table& root,
                                       const fs::path& base, const Experiment& x) {
  const toml::array* tasks = root["tasks"].as_array();
  if (tasks == nullptr || tasks->empty()) {
    fail(file, 1, "tasks", "no [[tasks]]: add one, e.g. [[tasks]] dir = \"tasks/rmsnorm\"");
  }
  std::vector<ExperimentTask> out;
  std::set<std::string> task_names;
  for (size_t i = 0; i < tasks->size(); ++i) {
    const toml::table* t = tasks->get(i)->as_table();
    if (t == nullptr) fail(file, line_of(*tasks->get(i)), fmt::format("tasks[{}]", i), "must be a [[tasks]] table");
    ExperimentTask et = read_task(r, *t, i, base, x.backend, x.validate);
    if (!task_names.insert(et.name).second) {
      fail(file, et.line, fmt::format("tasks[{}].dir", i),
           fmt::format("task {} is given twice: replicates are seeds, not repeated tasks", et.name));
    }
    out.push_back(std::move(et));
  }
  return out;
}

// [[prices]]: a model (or a prefix ending in '*') and its dollars per million input and output tokens.
std::vector<ModelPrice> read_prices(const Reader& r, const fs::path& file, const toml::table& root) {
  std::vector<ModelPrice> out;
  const toml::node* n = root.get("prices");
  if (n == nullptr) return out;
  const toml::array* a = n->as_array();
  if (a == nullptr) fail(file, line_of(*n), "prices", "must be [[prices]] tables (docs/arms.md)");
  for (size_t i = 0; i < a->size(); ++i) {
    const std::string at = fmt::format("prices[{}]", i);
    const toml::table* t = a->get(i)->as_table();
    if (t == nullptr)
      fail(file, line_of(*a->get(i)), at, "must be a table: model, input_usd_per_mtok, output_usd_per_mtok");
    r.only(*t, at, {"model", "input_usd_per_mtok", "output_usd_per_mtok"});
    ModelPrice p;
    p.model = r.text(*t, "model", at + ".model").value_or("");
    if (p.model.empty()) fail(file, line_of(*t), at + ".model", "missing: the model's name, or a prefix ending in '*'");
    const std::optional<double> in = r.number(*t, "input_usd_per_mtok", at + ".input_usd_per_mtok", 0.0, 1e6);
    const std::optional<double> out_price = r.number(*t, "output_usd_per_mtok", at + ".output_usd_per_mtok", 0.0, 1e6);
    if (!in || !out_price) {
      fail(file, line_of(*t), at,
           "give both input_usd_per_mtok and output_usd_per_mtok (US dollars per million tokens)");
    }
    p.input_usd_per_mtok = *in;
    p.output_usd_per_mtok = *out_price;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

Experiment load_experiment(const fs::path& given, const FlagCheck& check) {
  const fs::path file = fs::absolute(given).lexically_normal();
  if (!fs::is_regular_file(file)) {
    throw DataError(
        fmt::format("{}: no such experiment file (give an experiment's .toml; docs/experiments.md)", given.string()));
  }
  const Reader r(file);
  const toml::table root = parse_toml_file(file);
  r.only(root, "",
         {"name", "storage", "seeds", "attempts", "repeats", "confidence", "final_max_minutes", "run_limit_minutes",
          "queue_limit_minutes", "executor", "validate", "tasks", "arms", "prices"});
  const fs::path base = file.parent_path();
  Experiment x;
  x.file = file;
  x.name = r.text(root, "name", "name").value_or(file.stem().string());
  x.storage = fs::absolute(base / r.text(root, "storage", "storage").value_or(file.stem().string() + ".experiment"))
                  .lexically_normal();
  x.seeds = read_seeds(file, root);
  read_limits(r, file, root, check, x);
  for (const char* table : {"executor", "validate"}) {
    if (const toml::node* n = root.get(table); n != nullptr && !n->is_table()) {
      fail(file, line_of(*n), table, fmt::format("must be a table: [{}]", table));
    }
  }
  if (const toml::table* e = root["executor"].as_table()) {
    x.executor = read_executor_table(file, *e);
    // A trajectory is one job of its own (sbatch, not an array), run as kwb is on the node: these campaign keys
    // would be ignored here, so they are refused rather than silently dropped.
    for (const char* key : {"array_limit", "apptainer_image", "pyxis_image", "container_mounts"}) {
      if (const toml::node* n = e->get(key)) {
        fail(file, line_of(*n), std::string("executor.") + key,
             "is a campaign's key (docs/campaigns.md); an experiment's trajectories do not use it: remove it");
      }
    }
  }
  if (const toml::table* v = root["validate"].as_table()) x.validate = read_validate_table(file, *v, check, x.backend);
  for (const ValidateFlag& f : x.validate) {
    if (f.flag == "--seed") {
      fail(file, f.line, "validate.seed",
           "is the experiment's to set: every validate of a trajectory gets a seed derived from its replicate's "
           "seed (docs/experiments.md); remove it");
    }
  }
  x.arms = read_arms(r, file, root, base);
  x.prices = read_prices(r, file, root);
  for (size_t i = 0; i < x.arms.size(); ++i) {
    for (const auto& [budget, key] : {std::pair{&x.arms[i].budget_per_attempt, "budget_per_attempt"},
                                      std::pair{&x.arms[i].budget_per_arm, "budget_per_arm"}}) {
      if (budget->usd && x.prices.empty()) {
        fail(file, x.arms[i].line, fmt::format("arms[{}].{}.usd", i, key),
             "a money budget needs the models' prices: add [[prices]] rows (model, input_usd_per_mtok, "
             "output_usd_per_mtok)");
      }
    }
  }
  x.tasks = read_tasks(r, file, root, base, x);
  return x;
}

}  // namespace kwb
