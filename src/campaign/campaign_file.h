// A campaign (docs/campaigns.md): many candidates, on one or several tasks, each judged by `kwb validate` in a job
// of its own, on this machine or through Slurm. This is its file, campaign.toml, parsed and checked before anything
// runs: every bad input is a DataError (exit 65) naming the file, the line, the field and the fix, or, for a value
// kwb validate itself would refuse, the same message kwb validate gives, with the campaign file's line.
#pragma once

#include "util/backend_kind.h"

#include <toml++/toml.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace kwb {

enum class ExecutorKind { local, slurm };
std::string_view to_string(ExecutorKind k);

// What `sbatch` is given beyond what every job gets (--parsable, --time, --job-name, --output, --array): passed
// through as the campaign names them.
struct SlurmOptions {
  std::string partition;
  std::string account;
  // --gres: on cuda, gpu:1 unless given; on opencl only when given (an OpenCL device may be a CPU, PoCL); never on cpu.
  std::string gres;
  std::string constraint;  // --constraint: node features (e.g. "epyc9654&h200")
  std::string nodelist;    // --nodelist: only these nodes
  std::string exclude;     // --exclude: never these nodes
  // --exclusive (the default): a job takes a whole node. false: it shares the node as Slurm allows, and kwb's
  // per-node timing lock (util/timing_lock.h) keeps two timings on one node apart: for GPU nodes, where one job
  // takes one GPU of eight.
  bool exclusive = true;
  size_t array_limit = 0;  // --array=...%K: at most K of a wave's jobs run at once (0: as many as Slurm gives)
  // A container for kwb on the node (docs/threat-model.md, "Inside a container"): at most one of the two.
  std::string apptainer_image;  // `apptainer exec --bind ... IMAGE kwb ...` (a .sif, or docker://...)
  std::string pyxis_image;      // `srun --container-image=IMAGE --container-mounts=... kwb ...` (pyxis, enroot)
  std::vector<std::string> container_mounts;  // more folders bound at the same path (storage, tasks, sources and
                                              // kwb's own folder always are)
  std::vector<std::string> sbatch_options;
};

// One option of kwb validate, from the campaign's [validate] table: its key there, the flag it becomes, its value
// as text ("" for a flag without one), and its line (for the error that names it).
struct ValidateFlag {
  std::string key;
  std::string flag;
  std::string value;
  int line = 0;
};

struct CampaignTask {
  std::filesystem::path dir;  // absolute
  std::string name;           // the task's name (task.toml)
  // "" for the task's own baseline on the backend, "incumbent" for the ledger's current incumbent, or a source
  // file (absolute).
  std::string baseline;
  std::vector<std::filesystem::path> candidates;  // absolute, in the order given, each once
  int line = 0;
};

struct Campaign {
  std::filesystem::path file;     // absolute
  std::string name;               // `name`, else the file's stem
  std::filesystem::path storage;  // absolute: bundles, job logs, the campaign's state, its reports
  BackendKind backend = BackendKind::cpu;
  double run_limit_minutes = 20.0;   // per job: the reproduction requirement
  double queue_limit_minutes = 5.0;  // per job: waiting for a node (Slurm) or for the timing lock (local)
  double poll_seconds = 0.0;         // 0: the executor's own (1 s local, 5 s slurm)
  ExecutorKind executor = ExecutorKind::local;
  SlurmOptions slurm;
  std::vector<ValidateFlag> validate;  // the order of k_validate_keys, each at most once (workloads repeated)
  std::vector<CampaignTask> tasks;
};

// Why `value` is not acceptable for kwb validate's `flag` ("" when it is): the command line's own check, given by
// the caller (cli/options.h's ranges), so that a campaign refuses exactly what kwb validate would.
using FlagCheck = std::function<std::string(const std::string& flag, const std::string& value)>;

// The [validate] keys a campaign passes through, in the order they are given to kwb validate. The others
// (--output-dir, --candidate, --baseline, --against, --lock-timeout, --json) are the campaign's to set.
const std::vector<std::string>& validate_keys();

// Reads and checks `file`: its tasks load (load_task), its sources exist, its globs and folders match at least one
// file, every number is in its range. DataError (65) naming file:line, the field and the fix.
Campaign load_campaign(const std::filesystem::path& file, const FlagCheck& check);

// ---- shared with the experiment file (experiment/experiment_file.h), which has the same tables ----------------------

// The file parsed; DataError naming file:line on a syntax error.
toml::table parse_toml_file(const std::filesystem::path& file);

// [executor], checked as a campaign checks it.
struct ExecutorTable {
  ExecutorKind kind = ExecutorKind::local;
  double poll_seconds = 0.0;
  SlurmOptions slurm;
};
ExecutorTable read_executor_table(const std::filesystem::path& file, const toml::table& t);

// [validate], checked as a campaign checks it; sets `backend` from validate.backend when given.
std::vector<ValidateFlag> read_validate_table(const std::filesystem::path& file, const toml::table& t,
                                              const FlagCheck& check, BackendKind& backend);

}  // namespace kwb
