#include "profile/profile.h"
#include "util/units.h"

#include "profile/callgrind_output.h"
#include "session/case_data.h"
#include "stats/descriptive.h"
#include "task/data.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/paths.h"
#include "util/sha256.h"
#include "util/worker_dirs.h"
#include "util/worker_user.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>

namespace kwb {

namespace fs = std::filesystem;

bool ProfileReport::has_failures() const {
  return std::any_of(workloads.begin(), workloads.end(), [](const WorkloadProfile& w) { return !w.failures.empty(); });
}

fs::path profile_worker_executable() {
  if (const char* env = std::getenv("KWB_PROFILE_WORKER"); env != nullptr && *env != '\0') return env;
  return executable_dir() / "kwb-profile-worker";
}

namespace {

// The profile worker as its own user starts it: when kwb is root, a root-owned copy every user can execute (kwb's
// own folder may be closed to other users: util/worker_dirs.h, executable_copy).
fs::path profile_worker_for_workers() {
  const fs::path exe = profile_worker_executable();
  return workers_change_user() ? executable_copy(exe) : exe;
}

}  // namespace

namespace {

// Where callgrind's files go: the caller's folder (kept), or a private temporary one removed at the end.
class WorkDir {
public:
  explicit WorkDir(const fs::path& keep) {
    if (!keep.empty()) {
      m_path = keep;
      fs::create_directories(m_path);
      return;
    }
    std::string pattern = (fs::temp_directory_path() / "kwb-profile-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw InternalError("cannot create a temporary folder for callgrind");
    m_path = pattern;
    m_remove = true;
    // The profile worker may run as a user of its own (util/worker_user.h): it must pass through to its subfolder.
    if (workers_change_user()) {
      fs::permissions(m_path, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
    }
  }
  ~WorkDir() {
    std::error_code ec;
    if (m_remove) fs::remove_all(m_path, ec);
  }
  WorkDir(const WorkDir&) = delete;  // owns (and may remove) a folder
  WorkDir& operator=(const WorkDir&) = delete;
  const fs::path& path() const { return m_path; }

private:
  fs::path m_path;
  bool m_remove = false;
};

void say(const ProfileOptions& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

void add_failures(WorkloadProfile& wp, std::vector<Failure>& failures) {
  for (Failure& f : failures) wp.failures.push_back(std::move(f));
  failures.clear();
}

double mean_of(const std::vector<uint64_t>& v) {
  if (v.empty()) return 0.0;
  double sum = 0;
  for (uint64_t x : v) sum += static_cast<double>(x);
  return sum / static_cast<double>(v.size());
}

double median_of(const std::vector<uint64_t>& v) {
  if (v.empty()) return 0.0;
  std::vector<double> d(v.begin(), v.end());
  return stats::median(d);
}

SessionOptions session_options(const ProfileOptions& o, uint64_t salt) {
  SessionOptions so;
  so.backend = o.backend;
  so.timeout = o.timeout;
  so.poison_seed = mix_seed(o.nonce, salt);
  return so;
}

// kwb-confine's part of the profile worker's command line (worker/confine_main.cpp): before valgrind, or the
// worker itself, starts, Landlock lets it read only the system, the worker and this artifact (the copy a worker
// of its own user reads, when kwb is root: util/worker_user.h) and write only `out_dir` (nothing when empty), with
// rlimits and, when kwb is root, a user of its own.
std::vector<std::string> confine_wrapper(const Artifact& art, const fs::path& out_dir) {
  // Made now: kwb-confine grants only what exists when it starts, and the worker loads this copy later.
  const fs::path artifact = workers_change_user() ? readable_copy(art.path) : art.path;
  std::vector<std::string> w = {(executable_dir() / "kwb-confine").string(),
                                "--read",
                                profile_worker_for_workers().string(),
                                "--read",
                                artifact.string(),
                                "--cpu-seconds",
                                "3600"};
  if (!out_dir.empty()) w.insert(w.end(), {"--own", out_dir.string(), "--write", out_dir.string()});
  w.push_back("--");
  return w;
}

// The profile worker's output folder is root's again once the worker is gone (a kept folder stays the invoking
// user's, and no later worker that gets the same user id can write it).
class Reclaim {
public:
  explicit Reclaim(fs::path dir) : m_dir(std::move(dir)) {}
  Reclaim(const Reclaim&) = delete;
  Reclaim& operator=(const Reclaim&) = delete;
  ~Reclaim() {
    if (!workers_change_user()) return;
    (void)::lchown(m_dir.c_str(), ::geteuid(), ::getegid());
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(m_dir, ec)) {
      (void)::lchown(entry.path().c_str(), ::geteuid(), ::getegid());
    }
  }

private:
  fs::path m_dir;
};

// ---- allocations and hardware counters: kwb-profile-worker, natively -------------------------------------------

void native_pass(const Task& task, const Artifact& art, const InputSet& set, const ProfileOptions& o,
                 WorkloadProfile& wp) {
  AllocationProfile& alloc = wp.allocations;
  HardwareCounterProfile& hw = wp.hardware;
  const fs::path exe = profile_worker_executable();
  if (!fs::exists(exe)) {
    alloc.unavailable_reason = hw.unavailable_reason =
        fmt::format("{} not found (build the kwb-profile-worker target, or set KWB_PROFILE_WORKER)", exe.string());
    return;
  }
  SessionOptions so = session_options(o, 0xA110C);
  so.worker_executable = profile_worker_for_workers();
  so.wrapper = confine_wrapper(art, {});
  WorkerSession session(task, art, so);
  LoadOutcome lo = session.start();
  if (!lo.ok) {
    wp.failures.push_back({set.case_->name, -1, "loads", lo.reason, lo.detail});
    alloc.unavailable_reason = hw.unavailable_reason = "the profile worker could not load the implementation";
    return;
  }
  std::string hw_reason;
  for (int k = 0; k < o.native_calls; ++k) {
    CallResult r = session.call(set, k, CallMode::timing);
    if (!r.valid()) {
      add_failures(wp, r.failures);
      alloc.unavailable_reason = hw.unavailable_reason =
          "a call failed validation in the profile worker: no numbers are reported for it";
      return;
    }
    if (!r.profile) {
      alloc.unavailable_reason = hw.unavailable_reason =
          fmt::format("{} answered without profile data: it is not a profile build", exe.string());
      return;
    }
    alloc.counts.push_back(r.profile->alloc_count);
    alloc.bytes.push_back(r.profile->alloc_bytes);
    alloc.frees.push_back(r.profile->free_count);
    if (r.profile->hw_instructions && r.profile->hw_cycles) {
      hw.instructions.push_back(*r.profile->hw_instructions);
      hw.cycles.push_back(*r.profile->hw_cycles);
    } else {
      hw_reason = r.profile->hw_unavailable;
    }
  }
  CallResult inputs = session.verify_inputs(set, o.native_calls);
  add_failures(wp, inputs.failures);
  session.shutdown();
  if (!wp.failures.empty()) {
    alloc.unavailable_reason = hw.unavailable_reason = "an input changed during the calls";
    return;
  }
  alloc.available = !alloc.counts.empty();
  alloc.count_per_call = mean_of(alloc.counts);
  alloc.bytes_per_call = mean_of(alloc.bytes);
  if (!hw_reason.empty() || hw.instructions.size() != alloc.counts.size()) {
    hw.instructions.clear();
    hw.cycles.clear();
    hw.unavailable_reason = hw_reason.empty() ? "not reported for every call" : hw_reason;
  } else {
    hw.available = !hw.instructions.empty();
    hw.instructions_per_call = median_of(hw.instructions);
    hw.cycles_per_call = median_of(hw.cycles);
  }
}

// ---- callgrind ---------------------------------------------------------------------------------------------------

struct CallgrindRun {
  bool ran = false;
  std::string unhandled_instruction;        // valgrind's log line when it met an instruction it cannot decode
  std::string reason;                       // why !ran
  std::vector<Failure> failures;            // calls that failed validation: failures of the implementation
  std::map<uint64_t, CallgrindDump> dumps;  // by the worker's call number (1-based)
  bool client_requests = true;
};

CallgrindRun run_under_callgrind(const Task& task, const Artifact& art, const InputSet& set, int total_calls,
                                 const ProfileOptions& o, const ValgrindInstall& valgrind, const fs::path& dir) {
  CallgrindRun out;
  fs::create_directories(dir);
  // valgrind writes the per-call dumps as the profile worker's user (util/worker_user.h), whom kwb-confine makes
  // the folder's owner; it is root's again once the worker is gone (Reclaim).
  for (const auto& entry : fs::directory_iterator(dir)) {  // a kept folder from an earlier run
    const std::string name = entry.path().filename().string();
    if (name.starts_with("callgrind.out") || name == valgrind_log(dir).filename()) fs::remove(entry.path());
  }
  const Reclaim reclaim(dir);
  SessionOptions so = session_options(o, 0xCA11);
  so.timeout = o.timeout * 50;  // callgrind with cache simulation runs ~20-100x slower than native code
  so.worker_executable = profile_worker_for_workers();
  so.wrapper = confine_wrapper(art, dir);
  for (std::string& word : callgrind_wrapper(valgrind, dir)) so.wrapper.push_back(std::move(word));
  WorkerSession session(task, art, so);
  LoadOutcome lo = session.start();
  if (!lo.ok) {
    out.unhandled_instruction = valgrind_unhandled_instruction(dir);
    out.reason = fmt::format("the profile worker under valgrind did not load the implementation ({}: {})", lo.reason,
                             lo.detail.substr(0, 300));
    return out;
  }
  for (int k = 0; k < total_calls; ++k) {
    CallResult r = session.call(set, k, CallMode::timing);
    if (!r.completed) {
      out.unhandled_instruction = valgrind_unhandled_instruction(dir);
      out.reason = r.failures.empty() ? "the worker died under valgrind"
                                      : fmt::format("the worker died under valgrind: {}: {}", r.failures[0].reason,
                                                    r.failures[0].detail.substr(0, 300));
      if (out.unhandled_instruction.empty()) out.failures = std::move(r.failures);
      return out;
    }
    if (!r.valid()) {
      out.failures = std::move(r.failures);
      out.reason = "a call failed validation under callgrind: no numbers are reported for it";
      return out;
    }
    if (r.profile) out.client_requests = r.profile->callgrind_requests;
  }
  CallResult inputs = session.verify_inputs(set, total_calls);
  session.shutdown();
  if (!inputs.failures.empty()) {
    out.failures = std::move(inputs.failures);
    out.reason = "an input changed during the calls";
    return out;
  }
  const std::string prefix = "Client Request: kwb_run call ";
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("callgrind.out.")) continue;
    CallgrindDump dump = parse_callgrind(read_file(entry.path()));
    if (!dump.trigger.starts_with(prefix)) continue;
    const uint64_t call = std::strtoull(dump.trigger.c_str() + prefix.size(), nullptr, 10);
    out.dumps.emplace(call, std::move(dump));
  }
  out.ran = true;
  return out;
}

// The same file, or a copy of it: when kwb runs as root the profile worker loads a readable copy of the artifact
// (util/worker_dirs.h, readable_copy).
bool same_file(const std::string& a, const fs::path& b) {
  std::error_code ec1, ec2;
  const fs::path ca = fs::weakly_canonical(a, ec1);
  const fs::path cb = fs::weakly_canonical(b, ec2);
  if (ec1 || ec2) return false;
  if (ca == cb) return true;
  return fs::is_regular_file(ca, ec1) && fs::is_regular_file(cb, ec2) && sha256_file(ca) == sha256_file(cb);
}

void summarize_callgrind(const CallgrindRun& run, const Artifact& profiled, int warmups, int calls,
                         InstructionProfile& ip) {
  std::vector<const CallgrindDump*> measured;
  for (int k = warmups + 1; k <= warmups + calls; ++k) {
    auto it = run.dumps.find(static_cast<uint64_t>(k));
    if (it == run.dumps.end()) {
      ip.unavailable_reason =
          run.client_requests
              ? fmt::format("callgrind wrote no dump for call {}", k)
              : "kwb-profile-worker was built without valgrind's client requests (valgrind/callgrind.h missing)";
      return;
    }
    measured.push_back(&it->second);
  }
  struct Sum {
    std::string name, object;
    uint64_t self = 0, inclusive = 0, calls = 0;
  };
  std::map<std::pair<std::string, std::string>, Sum> functions;
  uint64_t all_instructions = 0;
  for (const CallgrindDump* d : measured) {
    EventCounts e;
    e.instructions = d->total("Ir");
    e.data_reads = d->total("Dr");
    e.data_writes = d->total("Dw");
    e.d1_misses = d->total("D1mr") + d->total("D1mw");
    e.ll_misses = d->total("DLmr") + d->total("DLmw");
    e.i1_misses = d->total("I1mr");
    const uint64_t in_run = d->event(d->inclusive_calls_to("kwb_run"), "Ir");
    e.window_overhead = e.instructions >= in_run ? e.instructions - in_run : 0;
    ip.per_call.push_back(e);
    all_instructions += e.instructions;
    for (const CallgrindFunction& f : d->functions) {
      Sum& s = functions[{f.object, f.name}];
      s.name = f.name;
      s.object = f.object;
      s.self += d->event(f.self, "Ir");
      s.inclusive += d->event(f.inclusive, "Ir");
      s.calls += f.times_called;
    }
    if (ip.cache_model.empty()) {
      for (const std::string& desc : d->descriptions) {
        if (desc.starts_with("I1 cache") || desc.starts_with("D1 cache") || desc.starts_with("LL cache")) {
          ip.cache_model.push_back(desc);
        }
      }
    }
  }
  const double n = static_cast<double>(measured.size());
  auto mean = [&](uint64_t EventCounts::*field) {
    double s = 0;
    for (const EventCounts& e : ip.per_call) s += static_cast<double>(e.*field);
    return s / n;
  };
  ip.instructions_per_call = mean(&EventCounts::instructions);
  ip.d1_misses_per_call = mean(&EventCounts::d1_misses);
  ip.ll_misses_per_call = mean(&EventCounts::ll_misses);
  ip.data_reads_per_call = mean(&EventCounts::data_reads);
  ip.data_writes_per_call = mean(&EventCounts::data_writes);
  for (const auto& [key, s] : functions) {
    if (s.self == 0) continue;
    FunctionShare f;
    f.name = s.name;
    f.short_name = short_function_name(s.name);
    f.object = s.object;
    f.implementation = same_file(s.object, profiled.path);
    f.self_instructions = static_cast<double>(s.self) / n;
    f.inclusive_instructions = static_cast<double>(s.inclusive) / n;
    f.self_share = all_instructions > 0 ? static_cast<double>(s.self) / static_cast<double>(all_instructions) : 0;
    f.inclusive_share =
        all_instructions > 0 ? static_cast<double>(s.inclusive) / static_cast<double>(all_instructions) : 0;
    f.calls = static_cast<double>(s.calls) / n;
    ip.implementation_functions += f.implementation ? 1 : 0;
    ip.functions.push_back(std::move(f));
  }
  std::sort(ip.functions.begin(), ip.functions.end(), [](const FunctionShare& a, const FunctionShare& b) {
    return a.self_instructions != b.self_instructions ? a.self_instructions > b.self_instructions : a.name < b.name;
  });
  ip.available = true;
}

// ---- the short timing run behind the achieved bandwidth: kwb-worker, untouched ---------------------------------

void timing_pass(const Task& task, const Artifact& art, const InputSet& set, const ProfileOptions& o,
                 double peak_gb_per_s, WorkloadProfile& wp) {
  RooflineProfile& rl = wp.roofline;
  rl.warmups = o.timing_warmups;
  rl.peak_gb_per_s = peak_gb_per_s;
  WorkerSession session(task, art, session_options(o, 0x7173));
  LoadOutcome lo = session.start();
  if (!lo.ok) {
    wp.failures.push_back({set.case_->name, -1, "loads", lo.reason, lo.detail});
    rl.unavailable_reason = "the timing worker could not load the implementation";
    return;
  }
  for (int k = 0; k < o.timing_warmups + o.timing_calls; ++k) {
    CallResult r = session.call(set, k, CallMode::timing);
    if (!r.valid()) {
      add_failures(wp, r.failures);
      rl.unavailable_reason = "a timed call failed validation: no time is reported for it";
      rl.ns.clear();
      return;
    }
    if (k >= o.timing_warmups) rl.ns.push_back(r.ns);
  }
  CallResult inputs = session.verify_inputs(set, o.timing_warmups + o.timing_calls);
  session.shutdown();
  if (!inputs.failures.empty()) {
    add_failures(wp, inputs.failures);
    rl.unavailable_reason = "an input changed during the timed calls";
    rl.ns.clear();
    return;
  }
  if (rl.ns.empty()) {
    rl.unavailable_reason = "no timed calls were requested";
    return;
  }
  std::vector<double> ns(rl.ns.begin(), rl.ns.end());
  rl.median_ns = stats::median(ns);
  rl.achieved_gb_per_s = achieved_gb_per_s(rl.min_bytes, rl.median_ns);
  rl.fraction = roofline_fraction(rl.achieved_gb_per_s, peak_gb_per_s);
  rl.measured = true;
}

// The workloads to profile: those named, else every timing case.
std::vector<const Case*> profiled_workloads(const Task& task, const ProfileOptions& o) {
  std::vector<const Case*> workloads;
  if (o.workloads.empty()) {
    for (const Case& c : task.cases) {
      if (c.role == CaseRole::timing) workloads.push_back(&c);
    }
  } else {
    for (const std::string& name : o.workloads) workloads.push_back(&task.require_case("--workload", name, true));
  }
  if (workloads.empty()) throw DataError(fmt::format("{}: no case has role = \"timing\"", task.manifest.string()));
  return workloads;
}

// The valgrind-compatible build of the artifact (the same source with -mno-avx512f), tried at most once per profile,
// when valgrind cannot execute the artifact itself.
struct DerivedBuild {
  std::optional<Artifact> artifact;
  bool tried = false;
  std::string failure;         // why the build failed
  std::string unhandled_line;  // what valgrind said about the real artifact
};

// One profile's workloads, one after the other, and what they share.
struct Profiler {
  const Task& task;
  const Artifact& artifact;
  const ProfileOptions& o;
  const fs::path cache_root;
  ProfileReport& report;
  WorkDir work;
  DerivedBuild derived;

  WorkloadProfile workload(const Case& c) {
    const auto t0 = std::chrono::steady_clock::now();
    WorkloadProfile wp;
    wp.name = c.name;
    wp.dims = input_shapes_text(task, c);
    wp.roofline.min_bytes = min_bytes_moved(task, c);
    say(o, fmt::format("{}: generating inputs and the oracle's outputs", c.name));
    const InputSet set = make_input_set(task, c, 0, o.nonce);
    if (is_device(o.backend)) {
      device_passes(c, set, wp);
    } else {
      say(o, fmt::format("{}: allocations and hardware counters ({} calls in kwb-profile-worker)", c.name,
                         o.native_calls));
      native_pass(task, artifact, set, o, wp);
      instruction_pass(c, set, wp);
      timing_after_validation(c, set, report.bandwidth.peak_gb_per_s, wp);
    }
    wp.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return wp;
  }

  // Device backends: the kernel trace replaces callgrind and the host-side probes, which would describe the
  // runtime's host code, not the kernels (docs/profile.md).
  void device_passes(const Case& c, const InputSet& set, WorkloadProfile& wp) {
    const std::string host_only = fmt::format(
        "not measured for the {} backend: the host-side tools would count "
        "the device runtime, not the kernels (see the device trace)",
        o.backend);
    wp.instructions.unavailable_reason = host_only;
    wp.allocations.unavailable_reason = host_only;
    wp.hardware.unavailable_reason = host_only;
    say(o, fmt::format("{}: device kernel trace ({} warm-ups + {} traced calls in kwb-worker)", c.name, 2, 5));
    device_pass(task, artifact, set, o, wp);
    // Fraction of the host memory probe only where the device is this CPU (OpenCL on PoCL's CPU device is; a GPU's
    // memory is not what the probe measures).
    timing_after_validation(c, set, o.backend == BackendKind::opencl ? report.bandwidth.peak_gb_per_s : 0.0, wp);
  }

  void timing_after_validation(const Case& c, const InputSet& set, double peak_gb_per_s, WorkloadProfile& wp) {
    if (!wp.failures.empty()) {
      wp.roofline.unavailable_reason = "not run: the implementation failed validation while being profiled";
      return;
    }
    say(o, fmt::format("{}: short timing run ({} warm-ups + {} calls in kwb-worker)", c.name, o.timing_warmups,
                       o.timing_calls));
    timing_pass(task, artifact, set, o, peak_gb_per_s, wp);
  }

  void instruction_pass(const Case& c, const InputSet& set, WorkloadProfile& wp) {
    InstructionProfile& ip = wp.instructions;
    const bool large = wp.roofline.min_bytes > k_large_workload_bytes;
    ip.warmups = large ? 0 : o.callgrind_warmups;
    ip.calls = large ? 1 : std::max(o.callgrind_calls, 1);
    ip.note = large ? fmt::format(
                          "large workload (> {} MiB moved): one collected call, no warm-up, to bound "
                          "callgrind's run time",
                          k_large_workload_bytes >> 20)
                    : fmt::format("{} uncollected warm-up call(s), then {} collected call(s)", ip.warmups, ip.calls);
    if (!report.valgrind.found) {
      ip.unavailable_reason = report.valgrind.reason;
    } else if (!fs::exists(profile_worker_executable())) {
      ip.unavailable_reason =
          fmt::format("{} not found (build the kwb-profile-worker target)", profile_worker_executable().string());
    } else if (!wp.failures.empty()) {
      ip.unavailable_reason = "not run: the implementation failed validation in the profile worker";
    } else {
      say(o, fmt::format("{}: callgrind ({} warm-up + {} collected calls; slow)", c.name, ip.warmups, ip.calls));
      CallgrindRun run = callgrind(c, set, ip);
      take_callgrind_run(run, ip, wp);
    }
  }

  // callgrind on the artifact, or on the derived build once valgrind could not execute the artifact.
  CallgrindRun callgrind(const Case& c, const InputSet& set, const InstructionProfile& ip) {
    const Artifact* profiled = derived.artifact ? &*derived.artifact : &artifact;
    CallgrindRun run = run_under_callgrind(task, *profiled, set, ip.warmups + ip.calls, o, report.valgrind,
                                           work.path() / (c.name + (derived.artifact ? "-derived" : "")));
    if (run.ran || run.unhandled_instruction.empty() || derived.artifact || derived.tried) return run;
    derived.unhandled_line = run.unhandled_instruction;
    // valgrind 3.19 cannot decode AVX-512, which -march=native emits on machines that have it (docs/profile.md).
    derived.tried = true;
    say(o,
        "valgrind cannot execute this artifact (AVX-512?); building the same source with -mno-avx512f "
        "for callgrind");
    Artifact d = derived_build(artifact, {"-mno-avx512f"}, cache_root);
    if (!d.ok) {
      derived.failure = "the -mno-avx512f build failed: " + d.log.substr(0, 400);
      return run;
    }
    derived.artifact = std::move(d);
    return run_under_callgrind(task, *derived.artifact, set, ip.warmups + ip.calls, o, report.valgrind,
                               work.path() / (c.name + "-derived"));
  }

  void take_callgrind_run(CallgrindRun& run, InstructionProfile& ip, WorkloadProfile& wp) {
    const Artifact* used = derived.artifact ? &*derived.artifact : &artifact;
    if (derived.artifact) {
      ip.derived_build = true;
      ip.derived_reason = fmt::format(
          "{} cannot execute an instruction of the artifact ({}): most likely AVX-512, which -march=native emits "
          "on this CPU; callgrind ran the same source built with the recorded command plus -mno-avx512f",
          report.valgrind.version, derived.unhandled_line);
    }
    ip.profiled_identity = used->identity;
    for (Failure& f : run.failures) wp.failures.push_back(std::move(f));
    if (run.ran) {
      summarize_callgrind(run, *used, ip.warmups, ip.calls, ip);
    } else if (!run.unhandled_instruction.empty()) {
      ip.unavailable_reason =
          fmt::format("{} cannot execute an instruction of the artifact ({}){}", report.valgrind.version,
                      run.unhandled_instruction, derived.failure.empty() ? "" : "; " + derived.failure);
    } else {
      ip.unavailable_reason = run.reason;
    }
  }
};

}  // namespace

ProfileReport run_profile(const Task& task, const Artifact& artifact, const ProfileOptions& o) {
  if (!artifact.ok) throw DataError(fmt::format("{}: does not build; nothing to profile", artifact.source.string()));
  const std::vector<const Case*> workloads = profiled_workloads(task, o);
  ProfileReport report;
  report.task = task.name;
  report.implementation = artifact.source.string();
  report.identity = artifact.identity;
  report.backend = o.backend;
  report.valgrind = find_valgrind();
  say(o, "bandwidth probe (once per environment, then cached)");
  const fs::path cache_root = o.cache_root.empty() ? cache_dir() : o.cache_root;
  report.bandwidth = environment_bandwidth(cache_root);
  Profiler profiler{task, artifact, o, cache_root, report, WorkDir(o.raw_dir), {}};
  for (const Case* c : workloads) report.workloads.push_back(profiler.workload(*c));
  return report;
}

// ---- JSON --------------------------------------------------------------------------------------------------------

namespace {

nlohmann::json unavailable(const std::string& reason) { return {{"available", false}, {"reason", reason}}; }

nlohmann::json instructions_json(const InstructionProfile& ip) {
  if (!ip.available) {
    nlohmann::json instr = unavailable(ip.unavailable_reason);
    instr["tool"] = "callgrind";
    return instr;
  }
  nlohmann::json per_call = nlohmann::json::array();
  for (const EventCounts& e : ip.per_call) {
    per_call.push_back({{"instructions", e.instructions},
                        {"data_reads", e.data_reads},
                        {"data_writes", e.data_writes},
                        {"d1_misses", e.d1_misses},
                        {"ll_misses", e.ll_misses},
                        {"i1_misses", e.i1_misses},
                        {"window_overhead_instructions", e.window_overhead}});
  }
  nlohmann::json functions = nlohmann::json::array();
  for (const FunctionShare& f : ip.functions) {
    functions.push_back({{"name", f.name},
                         {"short_name", f.short_name},
                         {"object", f.object},
                         {"implementation", f.implementation},
                         {"self_instructions_per_call", f.self_instructions},
                         {"inclusive_instructions_per_call", f.inclusive_instructions},
                         {"self_share", f.self_share},
                         {"inclusive_share", f.inclusive_share},
                         {"calls_per_call", f.calls}});
  }
  return {{"available", true},
          {"tool", "callgrind"},
          {"window", "kwb_run only: CALLGRIND_TOGGLE_COLLECT around the call in kwb-profile-worker"},
          {"warmups", ip.warmups},
          {"calls", ip.calls},
          {"note", ip.note},
          {"instructions_per_call", ip.instructions_per_call},
          {"data_reads_per_call", ip.data_reads_per_call},
          {"data_writes_per_call", ip.data_writes_per_call},
          {"d1_misses_per_call", ip.d1_misses_per_call},
          {"ll_misses_per_call", ip.ll_misses_per_call},
          {"cache_model", ip.cache_model},
          {"per_call", per_call},
          {"implementation_functions", ip.implementation_functions},
          {"functions", functions},
          {"profiled_artifact",
           {{"derived_build", ip.derived_build},
            {"reason", ip.derived_reason},
            {"command", ip.profiled_identity.command},
            {"artifact_sha256", ip.profiled_identity.artifact_sha256}}}};
}

nlohmann::json roofline_json(const RooflineProfile& r) {
  nlohmann::json roof = {{"min_bytes", r.min_bytes},
                         {"min_bytes_rule", "every input and output tensor read or written once"},
                         {"label", "descriptive: not a verdict"}};
  if (r.measured) {
    roof["measured"] = true;
    roof["warmups"] = r.warmups;
    roof["timed_calls"] = r.ns.size();
    roof["ns"] = r.ns;
    roof["median_ns"] = r.median_ns;
    roof["achieved_gb_per_s"] = r.achieved_gb_per_s;
    roof["probe_gb_per_s"] = r.peak_gb_per_s;
    if (r.peak_gb_per_s > 0) roof["fraction_of_probe"] = r.fraction;
  } else {
    roof["measured"] = false;
    roof["reason"] = r.unavailable_reason;
  }
  return roof;
}

nlohmann::json to_json(const WorkloadProfile& w) {
  const AllocationProfile& a = w.allocations;
  nlohmann::json alloc = a.available ? nlohmann::json{{"available", true},
                                                      {"mechanism", a.mechanism},
                                                      {"calls", a.counts.size()},
                                                      {"count_per_call", a.count_per_call},
                                                      {"bytes_per_call", a.bytes_per_call},
                                                      {"counts", a.counts},
                                                      {"bytes", a.bytes},
                                                      {"frees", a.frees}}
                                     : unavailable(a.unavailable_reason);
  const HardwareCounterProfile& h = w.hardware;
  nlohmann::json hw = h.available ? nlohmann::json{{"available", true},
                                                   {"source", "perf_event_open, user space, inside kwb_run"},
                                                   {"instructions_per_call", h.instructions_per_call},
                                                   {"cycles_per_call", h.cycles_per_call},
                                                   {"instructions", h.instructions},
                                                   {"cycles", h.cycles}}
                                  : unavailable(h.unavailable_reason);
  nlohmann::json failures = nlohmann::json::array();
  for (const Failure& f : w.failures) {
    failures.push_back(to_json(f));
  }
  nlohmann::json j = {
      {"name", w.name},       {"dims", w.dims},          {"instructions", instructions_json(w.instructions)},
      {"allocations", alloc}, {"hardware_counters", hw}, {"roofline", roofline_json(w.roofline)},
      {"failures", failures}, {"seconds", w.seconds}};
  if (!w.device.mechanism.empty()) j["device"] = to_json(w.device);
  return j;
}

}  // namespace

nlohmann::json to_json(const ProfileReport& r) {
  nlohmann::json workloads = nlohmann::json::array();
  for (const WorkloadProfile& w : r.workloads) workloads.push_back(to_json(w));
  return {{"schema", k_profile_schema},
          {"schema_version", k_profile_schema_version},
          {"descriptive", "a profile describes; it never changes a decision"},
          {"task", r.task},
          {"backend", to_string(r.backend)},
          {"implementation", {{"path", r.implementation}, {"identity", to_json(r.identity)}}},
          {"valgrind",
           {{"found", r.valgrind.found},
            {"path", r.valgrind.path.string()},
            {"version", r.valgrind.version},
            {"reason", r.valgrind.reason}}},
          {"bandwidth_probe", to_json(r.bandwidth)},
          {"workloads", workloads}};
}

}  // namespace kwb
