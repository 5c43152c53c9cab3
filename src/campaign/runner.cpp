#include "campaign/runner.h"

#include "ledger/bundle_entry.h"
#include "ledger/ledger.h"
#include "task/task.h"
#include "util/data_secret.h"
#include "util/error.h"
#include "util/interrupt.h"
#include "util/sha256.h"
#include "util/timing_lock.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>

namespace kwb {

namespace fs = std::filesystem;

namespace {

void nap(double seconds) { nap_seconds(seconds); }

// A name that is safe as one path component: letters, digits, '-', '_' and '.' only.
std::string component(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_';
  return out.empty() ? "_" : out.substr(0, 48);
}

std::string settings_text(const Campaign& c) {
  std::vector<std::string> parts = {fmt::format("--backend {}", c.backend)};
  for (const ValidateFlag& f : c.validate) parts.push_back(f.value.empty() ? f.flag : f.flag + " " + f.value);
  return fmt::format("{}", fmt::join(parts, " "));
}

// The baseline a job compares against, resolved now, as the source file to give validate ("" for the task's own)
// and its SHA-256. For the incumbent, the ledger's latest generation (ledger/bundle_entry.h finds its source, or its
// bundle's copy when the file changed since it was kept); the task's own baseline while nothing was kept. The
// campaign resolves it because the job runs validate with KWB_LEDGER=none, where --against incumbent would find no
// ledger.
std::pair<std::string, std::string> resolve_baseline(const CampaignTask& t, const Task& task, BackendKind backend) {
  const fs::path declared = task.backends.at(backend).baseline;
  if (t.baseline.empty()) return {"", sha256_file(declared)};
  if (t.baseline != "incumbent") return {t.baseline, sha256_file(t.baseline)};
  const std::optional<fs::path> ledger = ledger_path(task.dir);
  if (ledger && fs::is_regular_file(*ledger)) {
    const std::vector<Incumbent> line = Ledger::open(*ledger).lineage(task.identity, backend);
    if (line.size() > 1) {
      const IncumbentSource src = incumbent_source_file(line, line.size() - 1);
      return {src.path.string(), line.back().source_sha256};
    }
  }
  return {"", sha256_file(declared)};
}

std::string tail_of(const fs::path& file, size_t lines) {
  std::ifstream in(file);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) {
    if (!l.empty()) all.push_back(l);
  }
  const size_t from = all.size() > lines ? all.size() - lines : 0;
  return fmt::format("{}", fmt::join(all.begin() + static_cast<std::ptrdiff_t>(from), all.end(), " | "));
}

bool decided(const Job& j) { return j.phase == JobPhase::ended && j.outcome == JobOutcome::decided; }

// What a node lacked, from the doctor.json its job left ("" when it left none, or the node was fit): the node, each
// missing piece with why and the fix.
std::string node_unfit(const fs::path& doctor_json, const std::string& node) {
  std::error_code ec;
  if (!fs::is_regular_file(doctor_json, ec)) return "";
  std::ifstream in(doctor_json);
  const nlohmann::json d = nlohmann::json::parse(in, nullptr, false);
  if (!d.is_object() || d.value("schema", "") != "kwb.doctor" || d.value("fit", true)) return "";
  std::vector<std::string> pieces;
  for (const nlohmann::json& c : d.value("checks", nlohmann::json::array())) {
    if (!c.is_object() || c.value("ok", true) || !c.value("required", true)) continue;
    pieces.push_back(fmt::format("{}: {} (fix: {})", c.value("piece", "?"), c.value("detail", ""), c.value("fix", "")));
  }
  const std::string host = d.value("host", "");
  return fmt::format(
      "the node {} cannot run kwb validate, the node's fault and not the candidate's: {}; the job runs again with the "
      "next kwb campaign run (fix the node, or leave it out with executor.exclude)",
      node.empty() ? host : node, fmt::join(pieces, "; "));
}

// What a running job waits for, from the last line its validate wrote (its stderr.log's last 4 KiB): "the timing
// lock: held by ..." while validate waits for the node's timing lock (cli/progress.cpp's notice), else "".
std::string waiting_for(const fs::path& stderr_log) {
  std::ifstream in(stderr_log, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 4096);
  in.seekg(from);
  std::string tail(static_cast<size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
  const std::string line = tail.substr(tail.rfind('\n') == std::string::npos ? 0 : tail.rfind('\n') + 1);
  const size_t at = line.find("waiting for the timing lock");
  if (at == std::string::npos) return "";
  const size_t held = line.find("held by ", at);
  return held == std::string::npos ? "the timing lock" : "the timing lock: " + line.substr(held);
}

std::string attempt_folder(const fs::path& storage, const Job& j, int attempt) {
  return (storage / "jobs" / j.id / fmt::format("attempt-{}", attempt)).string();
}

// The loop of run_campaign, one named step per member.
class Loop {
public:
  Loop(const Campaign& c, Executor& ex, const RunnerHooks& hooks)
      : m_c(c), m_ex(ex), m_hooks(hooks), m_kwb(fs::read_symlink("/proc/self/exe")) {}

  RunSummary run(RunMode mode) {
    m_state = load_state(m_c.storage);
    m_state.name = m_c.name;
    m_state.campaign_file = m_c.file.string();
    plan();
    if (mode == RunMode::plan_only) {
      save();
      RunSummary s = summary();
      s.submission = describe_ready();
      return s;
    }
    adopt();
    save();
    try {
      while (step()) nap(m_c.poll_seconds > 0 ? m_c.poll_seconds : m_ex.poll_seconds());
    } catch (const Interrupted&) {
      interrupted();
      throw;
    }
    return summary();
  }

private:
  // plan: the jobs of the file, matched with the state by key; jobs the file no longer has are kept, not current.
  void plan() {
    for (Job& j : m_state.jobs) j.current = false;
    std::set<std::string> keys;
    for (Job& p : plan_jobs(m_c)) {
      // Two candidates with the same bytes are one job: the same identity, the same decision.
      if (!keys.insert(p.key).second) {
        say(fmt::format("{}: the same source as another candidate of the task: judged once", p.candidate));
        continue;
      }
      ++m_summary.planned;
      Job* known = m_state.find(p.key);
      if (known == nullptr) {
        m_state.jobs.push_back(std::move(p));
        continue;
      }
      known->current = true;
      if (decided(*known)) {
        ++m_summary.skipped;
        say(fmt::format("{}: decided earlier ({}), same identity and settings: skipped", known->id, known->decision));
      }
    }
  }

  // adopt: what an earlier campaign process left queued or running.
  void adopt() {
    for (Job& j : m_state.jobs) {
      if (!j.current || (j.phase != JobPhase::queued && j.phase != JobPhase::running)) continue;
      if (j.executor == to_string(m_ex.kind()) && m_ex.jobs_outlive_campaign()) {
        say(fmt::format("{}: {} job {} from an earlier campaign process: polled again", j.id, j.executor, j.handle));
        m_tried.insert(j.key);  // this run's attempt of it
        continue;
      }
      // A local job died with that process: recorded as such, and run again by this one.
      JobProbe gone;
      gone.where = JobProbe::Where::ended;
      gone.signal = SIGKILL;
      gone.detail = "the campaign process that ran it ended while it ran";
      end(j, gone);
    }
  }

  // One pass: submit what fits, poll what runs, and fill the slots that freed at once. False when nothing is left.
  bool step() {
    submit_ready();
    poll_active();
    submit_ready();
    return active_count() > 0;
  }

  size_t active_count() const {
    return static_cast<size_t>(std::count_if(m_state.jobs.begin(), m_state.jobs.end(), [](const Job& j) {
      return j.current && (j.phase == JobPhase::queued || j.phase == JobPhase::running);
    }));
  }

  // Jobs to run: current, not decided, not yet tried by this process (a job that failed here waits for the next
  // run). As many as there are free slots, submitted as one wave (on Slurm, one array).
  void submit_ready() {
    const size_t active = active_count();
    if (active >= m_ex.slots()) return;
    std::vector<Job*> wave;
    for (Job& j : m_state.jobs) {
      if (active + wave.size() >= m_ex.slots()) break;
      if (!j.current || decided(j) || j.phase == JobPhase::queued || j.phase == JobPhase::running ||
          m_tried.contains(j.key)) {
        continue;
      }
      m_tried.insert(j.key);
      if (examine_leftover(j)) continue;
      new_attempt(j);
      wave.push_back(&j);
    }
    if (!wave.empty()) submit(wave);
  }

  void new_attempt(Job& j) {
    if (j.attempt > 0) j.earlier.push_back({j.attempt, j.outcome, j.detail, j.bundle, j.handle});
    ++j.attempt;
    j.phase = JobPhase::waiting;
    j.outcome = JobOutcome::none;
    j.executor = std::string(to_string(m_ex.kind()));
    j.handle.clear();
    j.submitted.clear();
    j.started.clear();
    j.ended.clear();
    j.queued_s = j.ran_s = 0.0;
    j.submitted_unix = j.started_unix = j.stop_sent_unix = 0.0;
    j.stopping.clear();
    j.exit_code.reset();
    j.scheduler_state.clear();
    j.scheduler_reason.clear();
    j.decision.clear();
    j.detail.clear();
    j.manifest_sha256.clear();
    j.workloads.clear();
    j.bundle = (fs::path(attempt_folder(m_c.storage, j, j.attempt)) / "bundle").string();
    j.nonce = DataSecret::draw().hex();
  }

  // A bundle already in the folder of an attempt that never ran (dropped there, or left by a campaign killed between
  // starting the attempt and recording it): examined like any job's, so it is rejected evidence (no run of this
  // attempt made it: it cannot carry the attempt's nonce), recorded, and never overwritten or trusted unseen.
  bool examine_leftover(Job& j) {
    const fs::path next = fs::path(attempt_folder(m_c.storage, j, j.attempt + 1)) / "bundle";
    if (!fs::exists(next)) return false;
    new_attempt(j);
    j.executor = "none";
    JobProbe found;
    found.where = JobProbe::Where::ended;
    found.detail = "a bundle was already in the attempt's folder before it ran";
    say(fmt::format("{}: a bundle is already at {}: examining it", j.id, j.bundle));
    end(j, found);
    return j.outcome == JobOutcome::decided;
  }

  void submit(const std::vector<Job*>& wave) {
    std::vector<JobLaunch> launches;
    for (Job* j : wave) {
      launches.push_back(launch_of(*j));
      fs::create_directories(launches.back().attempt_dir);
      j->submitted = utc_now_text();
      j->submitted_unix = wall_seconds_now();
    }
    std::vector<std::string> handles;
    try {
      handles = m_ex.submit_all(launches);
    } catch (const Error& e) {
      for (Job* j : wave) {
        j->phase = JobPhase::ended;
        j->outcome = JobOutcome::failed;
        j->ended = utc_now_text();
        j->detail = fmt::format("not started: {}", e.what());
        say(fmt::format("{}: {}", j->id, j->detail));
      }
      save();
      return;
    }
    for (size_t i = 0; i < wave.size(); ++i) {
      Job& j = *wave[i];
      j.handle = handles.at(i);
      ++m_summary.started;
      j.phase = m_ex.kind() == ExecutorKind::local ? JobPhase::running : JobPhase::queued;
      if (j.phase == JobPhase::running) {
        j.started = j.submitted;
        j.started_unix = j.submitted_unix;
      }
      say(fmt::format("{}: attempt {} submitted ({} {}): {} against {}", j.id, j.attempt, j.executor, j.handle,
                      j.candidate, j.baseline.empty() ? "the task's baseline" : j.baseline));
    }
    save();
  }

  // What the executor would submit for the jobs still to decide, as a dry run shows it (nothing is changed).
  std::string describe_ready() const {
    std::vector<JobLaunch> launches;
    for (const Job& j : m_state.jobs) {
      if (!j.current || decided(j)) continue;
      Job next = j;
      ++next.attempt;
      next.bundle = (fs::path(attempt_folder(m_c.storage, next, next.attempt)) / "bundle").string();
      next.nonce = std::string(64, 'N');  // drawn when the attempt is made: its place, shown
      launches.push_back(launch_of(next));
    }
    return m_ex.describe_submission(launches);
  }

  JobLaunch launch_of(const Job& j) const {
    JobLaunch l;
    l.name = fmt::format("kwb-{}-{}", component(m_c.name), j.id);
    l.attempt_dir = attempt_folder(m_c.storage, j, j.attempt);
    l.validate = validate_command_line(m_c, j, m_kwb, j.bundle);
    l.run_limit_s = m_c.run_limit_minutes * 60.0;
    l.backend = j.backend;
    if (m_ex.kind() == ExecutorKind::slurm) {
      l.doctor = doctor_command_line(m_c, j, m_kwb);
      // In a container, what the job reads and writes is bound at the same path: the storage, the task, the
      // sources and kwb's own folder (its worker beside it).
      std::vector<fs::path> binds = {m_c.storage, j.task_dir, fs::path(j.candidate).parent_path(), m_kwb.parent_path()};
      if (!j.baseline.empty()) binds.push_back(fs::path(j.baseline).parent_path());
      l.container = container_prefix(m_c.slurm, binds, l.attempt_dir);
    }
    return l;
  }

  // Every job in flight, in one query of the executor (on Slurm one squeue, and one sacct for those that ended).
  void poll_active() {
    std::vector<Job*> active;
    std::vector<ActiveJob> query;
    for (Job& j : m_state.jobs) {
      if (!j.current || (j.phase != JobPhase::queued && j.phase != JobPhase::running)) continue;
      active.push_back(&j);
      query.push_back({j.handle, launch_of(j)});
    }
    if (active.empty()) return;
    const std::vector<JobProbe> probes = m_ex.probe_all(query);
    for (size_t i = 0; i < active.size(); ++i) poll(*active[i], probes.at(i));
    if (m_dirty) save();
    m_dirty = false;
  }

  // One job's probe: its start, its end, its limits. A start or a change of Slurm's state is saved once per poll
  // (poll_active); an end at once.
  void poll(Job& j, const JobProbe& p) {
    const double now = wall_seconds_now();
    if (p.stale) {  // the scheduler did not answer: nothing changed, but the limits still run on the wall clock
      enforce_limits(j, now);
      return;
    }
    const bool changed = p.scheduler_state != j.scheduler_state || p.scheduler_reason != j.scheduler_reason ||
                         (!p.node.empty() && p.node != j.node);
    j.scheduler_state = p.scheduler_state;
    j.scheduler_reason = p.scheduler_reason;
    if (!p.node.empty()) j.node = p.node;
    if (p.where == JobProbe::Where::ended) {
      end(j, p);
      return;
    }
    if (p.where == JobProbe::Where::running) {
      const std::string waiting = waiting_for(fs::path(j.bundle).parent_path() / "stderr.log");
      if (waiting != j.waiting) {
        j.waiting = waiting;
        m_dirty = true;
      }
    }
    if (p.where == JobProbe::Where::running && j.phase == JobPhase::queued) {
      j.phase = JobPhase::running;
      j.started = utc_now_text();
      j.started_unix = now;
      j.queued_s = now - j.submitted_unix;
      say(fmt::format("{}: running ({} {}{}, queued {:.1f} s)", j.id, j.executor, j.handle,
                      j.node.empty() ? "" : " on " + j.node, j.queued_s));
      m_dirty = true;
    } else if (changed) {
      m_dirty = true;
    }
    enforce_limits(j, now);
  }

  // The queue limit and the run limit; a job asked to stop and still there 30 s later is asked again (the local
  // executor then kills it).
  void enforce_limits(Job& j, double now) {
    const double queue_limit_s = m_c.queue_limit_minutes * 60.0;
    const double run_limit_s = m_c.run_limit_minutes * 60.0 + m_ex.grace_seconds();
    std::string why;
    if (j.phase == JobPhase::queued && now - j.submitted_unix > queue_limit_s) why = "queue_limit";
    if (j.phase == JobPhase::running && now - j.started_unix > run_limit_s) why = "run_limit";
    if (why.empty()) return;
    if (j.stopping.empty()) {
      j.stopping = why;
      j.stop_sent_unix = now;
      say(fmt::format("{}: past the {} ({}): cancelling {} {}", j.id,
                      why == "queue_limit" ? "queue limit" : "run limit",
                      why == "queue_limit" ? fmt::format("{} min", m_c.queue_limit_minutes)
                                           : fmt::format("{} min", m_c.run_limit_minutes),
                      j.executor, j.handle));
      m_ex.cancel(j.handle);
      save();
    } else if (now - j.stop_sent_unix > 30.0) {
      j.stop_sent_unix = now;
      m_ex.cancel(j.handle);
    }
  }

  // judge: the ended job's outcome, and its bundle into the ledger when accepted.
  void end(Job& j, const JobProbe& p) {
    const double now = wall_seconds_now();
    if (j.started_unix > 0) j.ran_s = now - j.started_unix;
    j.phase = JobPhase::ended;
    j.ended = utc_now_text();
    j.waiting.clear();
    j.exit_code = p.exit_code;
    if (!p.scheduler_state.empty()) j.scheduler_state = p.scheduler_state;
    if (!p.scheduler_reason.empty()) j.scheduler_reason = p.scheduler_reason;
    if (!p.node.empty()) j.node = p.node;
    j.accounting = p.accounting;
    const Evidence e = examine_bundle(j.bundle, j, validate_command_line(m_c, j, m_kwb, j.bundle));
    const fs::path attempt_dir = fs::path(j.bundle).parent_path();
    Judgement verdict = judge(p, e, j.stopping, tail_of(attempt_dir / "stderr.log", 2));
    if (e.verdict == Evidence::Verdict::absent) {
      if (const std::string unfit = node_unfit(attempt_dir / "doctor.json", j.node); !unfit.empty()) {
        verdict = {JobOutcome::node_unfit, unfit};
      }
    }
    j.outcome = verdict.outcome;
    j.detail = verdict.detail;
    if (j.outcome == JobOutcome::decided) {
      j.decision = e.decision;
      j.manifest_sha256 = e.manifest_sha256;
      j.workloads = e.workloads;
      j.machine = e.machine;
      j.host = e.host;
      j.signer = e.signer;
      if (m_hooks.record_accepted) m_hooks.record_accepted(j.bundle, e.manifest_sha256);
    }
    say(fmt::format("{}: {}{} — {}", j.id, to_string(j.outcome), j.decision.empty() ? "" : " " + j.decision, j.detail));
    // A decision is saved at once: its bundle is in the ledger now, and the state must say so before anything else
    // can go wrong. Any other end is saved with the poll cycle's other changes (poll_active), so a wave of 1000 jobs
    // ending together is not 1000 rewrites of the state; a campaign killed before that save polls those jobs again.
    if (j.outcome == JobOutcome::decided) {
      save();
    } else {
      m_dirty = true;
    }
  }

  // The campaign was interrupted (kwb campaign cancel, Ctrl-C): the local job died with the handler's kill; a
  // Slurm job runs on, for `cancel` to scancel or a resumed run to poll.
  void interrupted() {
    for (Job& j : m_state.jobs) {
      if (!j.current || (j.phase != JobPhase::queued && j.phase != JobPhase::running)) continue;
      if (m_ex.jobs_outlive_campaign()) continue;
      j.phase = JobPhase::ended;
      j.outcome = JobOutcome::cancelled;
      j.ended = utc_now_text();
      j.detail = fmt::format("the campaign was interrupted by {} while it ran", signal_name(interrupt_signal()));
    }
    save();
  }

  RunSummary summary() const {
    RunSummary s = m_summary;
    for (const Job& j : m_state.jobs) {
      if (!j.current) continue;
      ++s.outcomes[j.outcome == JobOutcome::decided ? j.decision : std::string(to_string(j.outcome))];
    }
    return s;
  }

  void save() { save_state(m_c.storage, m_state); }
  void say(const std::string& line) const {
    if (m_hooks.say) m_hooks.say(line);
  }

  const Campaign& m_c;
  Executor& m_ex;
  const RunnerHooks& m_hooks;
  fs::path m_kwb;
  CampaignState m_state;
  RunSummary m_summary;
  std::set<std::string> m_tried;
  bool m_dirty = false;  // a poll changed something worth saving
};

}  // namespace

std::string task_digest(const fs::path& task_dir) {
  std::vector<std::pair<std::string, std::string>> files;
  for (auto it = fs::recursive_directory_iterator(task_dir); it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_directory() && it->path().filename() == ".kwb") {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) {
      files.emplace_back(it->path().lexically_relative(task_dir).string(), sha256_file(it->path()));
    }
  }
  std::sort(files.begin(), files.end());
  Sha256 h;
  for (const auto& [path, digest] : files) h.update(fmt::format("{} {}\n", digest, path));
  return h.hex_digest();
}

std::string job_key(const std::string& task_digest, BackendKind backend, const std::string& baseline_sha256,
                    const std::string& candidate_sha256, const std::string& settings) {
  return sha256_hex(fmt::format("kwb campaign job v1\ntask {}\nbackend {}\nbaseline {}\ncandidate {}\nsettings {}\n",
                                task_digest, backend, baseline_sha256, candidate_sha256, settings));
}

std::vector<Job> plan_jobs(const Campaign& c) {
  std::vector<Job> out;
  const std::string settings = settings_text(c);
  for (const CampaignTask& t : c.tasks) {
    const Task task = load_task(t.dir);
    const std::string digest = task_digest(t.dir);
    const auto [baseline, baseline_sha] = resolve_baseline(t, task, c.backend);
    for (const fs::path& cand : t.candidates) {
      Job j;
      j.task = task.name;
      j.task_dir = t.dir.string();
      j.backend = c.backend;
      j.candidate = cand.string();
      j.candidate_sha256 = sha256_file(cand);
      j.baseline = baseline;
      j.baseline_sha256 = baseline_sha;
      j.settings = settings;
      j.key = job_key(digest, c.backend, baseline_sha, j.candidate_sha256, settings);
      j.id = fmt::format("{}-{}-{}", component(task.name), component(cand.stem().string()), j.key.substr(0, 10));
      out.push_back(std::move(j));
    }
  }
  return out;
}

std::vector<std::string> doctor_command_line(const Campaign& c, const Job& job, const fs::path& kwb) {
  std::vector<std::string> a = {kwb.string(), "doctor",     "--backend", std::string(to_string(c.backend)),
                                "--task",     job.task_dir, "--file",    job.candidate};
  if (!job.baseline.empty()) a.insert(a.end(), {"--file", job.baseline});
  a.insert(a.end(), {"--storage", c.storage.string()});
  for (const ValidateFlag& f : c.validate) {
    if (f.flag == "--no-profile") a.push_back("--no-profile");
  }
  a.push_back("--json");
  return a;
}

std::vector<std::string> validate_command_line(const Campaign& c, const Job& job, const fs::path& kwb,
                                               const fs::path& bundle) {
  std::vector<std::string> a = {kwb.string(), "validate", job.task_dir, "--candidate", job.candidate, "--output-dir",
                                bundle.string(), "--backend", std::string(to_string(c.backend)),
                                // Waiting for the timing lock is this machine's queue.
                                "--lock-timeout", fmt::format("{}", c.queue_limit_minutes * 60.0)};
  if (!job.baseline.empty()) a.insert(a.end(), {"--baseline", job.baseline});
  if (!job.nonce.empty()) a.insert(a.end(), {"--job-nonce", job.nonce});
  for (const ValidateFlag& f : c.validate) {
    a.push_back(f.flag);
    if (!f.value.empty()) a.push_back(f.value);
  }
  a.push_back("--json");
  return a;
}

Judgement judge(const JobProbe& p, const Evidence& e, const std::string& stopping, const std::string& stderr_tail) {
  const std::string slurm = p.scheduler_state.empty()
                                ? ""
                                : fmt::format(" (Slurm: {}, reason {})", p.scheduler_state,
                                              p.scheduler_reason.empty() ? "None" : p.scheduler_reason);
  if (stopping == "queue_limit") return {JobOutcome::queue_limit, "waited past the queue limit, cancelled" + slurm};
  if (e.verdict == Evidence::Verdict::accepted) {
    // The decision's own reason: "decided" already says the bundle verified, was signed by a trusted key and was
    // this job's, and was recorded in the ledger (docs/campaigns.md).
    return {JobOutcome::decided, e.reason.empty() ? "recorded in the ledger" : e.reason};
  }
  if (e.verdict == Evidence::Verdict::rejected) return {JobOutcome::rejected, "rejected evidence: " + e.detail};
  const int rc = p.exit_code.value_or(-1);
  if (stopping == "run_limit" || rc == 124 || rc == 137 || p.scheduler_state == "TIMEOUT") {
    return {JobOutcome::timeout,
            fmt::format("past the run limit{}{}", rc >= 0 ? fmt::format(", exit {}", rc) : "", slurm)};
  }
  if (stopping == "cancel" || p.scheduler_state == "CANCELLED") return {JobOutcome::cancelled, "cancelled" + slurm};
  if (rc == static_cast<int>(ExitCode::lock_timeout)) {
    return {JobOutcome::queue_limit, "waited past the queue limit for this machine's timing lock (exit 75)" + slurm};
  }
  if (rc < 0 || p.signal != 0 || rc >= 128) {
    std::string why = p.detail.empty() ? "it ended without an exit status" : p.detail;
    if (p.signal != 0) why = fmt::format("{} (signal {})", p.detail.empty() ? "killed" : p.detail, p.signal);
    if (rc >= 128) why = fmt::format("kwb validate ended by signal {} (exit {})", rc - 128, rc);
    return {JobOutcome::died, why + slurm};
  }
  return {JobOutcome::failed, fmt::format("kwb validate exited {} without a decision{}: {}", rc, slurm,
                                          stderr_tail.empty() ? e.detail : stderr_tail)};
}

CampaignLock CampaignLock::acquire(const fs::path& storage) {
  fs::create_directories(storage);
  const fs::path path = storage / "campaign.lock";
  CampaignLock lock;
  lock.m_fd = UniqueFd(KWB_POSIX_CALL(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644)));
  if (::flock(lock.m_fd.get(), LOCK_EX | LOCK_NB) != 0) {
    const std::optional<int> pid = holder(storage);
    throw Error(ExitCode::lock_timeout,
                fmt::format("{}: another kwb campaign (pid {}) is running on this storage folder: wait for it, or "
                            "stop it with kwb campaign cancel",
                            path.string(), pid ? std::to_string(*pid) : "unknown"));
  }
  // The holder's pid, for `cancel` and for the message of a second `run`; only a note, so a failed write is not fatal.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock.m_fd.get(), 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(lock.m_fd.get(), pid.data(), pid.size(), 0);
  }
  return lock;
}

std::optional<int> CampaignLock::holder(const fs::path& storage) {
  const fs::path path = storage / "campaign.lock";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  const UniqueFd owned(fd);
  if (::flock(fd, LOCK_SH | LOCK_NB) == 0) return std::nullopt;  // nobody holds it
  std::ifstream in(path);
  int pid = 0;
  if (in >> pid && pid > 0) return pid;
  return std::nullopt;
}

RunSummary run_campaign(const Campaign& c, Executor& executor, const RunnerHooks& hooks, RunMode mode) {
  const CampaignLock lock = CampaignLock::acquire(c.storage);
  Loop loop(c, executor, hooks);
  return loop.run(mode);
}

size_t cancel_campaign(const fs::path& storage, Executor& slurm, const RunnerHooks& hooks) {
  // Counted before the campaign process is stopped: it records its own local job as cancelled on the way out.
  const CampaignState before = load_state(storage);
  const size_t active = static_cast<size_t>(std::count_if(before.jobs.begin(), before.jobs.end(), [](const Job& j) {
    return j.phase == JobPhase::queued || j.phase == JobPhase::running;
  }));
  if (const std::optional<int> pid = CampaignLock::holder(storage)) {
    if (hooks.say) hooks.say(fmt::format("stopping the campaign process {} (SIGTERM)", *pid));
    ::kill(*pid, SIGTERM);
    for (int i = 0; i < 300 && CampaignLock::holder(storage); ++i) nap(0.1);
  }
  const CampaignLock lock = CampaignLock::acquire(storage);
  CampaignState state = load_state(storage);
  std::vector<std::string> handles;  // one scancel for them all
  for (Job& j : state.jobs) {
    if (j.phase != JobPhase::queued && j.phase != JobPhase::running) continue;
    if (j.executor == "slurm") {
      handles.push_back(j.handle);
      if (hooks.say) hooks.say(fmt::format("{}: scancel {}", j.id, j.handle));
    }
    j.phase = JobPhase::ended;
    j.outcome = JobOutcome::cancelled;
    j.stopping = "cancel";
    j.ended = utc_now_text();
    j.detail = "cancelled by kwb campaign cancel";
  }
  slurm.cancel_all(handles);
  save_state(storage, state);
  return active;
}

double wall_seconds_now() { return static_cast<double>(unix_now_ns()) / 1e9; }

void nap_seconds(double seconds) {
  timespec t{static_cast<time_t>(seconds), static_cast<long>((seconds - std::floor(seconds)) * 1e9)};
  ::nanosleep(&t, nullptr);
  throw_if_interrupted();
}

}  // namespace kwb
