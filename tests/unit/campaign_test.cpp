// kwb campaign without running anything: the campaign file's parser (every bad input a DataError, exit 65, naming
// the file, the line, the field and the fix), Slurm's command lines and answers, how an ended job is judged, the
// state's round trip, job identities, and the report.
#include "campaign/campaign_file.h"
#include "campaign/campaign_report.h"
#include "campaign/campaign_state.h"
#include "campaign/executor.h"
#include "campaign/runner.h"
#include "cli/commands.h"
#include "support/temp_dir.h"
#include "util/error.h"
#include "util/fs.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <set>

namespace kwb {
namespace {

namespace fs = std::filesystem;

const fs::path k_rmsnorm = fs::path(KWB_SOURCE_DIR) / "tasks" / "rmsnorm";

// A campaign folder with three candidate sources (two in cands/), and campaign.toml holding `text`.
class CampaignFile : public ::testing::Test {
protected:
  void SetUp() override {
    fs::create_directories(m_dir / "cands");
    for (const char* f : {"cands/a.cpp", "cands/b.cpp", "one.cpp", "cands/notes.txt"})
      write_file_atomic(m_dir / f, "x\n");
  }
  Campaign load(const std::string& text) {
    write_file_atomic(m_dir / "campaign.toml", text);
    return load_campaign(m_dir / "campaign.toml", cli::check_validate_flag);
  }
  // The message of the DataError `text` raises; fails the test when it raises none or another code.
  std::string error_of(const std::string& text) {
    try {
      (void)load(text);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::data_error) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no error for:\n" << text;
    return "";
  }
  std::string task_line() const { return "[[tasks]]\ndir = \"" + k_rmsnorm.string() + "\"\n"; }

  test::TempDir m_dir{"kwb-campaign-file"};
};

TEST_F(CampaignFile, a_campaign_names_files_folders_and_globs_relative_to_itself) {
  const Campaign c = load(
      "name = \"sweep\"\nrun_limit_minutes = 10\nqueue_limit_minutes = 2\n"
      "[validate]\nworkloads = [\"decode\"]\nmax_minutes = 0.5\nno_profile = true\ncold = false\n"
      "seed = 7\n" +
      task_line() + "candidates = [\"one.cpp\", \"cands/\", \"cands/*.cpp\"]\n");
  EXPECT_EQ(c.name, "sweep");
  EXPECT_EQ(c.storage, m_dir / "campaign.campaign");
  EXPECT_EQ(c.run_limit_minutes, 10.0);
  EXPECT_EQ(c.queue_limit_minutes, 2.0);
  EXPECT_EQ(c.executor, ExecutorKind::local);
  ASSERT_EQ(c.tasks.size(), 1u);
  EXPECT_EQ(c.tasks[0].name, "rmsnorm");
  // one.cpp, then the folder's sources sorted (not notes.txt); the glob adds nothing new.
  const std::vector<fs::path> want = {m_dir / "one.cpp", m_dir / "cands/a.cpp", m_dir / "cands/b.cpp"};
  EXPECT_EQ(c.tasks[0].candidates, want);
  std::vector<std::string> flags;
  for (const ValidateFlag& f : c.validate) flags.push_back(f.flag + "=" + f.value);
  const std::vector<std::string> want_flags = {"--workload=decode", "--max-minutes=0.5", "--seed=7", "--no-profile="};
  EXPECT_EQ(flags, want_flags);  // cold = false passes nothing
}

TEST_F(CampaignFile, an_unknown_key_is_named_with_its_line_and_the_keys_that_exist) {
  const std::string e = error_of("name = \"x\"\nrun_limit = 5\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(e.find("campaign.toml:2: run_limit: unknown key; the keys here are name, storage, run_limit_minutes"),
            std::string::npos)
      << e;
  const std::string v = error_of("[validate]\nmax_minute = 1\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(v.find("campaign.toml:2: validate.max_minute: unknown key"), std::string::npos) << v;
}

TEST_F(CampaignFile, a_campaign_without_tasks_or_candidates_says_what_to_add) {
  EXPECT_NE(error_of("name = \"x\"\n").find("tasks: no [[tasks]]: add one"), std::string::npos);
  const std::string e = error_of(task_line());
  EXPECT_NE(e.find("tasks[0].candidates: missing or empty"), std::string::npos) << e;
}

TEST_F(CampaignFile, candidates_that_match_nothing_are_refused_naming_the_entry) {
  const std::string glob = error_of(task_line() + "candidates = [\"cands/*.cu\"]\n");
  EXPECT_NE(glob.find(":3: tasks[0].candidates: the pattern 'cands/*.cu'"), std::string::npos) << glob;
  EXPECT_NE(glob.find("matches no file"), std::string::npos) << glob;
  const std::string file = error_of(task_line() + "candidates = [\"two.cpp\"]\n");
  EXPECT_NE(file.find("'two.cpp'"), std::string::npos) << file;
  EXPECT_NE(file.find("does not exist"), std::string::npos) << file;
  fs::create_directories(m_dir / "empty");
  const std::string folder = error_of(task_line() + "candidates = [\"empty\"]\n");
  EXPECT_NE(folder.find("holds no source file"), std::string::npos) << folder;
}

TEST_F(CampaignFile, a_task_folder_without_task_toml_is_refused) {
  const std::string e = error_of("[[tasks]]\ndir = \"cands\"\ncandidates = [\"one.cpp\"]\n");
  EXPECT_NE(e.find("campaign.toml:2: tasks[0].dir: 'cands'"), std::string::npos) << e;
  EXPECT_NE(e.find("holds no task.toml"), std::string::npos) << e;
}

TEST_F(CampaignFile, validate_values_are_checked_as_kwb_validate_checks_them) {
  const std::string range = error_of("[validate]\nmax_minutes = 1e9\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(range.find("campaign.toml:2: validate.max_minutes: --max-minutes must be a finite number from 0.001 to "
                       "10080"),
            std::string::npos)
      << range;
  const std::string type = error_of("[validate]\nrepetitions = 2.5\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(type.find("validate.repetitions: must be a whole number"), std::string::npos) << type;
  const std::string gate = error_of("[validate]\ngate = \"median\"\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(gate.find("--gate must be one of ci, point (got median)"), std::string::npos) << gate;
  const std::string backend =
      error_of("[validate]\nbackend = \"metal\"\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(backend.find("validate.backend: unknown backend 'metal'"), std::string::npos) << backend;
  const std::string workload =
      error_of("[validate]\nworkloads = [\"prefil\"]\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(workload.find("validate.workloads: task rmsnorm has no timing case 'prefil'"), std::string::npos)
      << workload;
}

TEST_F(CampaignFile, limits_out_of_range_or_of_the_wrong_type_are_refused) {
  const std::string text = error_of("run_limit_minutes = \"20\"\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(text.find("campaign.toml:1: run_limit_minutes: must be a number from 0.1 to 10080"), std::string::npos)
      << text;
  const std::string range = error_of("queue_limit_minutes = -1\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(range.find("queue_limit_minutes: -1 is out of range"), std::string::npos) << range;
}

TEST_F(CampaignFile, executor_options_are_checked_against_the_executor) {
  const std::string kind = error_of("[executor]\nkind = \"pbs\"\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(kind.find("executor.kind: unknown executor 'pbs' (expected local or slurm)"), std::string::npos) << kind;
  const std::string local =
      error_of("[executor]\nkind = \"local\"\npartition = \"gpu\"\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(local.find("campaign.toml:3: executor.partition: is a Slurm option, but executor.kind is local"),
            std::string::npos)
      << local;
  const std::string owned = error_of("[executor]\nkind = \"slurm\"\nsbatch_options = [\"--time=5\"]\n" + task_line() +
                                     "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(owned.find("'--time=5' is set by the campaign itself"), std::string::npos) << owned;
  const Campaign c = load(
      "[executor]\nkind = \"slurm\"\npartition = \"p\"\naccount = \"a\"\nsbatch_options = "
      "[\"--qos=high\"]\n" +
      task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_EQ(c.executor, ExecutorKind::slurm);
  EXPECT_EQ(c.slurm.partition, "p");
  EXPECT_EQ(c.slurm.sbatch_options, std::vector<std::string>{"--qos=high"});
}

TEST_F(CampaignFile, a_toml_syntax_error_names_its_line) {
  const std::string e = error_of("name = \"x\"\n[[tasks]\n");
  EXPECT_NE(e.find("campaign.toml:2: TOML syntax error"), std::string::npos) << e;
}

TEST_F(CampaignFile, a_changed_setting_or_source_is_a_new_job_identity) {
  const Campaign a = load(task_line() + "candidates = [\"one.cpp\"]\n");
  const Campaign b = load("[validate]\nmax_minutes = 0.5\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  const std::vector<Job> ja = plan_jobs(a), jb = plan_jobs(b);
  ASSERT_EQ(ja.size(), 1u);
  EXPECT_EQ(ja[0].key, plan_jobs(a)[0].key);  // stable
  EXPECT_NE(ja[0].key, jb[0].key);            // the settings are part of it
  write_file_atomic(m_dir / "one.cpp", "y\n");
  EXPECT_NE(plan_jobs(a)[0].key, ja[0].key);  // and the candidate's bytes
  EXPECT_EQ(ja[0].id.rfind("rmsnorm-one-", 0), 0u) << ja[0].id;
}

// ---- Slurm's side
// ----------------------------------------------------------------------------------------------------

JobLaunch launch(BackendKind backend) {
  JobLaunch l;
  l.name = "kwb-sweep-job";
  l.validate = {"/opt/kwb", "validate", "/t/rmsnorm", "--candidate", "/c/it's.cpp"};
  l.attempt_dir = "/s/jobs/x/attempt-1";
  l.run_limit_s = 90.0;
  l.backend = backend;
  return l;
}

TEST(campaign_slurm, sbatch_gets_the_run_limit_exclusivity_and_the_options_passed_through) {
  SlurmOptions o;
  o.partition = "debug";
  o.account = "lab";
  o.sbatch_options = {"--qos=high"};
  const std::vector<std::string> cpu = sbatch_argv(o, launch(BackendKind::cpu), "/s/job.sh");
  const std::vector<std::string> want = {"sbatch",
                                         "--parsable",
                                         "--exclusive",
                                         "--job-name=kwb-sweep-job",
                                         "--time=3",
                                         "--output=/s/jobs/x/attempt-1/slurm-%j.out",
                                         "--partition=debug",
                                         "--account=lab",
                                         "--qos=high",
                                         "/s/job.sh"};
  EXPECT_EQ(cpu, want);  // 90 s: two whole minutes, plus one so that timeout(1) acts first
  const std::vector<std::string> cuda = sbatch_argv(o, launch(BackendKind::cuda), "/s/job.sh");
  EXPECT_NE(std::find(cuda.begin(), cuda.end(), "--gres=gpu:1"), cuda.end());
  EXPECT_EQ(std::find(cpu.begin(), cpu.end(), "--gres=gpu:1"), cpu.end());
}

TEST(campaign_slurm, the_job_script_times_out_validate_and_records_its_exit_status) {
  const std::string s = slurm_job_script(launch(BackendKind::cpu));
  EXPECT_NE(s.find("export KWB_LEDGER=none\n"), std::string::npos) << s;
  EXPECT_NE(s.find("timeout --signal=TERM --kill-after=30 90s '/opt/kwb' 'validate' '/t/rmsnorm' '--candidate' "
                   "'/c/it'\\''s.cpp' > stdout.log 2> stderr.log"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("echo \"$rc\" > exit_code.tmp && mv exit_code.tmp exit_code"), std::string::npos) << s;
}

TEST(campaign_slurm, scontrol_and_sbatch_answers_are_read_as_slurm_writes_them) {
  const auto kv = parse_scontrol_line(
      "JobId=7 JobName=x JobState=PENDING Reason=Resources Dependency=(null) "
      "ExitCode=0:0\n");
  EXPECT_EQ(kv.at("JobState"), "PENDING");
  EXPECT_EQ(kv.at("Reason"), "Resources");
  EXPECT_EQ(kv.at("ExitCode"), "0:0");
  EXPECT_EQ(parse_sbatch_id("5\n"), "5");
  EXPECT_EQ(parse_sbatch_id("12;cluster\n"), "12");
  EXPECT_FALSE(parse_sbatch_id("sbatch: error: Batch job submission failed\n").has_value());
  EXPECT_EQ(slurm_where("PENDING"), JobProbe::Where::queued);
  EXPECT_EQ(slurm_where("COMPLETING"), JobProbe::Where::running);
  EXPECT_EQ(slurm_where("TIMEOUT"), JobProbe::Where::ended);
  EXPECT_EQ(slurm_where("NODE_FAIL"), JobProbe::Where::ended);
}

TEST(campaign_slurm, a_job_slurm_forgot_is_judged_by_the_exit_status_it_left) {
  const test::TempDir dir("kwb-campaign-slurm");
  std::vector<std::vector<std::string>> calls;
  auto executor = make_slurm_executor(SlurmOptions{}, [&](const std::vector<std::string>& argv) {
    calls.push_back(argv);
    CommandResult r;
    if (argv[0] == "sbatch") {
      r.exit_code = 0;
      r.output = "41\n";
    } else {
      r.exit_code = 1;
      r.errors = "slurm_load_jobs error: Invalid job id specified\n";
    }
    return r;
  });
  JobLaunch l = launch(BackendKind::cpu);
  l.attempt_dir = dir.path();
  EXPECT_EQ(executor->submit(l), "41");
  EXPECT_TRUE(fs::exists(dir / "job.sh"));
  JobProbe p = executor->probe("41", l);
  EXPECT_EQ(p.where, JobProbe::Where::ended);
  EXPECT_FALSE(p.exit_code.has_value());
  EXPECT_NE(p.detail.find("Invalid job id"), std::string::npos) << p.detail;
  write_file_atomic(dir / "exit_code", "1\n");
  p = executor->probe("41", l);
  EXPECT_EQ(p.exit_code, 1);
  executor->cancel("41");
  EXPECT_EQ(calls.back(), (std::vector<std::string>{"scancel", "41"}));
}

// ---- judging an ended job -------------------------------------------------------------------------------------------

JobProbe ended(std::optional<int> rc, int signal = 0, std::string state = "") {
  JobProbe p;
  p.where = JobProbe::Where::ended;
  p.exit_code = rc;
  p.signal = signal;
  p.scheduler_state = std::move(state);
  return p;
}

TEST(campaign_judge, every_way_a_job_ends_has_its_outcome) {
  Evidence none;
  Evidence accepted;
  accepted.verdict = Evidence::Verdict::accepted;
  Evidence rejected;
  rejected.verdict = Evidence::Verdict::rejected;
  rejected.detail = "not authentic";
  EXPECT_EQ(judge(ended(1), accepted, "", "").outcome, JobOutcome::decided);
  EXPECT_EQ(judge(ended(0), rejected, "", "").outcome, JobOutcome::rejected);
  EXPECT_NE(judge(ended(0), rejected, "", "").detail.find("not authentic"), std::string::npos);
  EXPECT_EQ(judge(ended(124), none, "", "").outcome, JobOutcome::timeout);
  EXPECT_EQ(judge(ended(std::nullopt, 0, "TIMEOUT"), none, "", "").outcome, JobOutcome::timeout);
  EXPECT_EQ(judge(ended(143), none, "run_limit", "").outcome, JobOutcome::timeout);
  EXPECT_EQ(judge(ended(std::nullopt, 0, "CANCELLED"), none, "queue_limit", "").outcome, JobOutcome::queue_limit);
  EXPECT_EQ(judge(ended(75), none, "", "").outcome, JobOutcome::queue_limit);
  EXPECT_EQ(judge(ended(std::nullopt, 0, "CANCELLED"), none, "", "").outcome, JobOutcome::cancelled);
  EXPECT_EQ(judge(ended(std::nullopt, 9), none, "", "").outcome, JobOutcome::died);
  EXPECT_EQ(judge(ended(std::nullopt, 0, "NODE_FAIL"), none, "", "").outcome, JobOutcome::died);
  const Judgement bad_input = judge(ended(65), none, "", "kwb: error: task.toml:3: ...");
  EXPECT_EQ(bad_input.outcome, JobOutcome::failed);
  EXPECT_NE(bad_input.detail.find("exited 65"), std::string::npos) << bad_input.detail;
  EXPECT_NE(bad_input.detail.find("task.toml:3"), std::string::npos) << bad_input.detail;
}

// ---- the loop, with an executor that plays Slurm -------------------------------------------------------------------

// Jobs that stay where `where` says until cancelled, then end as Slurm ends a cancelled job.
class FakeSlurm final : public Executor {
public:
  explicit FakeSlurm(JobProbe::Where where) : m_where(where) {}
  ExecutorKind kind() const override { return ExecutorKind::slurm; }
  size_t slots() const override { return 100; }
  double poll_seconds() const override { return 0.01; }
  double grace_seconds() const override { return 0.0; }
  bool jobs_outlive_campaign() const override { return true; }
  std::string submit(const JobLaunch&) override { return std::to_string(++m_submitted); }
  JobProbe probe(const std::string& handle, const JobLaunch&) override {
    JobProbe p;
    p.where = m_cancelled.contains(handle) ? JobProbe::Where::ended : m_where;
    p.scheduler_state = m_cancelled.contains(handle)         ? "CANCELLED"
                        : m_where == JobProbe::Where::queued ? "PENDING"
                                                             : "RUNNING";
    p.scheduler_reason = m_where == JobProbe::Where::queued ? "Resources" : "None";
    return p;
  }
  void cancel(const std::string& handle) override { m_cancelled.insert(handle); }

  int m_submitted = 0;
  std::set<std::string> m_cancelled;

private:
  JobProbe::Where m_where;
};

class CampaignLoop : public CampaignFile {
protected:
  Campaign campaign(const std::string& limits) {
    Campaign c = load(limits + "[executor]\nkind = \"slurm\"\npoll_seconds = 0.05\n" + task_line() +
                      "candidates = [\"cands/\"]\n");
    return c;
  }
  RunnerHooks hooks() {
    RunnerHooks h;
    h.record_accepted = [this](const fs::path&, const std::string&) { ++m_recorded; };
    return h;
  }
  int m_recorded = 0;
};

TEST_F(CampaignLoop, a_job_pending_past_the_queue_limit_is_cancelled_and_recorded_with_slurms_reason) {
  const Campaign c = campaign("queue_limit_minutes = 0\n");
  FakeSlurm slurm(JobProbe::Where::queued);
  const RunSummary s = run_campaign(c, slurm, hooks());
  EXPECT_EQ(s.planned, 1u);  // cands/a.cpp and cands/b.cpp hold the same bytes: one job
  EXPECT_EQ(s.started, 1u);
  EXPECT_EQ(slurm.m_cancelled.size(), 1u);
  const CampaignState state = load_state(c.storage);
  ASSERT_EQ(state.jobs.size(), 1u);
  for (const Job& j : state.jobs) {
    if (j.attempt == 0) continue;
    EXPECT_EQ(j.outcome, JobOutcome::queue_limit) << j.detail;
    EXPECT_EQ(j.scheduler_state, "CANCELLED");
    EXPECT_EQ(j.scheduler_reason, "Resources");  // kept from PENDING: why it waited
    EXPECT_NE(j.detail.find("waited past the queue limit"), std::string::npos) << j.detail;
  }
  EXPECT_EQ(m_recorded, 0);
}

TEST_F(CampaignLoop, a_job_running_past_the_run_limit_is_cancelled_and_recorded_as_a_timeout) {
  const Campaign c = campaign("run_limit_minutes = 0.1\n");
  FakeSlurm slurm(JobProbe::Where::running);
  const auto started = std::chrono::steady_clock::now();
  (void)run_campaign(c, slurm, hooks());
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::seconds(6));
  const CampaignState state = load_state(c.storage);
  size_t timeouts = 0;
  for (const Job& j : state.jobs) timeouts += j.outcome == JobOutcome::timeout ? 1 : 0;
  EXPECT_EQ(timeouts, 1u);
}

TEST_F(CampaignLoop, a_resumed_campaign_polls_its_slurm_jobs_again_instead_of_submitting_them_twice) {
  const Campaign c = campaign("queue_limit_minutes = 0\n");
  RunnerHooks none;
  (void)run_campaign(c, *make_local_executor(), none, RunMode::plan_only);
  CampaignState state = load_state(c.storage);
  for (Job& j : state.jobs) {  // as a campaign process killed after sbatch left it
    j.attempt = 1;
    j.phase = JobPhase::queued;
    j.executor = "slurm";
    j.handle = "77";
    j.bundle = (c.storage / "jobs" / j.id / "attempt-1" / "bundle").string();
    j.submitted_unix = 1.0;
  }
  save_state(c.storage, state);
  FakeSlurm slurm(JobProbe::Where::queued);
  const RunSummary s = run_campaign(c, slurm, hooks());
  EXPECT_EQ(slurm.m_submitted, 0);  // nothing new
  EXPECT_EQ(s.started, 0u);
  EXPECT_EQ(slurm.m_cancelled, std::set<std::string>{"77"});
}

// ---- state and report -----------------------------------------------------------------------------------------------

Job decided_job(const std::string& candidate, const std::string& decision, double improvement) {
  Job j;
  j.key = candidate;
  j.id = "rmsnorm-" + candidate;
  j.task = "rmsnorm";
  j.candidate = "/c/" + candidate + ".cpp";
  j.attempt = 1;
  j.phase = JobPhase::ended;
  j.outcome = JobOutcome::decided;
  j.decision = decision;
  j.workloads = {{"decode", "PASS", improvement, improvement - 2.0, improvement + 2.0}};
  return j;
}

TEST(campaign_state, the_state_reads_back_what_was_written) {
  const test::TempDir dir("kwb-campaign-state");
  CampaignState s;
  s.name = "sweep";
  s.jobs = {decided_job("fused", "KEEP_CANDIDATE", 75.0)};
  s.jobs[0].exit_code = 0;
  s.jobs[0].earlier = {{1, JobOutcome::rejected, "not authentic", "/b", "7"}};
  save_state(dir.path(), s);
  const CampaignState back = load_state(dir.path());
  ASSERT_EQ(back.jobs.size(), 1u);
  EXPECT_EQ(to_json(back.jobs[0]), to_json(s.jobs[0]));
  write_file_atomic(state_path(dir.path()), "{\"schema\": \"kwb.campaign\", \"schema_version\": 9, \"jobs\": []}");
  EXPECT_THROW((void)load_state(dir.path()), DataError);
}

TEST(campaign_report, candidates_rank_by_decision_then_improvement_in_a_self_contained_page) {
  CampaignState s;
  s.name = "sweep <1>";
  s.jobs = {decided_job("slow", "KEEP_BASELINE", -10.0), decided_job("fast", "KEEP_CANDIDATE", 50.0),
            decided_job("faster", "KEEP_CANDIDATE", 75.0)};
  Job timed_out = decided_job("hang", "", 0.0);
  timed_out.outcome = JobOutcome::timeout;
  timed_out.workloads.clear();
  timed_out.detail = "past the run limit";
  s.jobs.push_back(timed_out);
  const CampaignReportInput in{&s, "/s", {}};
  const std::string html = campaign_html(in);
  const size_t faster = html.find("faster.cpp"), fast = html.find("fast.cpp"), slow = html.find("slow.cpp");
  ASSERT_NE(faster, std::string::npos) << html;
  EXPECT_LT(faster, fast);
  EXPECT_LT(fast, slow);
  EXPECT_NE(html.find("decode: +75.00% [+73.00, +77.00], 4.00x [3.70x, 4.35x] PASS"), std::string::npos) << html;
  EXPECT_NE(html.find("past the run limit"), std::string::npos) << html;
  // The Markdown view has the same rows (escaped for Markdown).
  const std::string md = campaign_markdown(in);
  EXPECT_LT(md.find("faster.cpp"), md.find("slow.cpp")) << md;
  EXPECT_NE(md.find("past the run limit"), std::string::npos) << md;
  EXPECT_NE(html.find("sweep &lt;1&gt;"), std::string::npos);
  for (const char* external : {"<script", "src=", "http:", "https:", "@import", "<link"}) {
    EXPECT_EQ(html.find(external), std::string::npos) << external;
  }
  EXPECT_DOUBLE_EQ(speedup_factor(75.0), 4.0);
}

}  // namespace
}  // namespace kwb
