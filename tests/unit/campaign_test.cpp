// kwb campaign without running anything: the campaign file's parser (every bad input a DataError, exit 65, naming
// the file, the line, the field and the fix), Slurm's command lines and answers, how an ended job is judged, the
// state's round trip, job identities, and the report.
#include "campaign/campaign_file.h"
#include "campaign/campaign_report.h"
#include "campaign/campaign_state.h"
#include "campaign/executor.h"
#include "campaign/runner.h"
#include "cli/commands.h"
#include "support/build_paths.h"
#include "support/temp_dir.h"
#include "util/error.h"
#include "util/fs.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <regex>
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
  EXPECT_TRUE(c.slurm.exclusive);
  EXPECT_EQ(c.slurm.array_limit, 0u);
}

TEST_F(CampaignFile, where_jobs_may_run_and_how_many_at_once_are_keys_of_the_executor) {
  const Campaign c = load(
      "[executor]\nkind = \"slurm\"\nconstraint = \"epyc&h200\"\nnodelist = \"n[1-2]\"\nexclude = \"n3\"\n"
      "exclusive = false\narray_limit = 8\ngres = \"gpu:h200:1\"\n" +
      task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_EQ(c.slurm.constraint, "epyc&h200");
  EXPECT_EQ(c.slurm.nodelist, "n[1-2]");
  EXPECT_EQ(c.slurm.exclude, "n3");
  EXPECT_FALSE(c.slurm.exclusive);
  EXPECT_EQ(c.slurm.array_limit, 8u);
  EXPECT_EQ(c.slurm.gres, "gpu:h200:1");
  const std::string half =
      error_of("[executor]\nkind = \"slurm\"\narray_limit = 2.5\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(half.find("campaign.toml:3: executor.array_limit: 2.5 is not a whole number"), std::string::npos) << half;
  const std::string flag =
      error_of("[executor]\nkind = \"slurm\"\nexclusive = \"no\"\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(flag.find("executor.exclusive: must be true"), std::string::npos) << flag;
  const std::string raw = error_of("[executor]\nkind = \"slurm\"\nsbatch_options = [\"--nodelist=n1\"]\n" +
                                   task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(raw.find("'--nodelist=n1' is set by the campaign itself"), std::string::npos) << raw;
  const std::string local =
      error_of("[executor]\nkind = \"local\"\nconstraint = \"x\"\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(local.find("executor.constraint: is a Slurm option"), std::string::npos) << local;
}

TEST_F(CampaignFile, a_container_is_one_image_and_its_mounts_are_absolute_folders) {
  const Campaign c = load(
      "[executor]\nkind = \"slurm\"\napptainer_image = \"/img/kwb.sif\"\n"
      "container_mounts = [\"/scratch\"]\n" +
      task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_EQ(c.slurm.apptainer_image, "/img/kwb.sif");
  EXPECT_EQ(c.slurm.container_mounts, std::vector<std::string>{"/scratch"});
  const std::string both = error_of("[executor]\nkind = \"slurm\"\napptainer_image = \"a.sif\"\npyxis_image = \"b\"\n" +
                                    task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(both.find("executor.pyxis_image: and executor.apptainer_image both name a container"), std::string::npos)
      << both;
  const std::string relative = error_of(
      "[executor]\nkind = \"slurm\"\npyxis_image = \"b\"\n"
      "container_mounts = [\"scratch\"]\n" +
      task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(relative.find("'scratch' is not an absolute folder"), std::string::npos) << relative;
  const std::string alone = error_of("[executor]\nkind = \"slurm\"\ncontainer_mounts = [\"/scratch\"]\n" + task_line() +
                                     "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(alone.find("given without a container"), std::string::npos) << alone;
}

TEST_F(CampaignFile, a_source_the_backend_cannot_build_is_refused_before_anything_runs) {
  const std::string e = error_of("[validate]\nbackend = \"cuda\"\n" + task_line() + "candidates = [\"one.cpp\"]\n");
  EXPECT_NE(e.find("tasks[0].candidates"), std::string::npos) << e;
  EXPECT_NE(e.find("one.cpp: the cuda backend cannot build a '.cpp' source"), std::string::npos) << e;
  write_file_atomic(m_dir / "k.cu", "x\n");
  const std::string cu = error_of(task_line() + "candidates = [\"k.cu\"]\n");
  EXPECT_NE(cu.find("k.cu: the cpu backend cannot build a '.cu' source"), std::string::npos) << cu;
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
                                         "--job-name=kwb-sweep-job",
                                         "--time=3",
                                         "--output=/s/jobs/x/attempt-1/slurm-%j.out",
                                         "--exclusive",
                                         "--partition=debug",
                                         "--account=lab",
                                         "--qos=high",
                                         "/s/job.sh"};
  EXPECT_EQ(cpu, want);  // 90 s: two whole minutes, plus one so that timeout(1) acts first
  const auto has = [](const std::vector<std::string>& a, const std::string& x) {
    return std::find(a.begin(), a.end(), x) != a.end();
  };
  EXPECT_TRUE(has(sbatch_argv(o, launch(BackendKind::cuda), "/s/job.sh"), "--gres=gpu:1"));
  EXPECT_FALSE(has(cpu, "--gres=gpu:1"));
  // opencl: no GPU unless the campaign asks (PoCL runs on CPUs); given, it is passed, on cuda too.
  EXPECT_FALSE(has(sbatch_argv(o, launch(BackendKind::opencl), "/s/job.sh"), "--gres=gpu:1"));
  o.gres = "gpu:h200:1";
  EXPECT_TRUE(has(sbatch_argv(o, launch(BackendKind::opencl), "/s/job.sh"), "--gres=gpu:h200:1"));
  EXPECT_TRUE(has(sbatch_argv(o, launch(BackendKind::cuda), "/s/job.sh"), "--gres=gpu:h200:1"));
  EXPECT_FALSE(has(sbatch_argv(o, launch(BackendKind::cpu), "/s/job.sh"), "--gres=gpu:h200:1"));
  // Where it may run; sharing the node when asked (the timing lock keeps timings apart).
  o.constraint = "h200";
  o.nodelist = "n[1-2]";
  o.exclude = "n3";
  o.exclusive = false;
  const std::vector<std::string> placed = sbatch_argv(o, launch(BackendKind::cpu), "/s/job.sh");
  EXPECT_TRUE(has(placed, "--constraint=h200"));
  EXPECT_TRUE(has(placed, "--nodelist=n[1-2]"));
  EXPECT_TRUE(has(placed, "--exclude=n3"));
  EXPECT_FALSE(has(placed, "--exclusive"));
}

TEST(campaign_slurm, in_a_container_kwb_runs_through_apptainer_or_pyxis_with_its_folders_bound) {
  SlurmOptions o;
  EXPECT_TRUE(container_prefix(o, {"/s"}, "/s/a").empty());
  o.apptainer_image = "/img/kwb.sif";
  o.container_mounts = {"/scratch"};
  EXPECT_EQ(container_prefix(o, {"/t/rmsnorm", "/s", "/s"}, "/s/a"),
            (std::vector<std::string>{"apptainer", "exec", "--bind", "/s,/scratch,/t/rmsnorm", "/img/kwb.sif"}));
  o.apptainer_image.clear();
  o.pyxis_image = "nvcr.io#nvidia/cuda:12.4.0-devel-ubuntu22.04";
  EXPECT_EQ(
      container_prefix(o, {"/s"}, "/s/a"),
      (std::vector<std::string>{"srun", "--ntasks=1", "--container-image=nvcr.io#nvidia/cuda:12.4.0-devel-ubuntu22.04",
                                "--container-mounts=/s:/s,/scratch:/scratch", "--container-workdir=/s/a"}));
  // Both the node check and validate run inside it.
  JobLaunch l = launch(BackendKind::cpu);
  l.doctor = {"/opt/kwb", "doctor", "--json"};
  l.container = {"apptainer", "exec", "--bind", "/s", "/img/kwb.sif"};
  const std::string s = slurm_job_script(l);
  EXPECT_NE(s.find("if ! 'apptainer' 'exec' '--bind' '/s' '/img/kwb.sif' '/opt/kwb' 'doctor' '--json' > doctor.json"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("timeout --signal=TERM --kill-after=30 90s 'apptainer' 'exec' '--bind' '/s' '/img/kwb.sif' "
                   "'/opt/kwb' 'validate'"),
            std::string::npos)
      << s;
}

TEST(campaign_slurm, a_wave_is_one_array_whose_tasks_run_each_jobs_script) {
  SlurmOptions o;
  o.array_limit = 4;
  std::vector<JobLaunch> wave;
  for (int i = 0; i < 3; ++i) {
    JobLaunch l = launch(BackendKind::cpu);
    l.name = fmt::format("kwb-sweep-rmsnorm-c{}", i);
    l.attempt_dir = fmt::format("/s/jobs/c{}/attempt-1", i);
    l.run_limit_s = 60.0 * (i + 1);
    wave.push_back(l);
  }
  const std::vector<std::string> a = sbatch_array_argv(o, wave, "/s/slurm/wave-1.sh", "/s/slurm");
  const std::vector<std::string> want = {"sbatch",
                                         "--parsable",
                                         "--array=0-2%4",
                                         "--job-name=kwb-sweep-rmsnorm-c",
                                         "--time=4",  // the longest run limit, 3 minutes, plus one
                                         "--output=/s/slurm/slurm-%A_%a.out",
                                         "--exclusive",
                                         "/s/slurm/wave-1.sh"};
  EXPECT_EQ(a, want);
  const std::string script = slurm_array_script(wave);
  EXPECT_NE(script.find("case \"$SLURM_ARRAY_TASK_ID\" in\n"), std::string::npos) << script;
  EXPECT_NE(script.find("  0) exec /bin/sh '/s/jobs/c0/attempt-1/job.sh' ;;"), std::string::npos) << script;
  EXPECT_NE(script.find("  2) exec /bin/sh '/s/jobs/c2/attempt-1/job.sh' ;;"), std::string::npos) << script;
  EXPECT_NE(script.find("*) echo \"kwb: no job for array task $SLURM_ARRAY_TASK_ID\" >&2; exit 70 ;;"),
            std::string::npos)
      << script;
}
TEST(campaign_slurm, the_job_script_times_out_validate_and_records_its_exit_status) {
  const std::string s = slurm_job_script(launch(BackendKind::cpu));
  EXPECT_NE(s.find("export KWB_LEDGER=none\n"), std::string::npos) << s;
  EXPECT_NE(s.find("timeout --signal=TERM --kill-after=30 90s '/opt/kwb' 'validate' '/t/rmsnorm' '--candidate' "
                   "'/c/it'\\''s.cpp' > stdout.log 2> stderr.log"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("echo \"$rc\" > exit_code.tmp && mv exit_code.tmp exit_code"), std::string::npos) << s;
  EXPECT_EQ(s.find("doctor"), std::string::npos) << s;
  // With a node check: it runs first, and a node that fails it ends the job with 69 before validate.
  JobLaunch checked = launch(BackendKind::cpu);
  checked.doctor = {"/opt/kwb", "doctor", "--backend", "cpu", "--json"};
  const std::string d = slurm_job_script(checked);
  const size_t doctor = d.find(
      "if ! '/opt/kwb' 'doctor' '--backend' 'cpu' '--json' > doctor.json 2> doctor.log; then\n"
      "  echo 69 > exit_code.tmp && mv exit_code.tmp exit_code\n  exit 69\nfi\n");
  ASSERT_NE(doctor, std::string::npos) << d;
  EXPECT_LT(doctor, d.find("timeout --signal=TERM")) << d;
}

TEST(campaign_judge, a_node_that_lacks_a_piece_is_the_nodes_fault_with_the_piece_and_the_fix) {
  const test::TempDir dir("kwb-campaign-node");
  const Campaign c = [&] {
    write_file_atomic(dir / "a.cpp", "x\n");
    write_file_atomic(dir / "campaign.toml", "[executor]\nkind = \"slurm\"\npoll_seconds = 0.05\n[[tasks]]\ndir = \"" +
                                                 k_rmsnorm.string() + "\"\ncandidates = [\"a.cpp\"]\n");
    return load_campaign(dir / "campaign.toml", cli::check_validate_flag);
  }();
  // A Slurm whose one job fails on a node without bubblewrap: its doctor.json says so, its exit_code is 69.
  std::vector<fs::path> attempts;
  CommandRunner fake = [&](const std::vector<std::string>& argv) {
    CommandResult r;
    r.exit_code = 0;
    if (argv[0] == "sbatch") {
      const std::string script = read_file(argv.back());
      const size_t at = script.find("exec /bin/sh '") + 14;
      attempts.emplace_back(fs::path(script.substr(at, script.find("/job.sh", at) - at)));
      write_file_atomic(attempts.back() / "doctor.json",
                        R"({"schema": "kwb.doctor", "schema_version": 1, "host": "n7", "backend": "cpu", "fit": false,
                            "missing": ["bubblewrap"], "checks": [{"piece": "bubblewrap", "ok": false,
                            "required": true, "detail": "bwrap is not installed", "fix": "install bubblewrap"},
                            {"piece": "valgrind", "ok": false, "required": false, "detail": "not found",
                            "fix": "none needed"}]})");
      write_file_atomic(attempts.back() / "exit_code", "69\n");
      r.output = "5\n";
    } else if (argv[0] == "squeue") {
      r.output = "5_0|FAILED|NonZeroExitCode|n7\n";
    }
    return r;
  };
  auto slurm = make_slurm_executor(c.slurm, fake, c.storage / "slurm");
  (void)run_campaign(c, *slurm, RunnerHooks{});
  const CampaignState state = load_state(c.storage);
  ASSERT_EQ(state.jobs.size(), 1u);
  const Job& j = state.jobs[0];
  EXPECT_EQ(j.outcome, JobOutcome::node_unfit) << j.detail;
  EXPECT_NE(j.detail.find("the node n7 cannot run kwb validate, the node's fault and not the candidate's: bubblewrap: "
                          "bwrap is not installed (fix: install bubblewrap)"),
            std::string::npos)
      << j.detail;
  EXPECT_EQ(j.detail.find("valgrind"), std::string::npos) << j.detail;  // not required: not the reason
}

TEST(campaign_slurm, sbatch_answers_and_job_states_are_read_as_slurm_writes_them) {
  EXPECT_EQ(parse_sbatch_id("5\n"), "5");
  EXPECT_EQ(parse_sbatch_id("12;cluster\n"), "12");
  EXPECT_FALSE(parse_sbatch_id("sbatch: error: Batch job submission failed\n").has_value());
  EXPECT_EQ(slurm_where("PENDING"), JobProbe::Where::queued);
  EXPECT_EQ(slurm_where("COMPLETING"), JobProbe::Where::running);
  EXPECT_EQ(slurm_where("TIMEOUT"), JobProbe::Where::ended);
  EXPECT_EQ(slurm_where("NODE_FAIL"), JobProbe::Where::ended);
}

TEST(campaign_slurm, squeue_and_sacct_answers_are_read_as_slurm_writes_them) {
  const std::map<std::string, SqueueRow> q =
      parse_squeue("41_0|RUNNING|None|node1\n41_1|PENDING|JobArrayTaskLimit|\n42|COMPLETED|None|node2\n\n");
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q.at("41_0").state, "RUNNING");
  EXPECT_EQ(q.at("41_0").nodes, "node1");
  EXPECT_EQ(q.at("41_1").reason, "JobArrayTaskLimit");
  EXPECT_EQ(q.at("41_1").nodes, "");
  EXPECT_EQ(q.at("42").state, "COMPLETED");
  const auto a = parse_sacct(
      "41_0|CANCELLED by 0|0:15|00:01:02||node1\n41_0.batch|CANCELLED|0:15|00:01:02|1.5G|node1\n"
      "41_0.0|CANCELLED|0:15|00:01:01|512M|node1\n41_1|FAILED|1:0|00:00:09||node2\n41_1.batch|FAILED|1:0|00:00:09|"
      "2048K|node2\n");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a.at("41_0").at("State"), "CANCELLED");  // "by 0" is who, not what
  EXPECT_EQ(a.at("41_0").at("ExitCode"), "0:15");
  EXPECT_EQ(a.at("41_0").at("Elapsed"), "00:01:02");
  EXPECT_EQ(a.at("41_0").at("MaxRSS"), "1.5G");  // the largest step's
  EXPECT_EQ(a.at("41_0").at("NodeList"), "node1");
  EXPECT_EQ(a.at("41_1").at("State"), "FAILED");
  EXPECT_EQ(a.at("41_1").at("MaxRSS"), "2048K");
}

// A Slurm that answers from a table and counts what it is asked.
struct ScriptedSlurm {
  std::map<std::string, std::string> answers;  // command -> stdout
  std::map<std::string, int> codes;            // command -> exit status (default 0)
  std::map<std::string, std::string> errors;   // command -> stderr
  std::vector<std::vector<std::string>> calls;
  CommandRunner runner() {
    return [this](const std::vector<std::string>& argv) {
      calls.push_back(argv);
      CommandResult r;
      r.exit_code = codes.contains(argv[0]) ? codes[argv[0]] : 0;
      r.output = answers[argv[0]];
      r.errors = errors[argv[0]];
      return r;
    };
  }
  size_t count(const std::string& command) const {
    return static_cast<size_t>(
        std::count_if(calls.begin(), calls.end(), [&](const auto& c) { return c[0] == command; }));
  }
};

TEST(campaign_slurm, every_job_in_flight_is_one_squeue_and_the_ended_ones_one_sacct) {
  const test::TempDir dir("kwb-campaign-slurm");
  ScriptedSlurm slurm;
  slurm.answers["squeue"] = "41_0|RUNNING|None|node1\n41_1|PENDING|Priority|\n41_2|FAILED|NonZeroExitCode|node2\n";
  slurm.answers["sacct"] = "41_2|FAILED|1:0|00:00:09||node2\n41_2.batch|FAILED|1:0|00:00:09|2048K|node2\n";
  auto executor = make_slurm_executor(SlurmOptions{}, slurm.runner());
  std::vector<ActiveJob> jobs;
  for (int i = 0; i < 3; ++i) {
    JobLaunch l = launch(BackendKind::cpu);
    l.attempt_dir = dir / fmt::format("a{}", i);
    fs::create_directories(l.attempt_dir);
    jobs.push_back({fmt::format("41_{}", i), l});
  }
  write_file_atomic(dir / "a2" / "exit_code", "65\n");
  const std::vector<JobProbe> p = executor->probe_all(jobs);
  EXPECT_EQ(slurm.count("squeue"), 1u);
  EXPECT_EQ(slurm.count("sacct"), 1u);
  EXPECT_EQ(slurm.count("scontrol"), 0u);
  EXPECT_EQ(slurm.calls[0], (std::vector<std::string>{"squeue", "--noheader", "--array", "--states=all", "--jobs=41",
                                                      "--format=%i|%T|%r|%N"}));
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].where, JobProbe::Where::running);
  EXPECT_EQ(p[0].node, "node1");
  EXPECT_EQ(p[1].where, JobProbe::Where::queued);
  EXPECT_EQ(p[1].scheduler_reason, "Priority");
  EXPECT_EQ(p[2].where, JobProbe::Where::ended);
  EXPECT_EQ(p[2].exit_code, 65);
  EXPECT_EQ(p[2].node, "node2");
  EXPECT_EQ(p[2].accounting.at("Elapsed"), "00:00:09");
  EXPECT_EQ(p[2].accounting.at("MaxRSS"), "2048K");
  // Nothing ended: no sacct.
  slurm.answers["squeue"] = "41_0|RUNNING|None|node1\n41_1|RUNNING|None|node1\n";
  (void)executor->probe_all({jobs[0], jobs[1]});
  EXPECT_EQ(slurm.count("squeue"), 2u);
  EXPECT_EQ(slurm.count("sacct"), 1u);
}

TEST(campaign_slurm, a_job_slurm_forgot_is_judged_by_sacct_and_the_exit_status_it_left) {
  const test::TempDir dir("kwb-campaign-slurm");
  ScriptedSlurm slurm;
  slurm.answers["sbatch"] = "41\n";
  slurm.codes["squeue"] = 1;
  slurm.errors["squeue"] = "slurm_load_jobs error: Invalid job id specified\n";
  slurm.codes["sacct"] = 1;
  slurm.errors["sacct"] = "sacct: error: Slurm accounting storage is disabled\n";
  auto executor = make_slurm_executor(SlurmOptions{}, slurm.runner());
  JobLaunch l = launch(BackendKind::cpu);
  l.attempt_dir = dir.path();
  EXPECT_EQ(executor->submit(l), "41");
  EXPECT_TRUE(fs::exists(dir / "job.sh"));
  JobProbe p = executor->probe("41", l);
  EXPECT_EQ(p.where, JobProbe::Where::ended);
  EXPECT_FALSE(p.exit_code.has_value());
  EXPECT_NE(p.detail.find("Slurm no longer lists job 41"), std::string::npos) << p.detail;
  EXPECT_NE(p.detail.find("accounting storage is disabled"), std::string::npos) << p.detail;
  write_file_atomic(dir / "exit_code", "1\n");
  p = executor->probe("41", l);
  EXPECT_EQ(p.exit_code, 1);
  // With accounting, sacct's State replaces UNKNOWN.
  slurm.codes["sacct"] = 0;
  slurm.answers["sacct"] = "41|OUT_OF_MEMORY|0:125|00:02:00||node7\n";
  p = executor->probe("41", l);
  EXPECT_EQ(p.scheduler_state, "OUT_OF_MEMORY");
  EXPECT_EQ(p.node, "node7");
  executor->cancel_all({"41_0", "41_3"});
  EXPECT_EQ(slurm.calls.back(), (std::vector<std::string>{"scancel", "41_0", "41_3"}));
}

TEST(campaign_slurm, a_failing_squeue_ends_no_job) {
  const test::TempDir dir("kwb-campaign-slurm");
  ScriptedSlurm slurm;
  slurm.codes["squeue"] = 1;
  slurm.errors["squeue"] = "squeue: error: Unable to contact slurm controller (connect failure)\n";
  auto executor = make_slurm_executor(SlurmOptions{}, slurm.runner());
  JobLaunch l = launch(BackendKind::cpu);
  l.attempt_dir = dir.path();
  const std::vector<JobProbe> p = executor->probe_all({{"41_0", l}, {"41_1", l}});
  for (const JobProbe& x : p) {
    EXPECT_NE(x.where, JobProbe::Where::ended);
    EXPECT_TRUE(x.stale);
  }
  EXPECT_EQ(slurm.count("sacct"), 0u);
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

// A Slurm in which every job of a wave pends for one poll, runs on one of two nodes for the next, and fails (exit 1,
// as kwb validate exits without a decision) at the third: what a campaign asks of it is counted.
struct WaveSlurm {
  std::vector<std::vector<std::string>> calls;
  std::vector<std::string> tasks;  // "<array>_<i>"
  std::vector<fs::path> attempts;  // each task's attempt folder, read from the array script
  int squeues = 0;
  CommandRunner runner() {
    return [this](const std::vector<std::string>& argv) {
      calls.push_back(argv);
      CommandResult r;
      r.exit_code = 0;
      if (argv[0] == "sbatch") {
        const std::string script = read_file(argv.back());
        const std::regex job(R"(exec /bin/sh '([^']*)/job\.sh')");
        for (auto it = std::sregex_iterator(script.begin(), script.end(), job); it != std::sregex_iterator(); ++it) {
          tasks.push_back(fmt::format("9_{}", attempts.size()));
          attempts.emplace_back((*it)[1].str());
        }
        r.output = "9\n";
      } else if (argv[0] == "squeue") {
        ++squeues;
        for (size_t i = 0; i < tasks.size(); ++i) {
          const char* state = squeues == 1 ? "PENDING" : squeues == 2 ? "RUNNING" : "FAILED";
          if (squeues == 3) write_file_atomic(attempts[i] / "exit_code", "1\n");
          r.output += fmt::format("{}|{}|None|{}\n", tasks[i], state, squeues == 1 ? "" : i % 2 ? "n2" : "n1");
        }
      } else if (argv[0] == "sacct") {
        for (size_t i = 0; i < tasks.size(); ++i) {
          r.output += fmt::format("{0}|FAILED|1:0|00:00:04||{1}\n{0}.batch|FAILED|1:0|00:00:04|3000K|{1}\n", tasks[i],
                                  i % 2 ? "n2" : "n1");
        }
      }
      return r;
    };
  }
  size_t count(const std::string& command) const {
    return static_cast<size_t>(
        std::count_if(calls.begin(), calls.end(), [&](const auto& c) { return c[0] == command; }));
  }
};

TEST_F(CampaignLoop, a_wave_is_one_sbatch_array_and_each_poll_one_squeue_whatever_the_number_of_jobs) {
  for (int i = 0; i < 6; ++i) write_file_atomic(m_dir / "cands" / fmt::format("c{}.cpp", i), fmt::format("{}\n", i));
  const Campaign c = campaign("");
  WaveSlurm fake;
  auto slurm = make_slurm_executor(c.slurm, fake.runner(), c.storage / "slurm");
  const RunSummary s = run_campaign(c, *slurm, hooks());
  EXPECT_EQ(s.planned, 7u);  // c0..c5, and a.cpp and b.cpp (the same bytes: one job)
  EXPECT_EQ(s.started, 7u);
  EXPECT_EQ(fake.count("sbatch"), 1u);
  EXPECT_EQ(fake.calls.front()[2], "--array=0-6");
  EXPECT_EQ(fake.count("squeue"), 3u);  // pending, running, ended: one per poll cycle
  EXPECT_EQ(fake.count("sacct"), 1u);   // once, for the seven that ended together
  EXPECT_EQ(fake.count("scontrol"), 0u);
  const CampaignState state = load_state(c.storage);
  std::set<std::string> nodes;
  for (const Job& j : state.jobs) {
    EXPECT_EQ(j.outcome, JobOutcome::failed) << j.detail;
    EXPECT_NE(j.detail.find("kwb validate exited 1 without a decision"), std::string::npos) << j.detail;
    EXPECT_EQ(j.handle.rfind("9_", 0), 0u) << j.handle;
    EXPECT_EQ(j.accounting.at("Elapsed"), "00:00:04");
    EXPECT_EQ(j.accounting.at("MaxRSS"), "3000K");
    nodes.insert(j.node);
  }
  EXPECT_EQ(nodes, (std::set<std::string>{"n1", "n2"}));
  // The array script and every job's own script are where the campaign says, for a person to read.
  size_t waves = 0;
  for (const auto& e : fs::directory_iterator(c.storage / "slurm")) waves += e.path().extension() == ".sh" ? 1 : 0;
  EXPECT_EQ(waves, 1u);
  for (const fs::path& a : fake.attempts) EXPECT_TRUE(fs::exists(a / "job.sh")) << a;
}

TEST_F(CampaignLoop, a_resumed_campaign_polls_its_array_tasks_in_one_squeue_and_submits_nothing) {
  for (int i = 0; i < 3; ++i) write_file_atomic(m_dir / "cands" / fmt::format("c{}.cpp", i), fmt::format("{}\n", i));
  const Campaign c = campaign("");
  RunnerHooks none;
  (void)run_campaign(c, *make_local_executor(), none, RunMode::plan_only);
  CampaignState state = load_state(c.storage);
  WaveSlurm fake;
  int task = 0;
  for (Job& j : state.jobs) {  // as a campaign process killed after its sbatch --array left them
    j.attempt = 1;
    j.phase = JobPhase::queued;
    j.executor = "slurm";
    j.handle = fmt::format("9_{}", task++);
    j.bundle = (c.storage / "jobs" / j.id / "attempt-1" / "bundle").string();
    fs::create_directories(fs::path(j.bundle).parent_path());
    j.submitted_unix = wall_seconds_now();
    fake.tasks.push_back(j.handle);
    fake.attempts.push_back(fs::path(j.bundle).parent_path());
  }
  save_state(c.storage, state);
  auto slurm = make_slurm_executor(c.slurm, fake.runner(), c.storage / "slurm");
  const RunSummary s = run_campaign(c, *slurm, hooks());
  EXPECT_EQ(s.started, 0u);
  EXPECT_EQ(fake.count("sbatch"), 0u);  // nothing submitted twice
  EXPECT_EQ(fake.count("squeue"), 3u);  // one per cycle for the four tasks: pending, running, ended
  for (const auto& call : fake.calls) {
    if (call[0] == "squeue") {
      EXPECT_EQ(call[4], "--jobs=9");
    }
  }
  for (const Job& j : load_state(c.storage).jobs) EXPECT_EQ(j.outcome, JobOutcome::failed) << j.detail;
}

TEST_F(CampaignLoop, a_dry_run_shows_the_sbatch_line_and_the_scripts_and_submits_nothing) {
  const Campaign c = campaign("");
  WaveSlurm fake;
  auto slurm = make_slurm_executor(c.slurm, fake.runner(), c.storage / "slurm");
  const RunSummary s = run_campaign(c, *slurm, hooks(), RunMode::plan_only);
  EXPECT_TRUE(fake.calls.empty());
  EXPECT_NE(s.submission.find("'sbatch' '--parsable' '--array=0-0'"), std::string::npos) << s.submission;
  EXPECT_NE(s.submission.find("case \"$SLURM_ARRAY_TASK_ID\" in"), std::string::npos) << s.submission;
  EXPECT_NE(s.submission.find("timeout --signal=TERM"), std::string::npos) << s.submission;
  EXPECT_NE(s.submission.find("'validate'"), std::string::npos) << s.submission;
  EXPECT_FALSE(fs::exists(c.storage / "slurm"));
}

// A job whose validate waits for the node's timing lock: the state says so while it runs, and stops saying it once
// the job ended.
class LockWaitSlurm final : public Executor {
public:
  ExecutorKind kind() const override { return ExecutorKind::slurm; }
  size_t slots() const override { return 100; }
  double poll_seconds() const override { return 0.01; }
  double grace_seconds() const override { return 0.0; }
  bool jobs_outlive_campaign() const override { return true; }
  std::string submit(const JobLaunch& l) override {
    write_file_atomic(l.attempt_dir / "stderr.log",
                      "kwb validate: checks\nwaiting for the timing lock /tmp/kwb.lock (one timing stage at a time on "
                      "this machine): held by pid 41 (kwb validate of softmax); 12 s so far\n");
    return "7";
  }
  JobProbe probe(const std::string&, const JobLaunch& l) override {
    JobProbe p;
    if (++m_probes == 1) {
      p.where = JobProbe::Where::running;
      p.scheduler_state = "RUNNING";
      return p;
    }
    m_seen = load_state(l.attempt_dir.parent_path().parent_path().parent_path()).jobs.at(0).waiting;
    p.where = JobProbe::Where::ended;
    p.exit_code = 1;
    return p;
  }
  void cancel(const std::string&) override {}
  int m_probes = 0;
  std::string m_seen;
};

TEST_F(CampaignLoop, a_job_waiting_for_the_timing_lock_says_so_while_it_runs) {
  const Campaign c = campaign("");
  LockWaitSlurm slurm;
  (void)run_campaign(c, slurm, hooks());
  EXPECT_EQ(slurm.m_seen, "the timing lock: held by pid 41 (kwb validate of softmax); 12 s so far");
  EXPECT_EQ(load_state(c.storage).jobs.at(0).waiting, "");  // ended: waits for nothing
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
  // A slower candidate reads as slower; one machine: no warning.
  EXPECT_NE(html.find("decode: -10.00% [-12.00, -8.00], 1.10x slower [0.89x, 0.93x] PASS"), std::string::npos) << html;
  EXPECT_EQ(html.find("mixes machines"), std::string::npos);
}

TEST(campaign_report, a_ranking_says_where_each_job_ran_and_warns_when_it_mixes_machines) {
  CampaignState s;
  s.name = "sweep";
  Job a = decided_job("a", "KEEP_CANDIDATE", 20.0), b = decided_job("b", "KEEP_CANDIDATE", 10.0);
  a.node = "gpu01";
  a.machine = "EPYC 9654, 192 cores, NVIDIA H200";
  b.node = "gpu17";
  b.machine = "Xeon 8480, 112 cores, NVIDIA H100";
  s.jobs = {a, b};
  const CampaignReportInput in{&s, "/s", {}};
  const std::string md = campaign_markdown(in);
  EXPECT_NE(md.find("| gpu01 | EPYC 9654, 192 cores, NVIDIA H200 |"), std::string::npos) << md;
  EXPECT_NE(md.find("WARNING: this ranking mixes machines (1 on EPYC 9654, 192 cores, NVIDIA H200; 1 on Xeon 8480, "
                    "112 cores, NVIDIA H100)"),
            std::string::npos)
      << md;
  EXPECT_NE(campaign_html(in).find("<p class=\"warning\"><strong>WARNING: this ranking mixes machines"),
            std::string::npos);
  s.jobs[1].machine = s.jobs[0].machine;
  EXPECT_EQ(campaign_markdown(in).find("mixes machines"), std::string::npos);
}

}  // namespace
}  // namespace kwb
