#include "campaign/campaign_state.h"

#include "util/sealed_json.h"

#include "util/error.h"
#include "util/fs.h"
#include "util/json_text.h"

#include <fmt/format.h>

#include <array>
#include <utility>

namespace kwb {

namespace {

constexpr std::array<std::pair<JobPhase, std::string_view>, 4> k_phases = {{{JobPhase::waiting, "waiting"},
                                                                            {JobPhase::queued, "queued"},
                                                                            {JobPhase::running, "running"},
                                                                            {JobPhase::ended, "ended"}}};
constexpr std::array<std::pair<JobOutcome, std::string_view>, 9> k_outcomes = {
    {{JobOutcome::none, "none"},
     {JobOutcome::decided, "decided"},
     {JobOutcome::rejected, "rejected"},
     {JobOutcome::timeout, "timeout"},
     {JobOutcome::queue_limit, "queue_limit"},
     {JobOutcome::died, "died"},
     {JobOutcome::cancelled, "cancelled"},
     {JobOutcome::failed, "failed"},
     {JobOutcome::node_unfit, "node_unfit"}}};

template <typename E, size_t N>
std::string_view name_of(const std::array<std::pair<E, std::string_view>, N>& table, E e) {
  for (const auto& [v, n] : table) {
    if (v == e) return n;
  }
  return "?";
}

template <typename E, size_t N>
std::optional<E> value_of(const std::array<std::pair<E, std::string_view>, N>& table, std::string_view s) {
  for (const auto& [v, n] : table) {
    if (n == s) return v;
  }
  return std::nullopt;
}

// A field the state must have, as a DataError naming it: the file is kwb's own, so a missing field means a file
// someone edited or another kwb wrote.
template <typename T>
T field(const nlohmann::json& j, const char* name) {
  if (!j.contains(name)) throw DataError(fmt::format("campaign.json: a job has no field '{}'", name));
  try {
    return j.at(name).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw DataError(fmt::format("campaign.json: a job's field '{}' has the wrong type", name));
  }
}

}  // namespace

std::string_view to_string(JobPhase p) { return name_of(k_phases, p); }
std::string_view to_string(JobOutcome o) { return name_of(k_outcomes, o); }
std::optional<JobPhase> parse_job_phase(std::string_view s) { return value_of(k_phases, s); }
std::optional<JobOutcome> parse_job_outcome(std::string_view s) { return value_of(k_outcomes, s); }

Job* CampaignState::find(const std::string& key) {
  for (Job& j : jobs) {
    if (j.key == key) return &j;
  }
  return nullptr;
}

nlohmann::json to_json(const Job& j) {
  nlohmann::json earlier = nlohmann::json::array();
  for (const JobAttempt& a : j.earlier) {
    earlier.push_back({{"attempt", a.attempt},
                       {"outcome", std::string(to_string(a.outcome))},
                       {"detail", a.detail},
                       {"bundle", a.bundle},
                       {"handle", a.handle}});
  }
  return {{"key", j.key},
          {"id", j.id},
          {"task", j.task},
          {"task_dir", j.task_dir},
          {"backend", std::string(to_string(j.backend))},
          {"candidate", j.candidate},
          {"candidate_sha256", j.candidate_sha256},
          {"baseline", j.baseline},
          {"baseline_sha256", j.baseline_sha256},
          {"settings", j.settings},
          {"current", j.current},
          {"attempt", j.attempt},
          {"phase", std::string(to_string(j.phase))},
          {"outcome", std::string(to_string(j.outcome))},
          {"executor", j.executor},
          {"handle", j.handle},
          {"bundle", j.bundle},
          {"nonce", j.nonce},
          {"submitted", j.submitted},
          {"started", j.started},
          {"ended", j.ended},
          {"queued_seconds", j.queued_s},
          {"ran_seconds", j.ran_s},
          {"submitted_unix", j.submitted_unix},
          {"started_unix", j.started_unix},
          {"stop_sent_unix", j.stop_sent_unix},
          {"stopping", j.stopping},
          {"exit_code", j.exit_code ? nlohmann::json(*j.exit_code) : nlohmann::json(nullptr)},
          {"scheduler_state", j.scheduler_state},
          {"scheduler_reason", j.scheduler_reason},
          {"decision", j.decision},
          {"detail", j.detail},
          {"manifest_sha256", j.manifest_sha256},
          {"workloads", to_json(j.workloads)},
          {"node", j.node},
          {"host", j.host},
          {"machine", j.machine},
          {"signer", j.signer},
          {"waiting", j.waiting},
          {"accounting", j.accounting},
          {"earlier", earlier}};
}

Job job_from_json(const nlohmann::json& j) {
  Job out;
  out.key = field<std::string>(j, "key");
  out.id = field<std::string>(j, "id");
  out.task = field<std::string>(j, "task");
  out.task_dir = field<std::string>(j, "task_dir");
  out.backend = parse_backend_field(field<std::string>(j, "backend"), "campaign.json backend");
  out.candidate = field<std::string>(j, "candidate");
  out.candidate_sha256 = field<std::string>(j, "candidate_sha256");
  out.baseline = field<std::string>(j, "baseline");
  out.baseline_sha256 = field<std::string>(j, "baseline_sha256");
  out.settings = field<std::string>(j, "settings");
  out.current = field<bool>(j, "current");
  out.attempt = field<int>(j, "attempt");
  const std::optional<JobPhase> phase = parse_job_phase(field<std::string>(j, "phase"));
  const std::optional<JobOutcome> outcome = parse_job_outcome(field<std::string>(j, "outcome"));
  if (!phase || !outcome) throw DataError("campaign.json: a job's phase or outcome is not one kwb writes");
  out.phase = *phase;
  out.outcome = *outcome;
  out.executor = field<std::string>(j, "executor");
  out.handle = field<std::string>(j, "handle");
  out.bundle = field<std::string>(j, "bundle");
  // A state written before attempts had nonces: its attempts ran without one, and their bundles' command lines
  // carry none either (campaign.json is sealed, so a nonce cannot be removed from a newer one).
  out.nonce = j.contains("nonce") ? field<std::string>(j, "nonce") : std::string();
  out.submitted = field<std::string>(j, "submitted");
  out.started = field<std::string>(j, "started");
  out.ended = field<std::string>(j, "ended");
  out.queued_s = field<double>(j, "queued_seconds");
  out.ran_s = field<double>(j, "ran_seconds");
  out.submitted_unix = field<double>(j, "submitted_unix");
  out.started_unix = field<double>(j, "started_unix");
  out.stop_sent_unix = field<double>(j, "stop_sent_unix");
  out.stopping = field<std::string>(j, "stopping");
  if (j.contains("exit_code") && j["exit_code"].is_number_integer()) out.exit_code = j["exit_code"].get<int>();
  out.scheduler_state = field<std::string>(j, "scheduler_state");
  out.scheduler_reason = field<std::string>(j, "scheduler_reason");
  out.decision = field<std::string>(j, "decision");
  out.detail = field<std::string>(j, "detail");
  out.manifest_sha256 = field<std::string>(j, "manifest_sha256");
  out.workloads = workloads_from_json(j.value("workloads", nlohmann::json::array()));
  // Where it ran and what it waits for: absent from a state written before they were recorded.
  const std::pair<const char*, std::string*> where[] = {{"node", &out.node},
                                                        {"host", &out.host},
                                                        {"machine", &out.machine},
                                                        {"signer", &out.signer},
                                                        {"waiting", &out.waiting}};
  for (const auto& [name, to] : where) {
    if (j.contains(name)) *to = field<std::string>(j, name);
  }
  if (j.contains("accounting")) out.accounting = field<std::map<std::string, std::string>>(j, "accounting");
  for (const nlohmann::json& a : j.value("earlier", nlohmann::json::array())) {
    out.earlier.push_back(
        {field<int>(a, "attempt"), parse_job_outcome(field<std::string>(a, "outcome")).value_or(JobOutcome::none),
         field<std::string>(a, "detail"), field<std::string>(a, "bundle"), field<std::string>(a, "handle")});
  }
  return out;
}

std::filesystem::path state_path(const std::filesystem::path& storage) { return storage / "campaign.json"; }

CampaignState load_state(const std::filesystem::path& storage) {
  CampaignState s;
  const std::filesystem::path path = state_path(storage);
  if (!std::filesystem::exists(path)) return s;
  const nlohmann::json j = nlohmann::json::parse(read_file(path), nullptr, false);
  if (!j.is_object() || j.value("schema", "") != "kwb.campaign") {
    throw DataError(
        fmt::format("{}: not a kwb campaign state (schema kwb.campaign): move it away, or name another "
                    "storage folder",
                    path.string()));
  }
  if (j.value("schema_version", 0) != CampaignState::k_schema_version) {
    throw DataError(fmt::format("{}: schema_version {} (this kwb reads {}): use the kwb that wrote it", path.string(),
                                j.value("schema_version", 0), CampaignState::k_schema_version));
  }
  if (const std::string why = sealed_json_problem(j, "kwb.campaign", trusted_keys()); !why.empty()) {
    throw DataError(
        fmt::format("{}: not believed: {}. kwb campaign seals this record with the machine key each time "
                    "it writes it, so status, report and a resumed run never act on an edited one; "
                    "restore it from a copy, or move the storage folder away and run the campaign again",
                    path.string(), why));
  }
  s.name = j.value("name", "");
  s.campaign_file = j.value("campaign_file", "");
  s.updated = j.value("updated", "");
  try {
    for (const nlohmann::json& job : j.at("jobs")) s.jobs.push_back(job_from_json(job));
  } catch (const DataError& e) {
    throw DataError(fmt::format("{}: {}", path.string(), e.what()));
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{}: {}", path.string(), e.what()));
  }
  return s;
}

void save_state(const std::filesystem::path& storage, CampaignState& state) {
  std::filesystem::create_directories(storage);
  state.updated = utc_now_text();
  nlohmann::json jobs = nlohmann::json::array();
  for (const Job& j : state.jobs) jobs.push_back(to_json(j));
  const nlohmann::json doc = {{"schema", "kwb.campaign"}, {"schema_version", CampaignState::k_schema_version},
                              {"name", state.name},       {"campaign_file", state.campaign_file},
                              {"updated", state.updated}, {"jobs", jobs}};
  write_file_atomic(state_path(storage), json_text(sealed_json(doc, "kwb.campaign", machine_key()), 2) + "\n");
}

}  // namespace kwb
