#include "campaign/campaign_file.h"

#include "campaign/toml_reader.h"
#include "task/task.h"
#include "util/error.h"
#include "util/option_table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

namespace kwb {

namespace {

namespace fs = std::filesystem;
using toml_file::fail;
using toml_file::line_of;
using toml_file::Reader;

// How a [validate] key is written in TOML and on kwb validate's command line: the rows of util/option_table.h that
// campaigns offer (OptionSurface k_campaign), in the table's order.
using ValueKind = OptionKind;
struct KeySpec {
  const char* key;
  const char* flag;
  ValueKind kind;
  const char* example;
};

const std::vector<KeySpec>& key_specs() {
  static const std::vector<KeySpec> specs = [] {
    std::vector<KeySpec> out;
    for (const OptionRow& row : option_rows()) {
      if ((row.surfaces & k_campaign) != 0) out.push_back({row.key, row.flag, row.kind, row.example});
    }
    return out;
  }();
  return specs;
}

// A [validate] value as kwb validate's command line spells it ("" for a flag that is set).
std::string flag_value(const Reader& r, const KeySpec& s, const toml::node& n) {
  const std::string field = std::string("validate.") + s.key;
  switch (s.kind) {
    case ValueKind::number:
      if (!n.is_number()) fail(r.file(), line_of(n), field, std::string("must be a number, e.g. ") + s.example);
      return n.is_integer() ? fmt::format("{}", *n.value<int64_t>()) : fmt::format("{}", *n.value<double>());
    case ValueKind::integer:
      if (!n.is_integer()) fail(r.file(), line_of(n), field, std::string("must be a whole number, e.g. ") + s.example);
      return fmt::format("{}", *n.value<int64_t>());
    case ValueKind::text:
      if (!n.is_string()) fail(r.file(), line_of(n), field, std::string("must be a string, e.g. ") + s.example);
      return *n.value<std::string>();
    case ValueKind::flag:
      if (!n.is_boolean()) fail(r.file(), line_of(n), field, std::string("must be true or false, e.g. ") + s.example);
      return "";
    case ValueKind::texts:
      break;
  }
  return "";
}

// [validate]: the subset of kwb validate's options a campaign passes through, each checked as kwb validate checks it.
std::vector<ValidateFlag> validate_flags(const Reader& r, const toml::table& t, const FlagCheck& check,
                                         BackendKind& backend) {
  std::vector<std::string> known = validate_keys();
  known.insert(known.begin(), "backend");
  r.only(t, "validate", known);
  if (std::optional<std::string> b = r.text(t, "backend", "validate.backend")) {
    const std::optional<BackendKind> kind = parse_backend(*b);
    if (!kind) {
      fail(r.file(), line_of(*t.get("backend")), "validate.backend",
           fmt::format("unknown backend '{}' (expected one of {})", *b, fmt::join(backend_names(), ", ")));
    }
    backend = *kind;
  }
  std::vector<ValidateFlag> out;
  for (const KeySpec& s : key_specs()) {
    const toml::node* n = t.get(s.key);
    if (n == nullptr) continue;
    const std::string field = std::string("validate.") + s.key;
    if (s.kind == ValueKind::texts) {
      for (const std::string& w : r.texts(t, s.key, field)) out.push_back({s.key, s.flag, w, line_of(*n)});
      continue;
    }
    if (s.kind == ValueKind::flag && !n->value<bool>().value_or(false)) {
      (void)flag_value(r, s, *n);  // checks it is a boolean; false is the default, so nothing is passed
      continue;
    }
    ValidateFlag f{s.key, s.flag, flag_value(r, s, *n), line_of(*n)};
    if (s.kind != ValueKind::flag) {
      if (const std::string why = check(f.flag, f.value); !why.empty()) {
        fail(r.file(), f.line, field, why + fmt::format(" (kwb validate's {}; fix it here)", f.flag));
      }
    }
    out.push_back(std::move(f));
  }
  return out;
}

bool is_glob(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

bool is_source(const fs::path& p) {
  static const std::set<std::string> exts = {".c", ".cc", ".cpp", ".cxx", ".cu"};
  return exts.contains(p.extension().string());
}

// Every source one `candidates` entry names: a file, every source in a folder (not below it), or a glob's matches;
// sorted within the entry. An entry that names nothing is an error: a typo must not shrink a campaign silently.
std::vector<fs::path> expand_candidates(const Reader& r, const std::string& entry, const fs::path& base, int line,
                                        const std::string& field) {
  const fs::path p = (base / entry).lexically_normal();
  std::vector<fs::path> out;
  if (is_glob(entry)) {
    glob_t g{};
    const int rc = ::glob(p.c_str(), GLOB_ERR, nullptr, &g);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) {
      if (fs::is_regular_file(g.gl_pathv[i])) out.emplace_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
    if (out.empty()) {
      fail(r.file(), line, field,
           fmt::format("the pattern '{}' ({}) matches no file: fix the pattern (it is relative "
                       "to the campaign file's folder)",
                       entry, p.string()));
    }
  } else if (fs::is_directory(p)) {
    for (const fs::directory_entry& e : fs::directory_iterator(p)) {
      if (e.is_regular_file() && is_source(e.path())) out.push_back(e.path());
    }
    if (out.empty()) {
      fail(r.file(), line, field,
           fmt::format("the folder '{}' ({}) holds no source file (.c, .cc, .cpp, .cxx, .cu)", entry, p.string()));
    }
  } else if (fs::is_regular_file(p)) {
    out.push_back(p);
  } else {
    fail(r.file(), line, field,
         fmt::format("'{}' ({}) does not exist: name a source file, a folder or a glob, "
                     "relative to the campaign file's folder",
                     entry, p.string()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

CampaignTask read_task(const Reader& r, const toml::table& t, size_t index, const fs::path& base, BackendKind backend,
                       const std::vector<ValidateFlag>& flags) {
  const std::string where = fmt::format("tasks[{}]", index);
  r.only(t, where, {"dir", "baseline", "candidates"});
  CampaignTask ct;
  ct.line = line_of(t);
  const std::optional<std::string> dir = r.text(t, "dir", where + ".dir");
  if (!dir) fail(r.file(), ct.line, where + ".dir", "missing: name the task folder, e.g. dir = \"tasks/rmsnorm\"");
  ct.dir = fs::absolute(base / *dir).lexically_normal();
  if (!fs::is_regular_file(ct.dir / "task.toml")) {
    fail(r.file(), line_of(*t.get("dir")), where + ".dir",
         fmt::format("'{}' ({}) holds no task.toml: name a task folder (kwb new-task makes one)", *dir,
                     ct.dir.string()));
  }
  const Task task = load_task(ct.dir);  // its own errors name task.toml
  ct.name = task.name;
  if (!task.backends.contains(backend)) {
    fail(r.file(), ct.line, where + ".dir",
         fmt::format("task {} has no [backends.{}] section: pick another validate.backend or add it", task.name,
                     backend));
  }
  for (const ValidateFlag& f : flags) {
    if (f.flag != "--workload") continue;
    const Case* c = task.find_case(f.value);
    if (c == nullptr || c->role != CaseRole::timing) {
      fail(r.file(), f.line, "validate.workloads",
           fmt::format("task {} has no timing case '{}': name one of its timing cases", task.name, f.value));
    }
  }
  if (std::optional<std::string> b = r.text(t, "baseline", where + ".baseline")) {
    if (*b == "incumbent") {
      ct.baseline = *b;
    } else {
      const fs::path p = fs::absolute(base / *b).lexically_normal();
      if (!fs::is_regular_file(p)) {
        fail(r.file(), line_of(*t.get("baseline")), where + ".baseline",
             fmt::format("'{}' ({}) does not exist: name a source file, or \"incumbent\" for the ledger's, or leave "
                         "it out for the task's baseline",
                         *b, p.string()));
      }
      ct.baseline = p.string();
    }
  }
  const toml::node* cn = t.get("candidates");
  const std::vector<std::string> entries = r.texts(t, "candidates", where + ".candidates");
  if (entries.empty()) {
    fail(r.file(), cn ? line_of(*cn) : ct.line, where + ".candidates",
         "missing or empty: name source files, folders or globs, e.g. candidates = [\"candidates/*.cpp\"]");
  }
  std::set<fs::path> seen;
  for (const std::string& e : entries) {
    for (fs::path& p : expand_candidates(r, e, base, line_of(*cn), where + ".candidates")) {
      if (seen.insert(p).second) ct.candidates.push_back(std::move(p));
    }
  }
  return ct;
}

// A candidate the backend cannot build would pass every check here and fail on the node, minutes or hours later:
// refused now, naming it. cuda builds .cu; cpu and opencl build C and C++ (builder/builder.h, toolchain_for).
void refuse_unbuildable(const Reader& r, const CampaignTask& t, size_t index, BackendKind backend) {
  for (const fs::path& cand : t.candidates) {
    const std::string ext = cand.extension().string();
    const bool ok =
        backend == BackendKind::cuda ? ext == ".cu" : ext == ".c" || ext == ".cpp" || ext == ".cc" || ext == ".cxx";
    if (ok) continue;
    fail(
        r.file(), t.line, fmt::format("tasks[{}].candidates", index),
        fmt::format("{}: the {} backend cannot build a '{}' source ({}): name only such sources, or set "
                    "validate.backend",
                    cand.string(), to_string(backend), ext,
                    backend == BackendKind::cuda ? "a cuda candidate is a .cu file" : "it builds .c, .cpp, .cc, .cxx"));
  }
}

ExecutorKind executor_kind(const Reader& r, const toml::table& t) {
  const std::optional<std::string> kind = r.text(t, "kind", "executor.kind");
  if (!kind || *kind == "local") return ExecutorKind::local;
  if (*kind == "slurm") return ExecutorKind::slurm;
  fail(r.file(), line_of(*t.get("kind")), "executor.kind",
       fmt::format("unknown executor '{}' (expected local or slurm)", *kind));
}

ExecutorTable read_executor(const Reader& r, const toml::table& t) {
  static const std::vector<std::string> slurm_keys = {
      "partition", "account",     "gres",           "constraint",      "nodelist",    "exclude",
      "exclusive", "array_limit", "sbatch_options", "apptainer_image", "pyxis_image", "container_mounts"};
  std::vector<std::string> known = {"kind", "poll_seconds"};
  known.insert(known.end(), slurm_keys.begin(), slurm_keys.end());
  r.only(t, "executor", known);
  ExecutorTable c;
  c.kind = executor_kind(r, t);
  c.poll_seconds = r.number(t, "poll_seconds", "executor.poll_seconds", 0.05, 600.0).value_or(0.0);
  for (const std::string& key : slurm_keys) {
    if (c.kind == ExecutorKind::local && t.contains(key)) {
      fail(r.file(), line_of(*t.get(key)), "executor." + key,
           "is a Slurm option, but executor.kind is local: remove it, or set kind = \"slurm\"");
    }
  }
  c.slurm.partition = r.text(t, "partition", "executor.partition").value_or("");
  c.slurm.account = r.text(t, "account", "executor.account").value_or("");
  c.slurm.gres = r.text(t, "gres", "executor.gres").value_or("");
  c.slurm.constraint = r.text(t, "constraint", "executor.constraint").value_or("");
  c.slurm.nodelist = r.text(t, "nodelist", "executor.nodelist").value_or("");
  c.slurm.exclude = r.text(t, "exclude", "executor.exclude").value_or("");
  if (const toml::node* n = t.get("exclusive")) {
    if (!n->is_boolean()) {
      fail(r.file(), line_of(*n), "executor.exclusive",
           "must be true (a job takes a whole node, the default) or false (it shares the node; kwb's timing lock "
           "keeps timings apart)");
    }
    c.slurm.exclusive = n->value_or(true);
  }
  if (const std::optional<double> k = r.number(t, "array_limit", "executor.array_limit", 1.0, 100000.0)) {
    if (*k != std::floor(*k)) {
      fail(r.file(), line_of(*t.get("array_limit")), "executor.array_limit",
           fmt::format("{} is not a whole number: give how many jobs may run at once, e.g. array_limit = 8", *k));
    }
    c.slurm.array_limit = static_cast<size_t>(*k);
  }
  c.slurm.apptainer_image = r.text(t, "apptainer_image", "executor.apptainer_image").value_or("");
  c.slurm.pyxis_image = r.text(t, "pyxis_image", "executor.pyxis_image").value_or("");
  if (!c.slurm.apptainer_image.empty() && !c.slurm.pyxis_image.empty()) {
    fail(r.file(), line_of(*t.get("pyxis_image")), "executor.pyxis_image",
         "and executor.apptainer_image both name a container: keep the one the cluster runs");
  }
  c.slurm.container_mounts = r.texts(t, "container_mounts", "executor.container_mounts");
  for (const std::string& m : c.slurm.container_mounts) {
    if (m.empty() || m.front() != '/' || m.find_first_of(",:") != std::string::npos) {
      fail(r.file(), line_of(*t.get("container_mounts")), "executor.container_mounts",
           fmt::format("'{}' is not an absolute folder without ',' or ':': name folders bound at the same path, e.g. "
                       "container_mounts = [\"/scratch\"]",
                       m));
    }
  }
  if (!c.slurm.container_mounts.empty() && c.slurm.apptainer_image.empty() && c.slurm.pyxis_image.empty()) {
    fail(r.file(), line_of(*t.get("container_mounts")), "executor.container_mounts",
         "given without a container: add executor.apptainer_image or executor.pyxis_image, or remove it");
  }
  c.slurm.sbatch_options = r.texts(t, "sbatch_options", "executor.sbatch_options");
  for (const std::string& o : c.slurm.sbatch_options) {
    for (const char* owned : {"--parsable", "--output", "--error", "--job-name", "--time", "--wrap", "--array",
                              "--exclusive", "--constraint", "--nodelist", "--exclude", "--gres"}) {
      if (o.rfind(owned, 0) == 0) {
        fail(r.file(), line_of(*t.get("sbatch_options")), "executor.sbatch_options",
             fmt::format("'{}' is set by the campaign itself (run_limit_minutes gives --time; --exclusive, "
                         "--constraint, --nodelist, --exclude, --gres and --array are keys of [executor]): remove it",
                         o));
      }
    }
  }
  return c;
}

}  // namespace

toml::table parse_toml_file(const fs::path& file) {
  try {
    return toml::parse_file(file.string());
  } catch (const toml::parse_error& e) {
    throw DataError(fmt::format("{}:{}: TOML syntax error: {}", file.string(), e.source().begin.line, e.description()));
  }
}

ExecutorTable read_executor_table(const fs::path& file, const toml::table& t) { return read_executor(Reader(file), t); }

std::vector<ValidateFlag> read_validate_table(const fs::path& file, const toml::table& t, const FlagCheck& check,
                                              BackendKind& backend) {
  return validate_flags(Reader(file), t, check, backend);
}

std::string_view to_string(ExecutorKind k) { return k == ExecutorKind::local ? "local" : "slurm"; }

const std::vector<std::string>& validate_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const KeySpec& s : key_specs()) k.emplace_back(s.key);
    return k;
  }();
  return keys;
}

Campaign load_campaign(const fs::path& given, const FlagCheck& check) {
  const fs::path file = fs::absolute(given).lexically_normal();
  if (!fs::is_regular_file(file)) {
    throw DataError(
        fmt::format("{}: no such campaign file (give a campaign's .toml; docs/campaigns.md)", given.string()));
  }
  const Reader r(file);
  const toml::table root = parse_toml_file(file);
  r.only(root, "", {"name", "storage", "run_limit_minutes", "queue_limit_minutes", "executor", "validate", "tasks"});
  const fs::path base = file.parent_path();
  Campaign c;
  c.file = file;
  c.name = r.text(root, "name", "name").value_or(file.stem().string());
  c.storage = fs::absolute(base / r.text(root, "storage", "storage").value_or(file.stem().string() + ".campaign"))
                  .lexically_normal();
  // A job longer than a week, or a limit under 6 s, is a typo (minutes given as seconds, or the reverse).
  c.run_limit_minutes = r.number(root, "run_limit_minutes", "run_limit_minutes", 0.1, 10080.0).value_or(20.0);
  c.queue_limit_minutes = r.number(root, "queue_limit_minutes", "queue_limit_minutes", 0.0, 10080.0).value_or(5.0);
  for (const char* table : {"executor", "validate"}) {
    if (const toml::node* n = root.get(table); n != nullptr && !n->is_table()) {
      fail(file, line_of(*n), table, fmt::format("must be a table: [{}]", table));
    }
  }
  if (const toml::table* e = root["executor"].as_table()) {
    const ExecutorTable x = read_executor(r, *e);
    c.executor = x.kind;
    c.poll_seconds = x.poll_seconds;
    c.slurm = x.slurm;
  }
  if (const toml::table* v = root["validate"].as_table()) c.validate = validate_flags(r, *v, check, c.backend);
  const toml::array* tasks = root["tasks"].as_array();
  if (tasks == nullptr || tasks->empty()) {
    fail(file, 1, "tasks", "no [[tasks]]: add one, e.g. [[tasks]] dir = \"tasks/rmsnorm\" candidates = [\"x.cpp\"]");
  }
  for (size_t i = 0; i < tasks->size(); ++i) {
    const toml::table* t = tasks->get(i)->as_table();
    if (t == nullptr) fail(file, line_of(*tasks->get(i)), fmt::format("tasks[{}]", i), "must be a [[tasks]] table");
    c.tasks.push_back(read_task(r, *t, i, base, c.backend, c.validate));
    refuse_unbuildable(r, c.tasks.back(), i, c.backend);
  }
  return c;
}

}  // namespace kwb
