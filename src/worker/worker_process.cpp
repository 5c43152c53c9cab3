#include "worker/worker_process.h"

#include "util/error.h"
#include "util/interrupt.h"
#include "util/paths.h"
#include "util/sha256.h"
#include "util/subprocess.h"
#include "util/worker_dirs.h"
#include "util/worker_user.h"
#include "worker/profile_filter.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/futex.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <seccomp.h>
#include <time.h>

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

extern char** environ;

namespace kwb {

std::vector<std::string> worker_environment() {
  // A fixed, minimal environment: allocator tunables (MALLOC_*), LD_PRELOAD or locale settings of whoever runs kwb
  // must not change how an implementation behaves or what it costs. Device runtimes keep their own variables.
  // The backends' device selection (KWB_OPENCL_PLATFORM, KWB_OPENCL_DEVICE, KWB_CUDA_DEVICE) too.
  static const char* const k_prefixes[] = {
      "POCL_", "OCL_ICD", "CUDA_", "NVIDIA_", "LD_LIBRARY_PATH=", "KWB_OPENCL_", "KWB_CUDA_DEVICE="};
  std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C",
                                  "KWB_PARENT_PID=" + std::to_string(::getpid())};
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view v(*e);
    for (const char* p : k_prefixes) {
      if (v.starts_with(p)) env.emplace_back(v);
    }
  }
  return env;
}

std::vector<std::string> worker_environment_identity() {
  std::vector<std::string> env = worker_environment();
  std::erase_if(env, [](const std::string& e) { return e.starts_with("KWB_PARENT_PID="); });
  std::sort(env.begin(), env.end());
  return env;
}

const std::string& executable_sha256(const std::filesystem::path& exe) {
  static std::map<std::filesystem::path, std::string> digests;
  auto it = digests.find(exe);
  if (it == digests.end()) it = digests.emplace(exe, sha256_file(exe)).first;
  return it->second;
}

namespace {

// Whether every id a worker may get (worker_user_of: the base plus any process id up to pid_max) is mapped in
// /proc/self/`map` ("inside outside count" lines): in a user namespace that maps fewer ids (rootless containers map
// 65536), setresuid to them fails.
bool worker_ids_mapped(const char* map) {
  std::ifstream pid_max_file("/proc/sys/kernel/pid_max");
  uint64_t pid_max = 1ull << 22;
  if (!(pid_max_file >> pid_max)) pid_max = 1ull << 22;
  const uint64_t first = k_worker_id_base, last = k_worker_id_base + pid_max;
  std::ifstream in(map);
  for (uint64_t inside = 0, outside = 0, count = 0; in >> inside >> outside >> count;) {
    if (inside <= first && last < inside + count) return true;
  }
  return false;
}

// A root kwb's workers need their ids (util/worker_user.h); where this namespace lacks them, say so before any
// worker starts (exit 69) rather than let each one fail to switch.
void require_worker_ids() {
  static const bool mapped = worker_ids_mapped("/proc/self/uid_map") && worker_ids_mapped("/proc/self/gid_map");
  if (mapped) return;
  throw Error(ExitCode::unavailable,
              fmt::format("kwb runs as root and gives each worker a user of its own ({} plus the worker's process "
                          "id), but this user namespace does not map those ids (/proc/self/uid_map, gid_map): run kwb "
                          "as root outside a user namespace, map the ids into it (newuidmap, /etc/subuid), or run kwb "
                          "as an unprivileged user (docs/threat-model.md, \"Who the worker is\")",
                          k_worker_id_base));
}

}  // namespace

const cpu_set_t& cpus_at_start() {
  // Read once, before any placement: after the first one the parent's own mask is one CPU (place_on_cpus).
  static const cpu_set_t allowed = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) != 0) CPU_ZERO(&set);
    return set;
  }();
  return allowed;
}

int cpus_kwb_may_use() { return std::max(1, CPU_COUNT(&cpus_at_start())); }

WorkerProcess::WorkerProcess(const std::filesystem::path& worker_exe, std::chrono::milliseconds timeout,
                             const std::vector<std::string>& wrapper)
    // At most a year: every deadline is now + m_timeout, which must not overflow steady_clock's nanoseconds (292
    // years) whatever a caller passes (the verbs' options are bounded already: cli/options.h).
    : m_timeout(
          std::clamp(timeout, std::chrono::milliseconds(1), std::chrono::milliseconds(std::chrono::hours(24 * 365)))),
      m_profile_worker(worker_exe.filename() == "kwb-profile-worker") {
  require_main_thread("a worker");
  throw_if_interrupted();
  if (workers_change_user()) require_worker_ids();
  int sv[2];
  KWB_POSIX_CALL(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv));
  UniqueFd parent_end(sv[0]);
  UniqueFd child_end(sv[1]);
  m_output = UniqueFd(KWB_POSIX_CALL(::memfd_create("kwb-worker-output", MFD_CLOEXEC)));
  // The control page (worker/protocol.h): one page both processes map, and which nothing else can reach.
  m_control_fd = UniqueFd(KWB_POSIX_CALL(::memfd_create("kwb-control", MFD_CLOEXEC)));
  KWB_POSIX_CALL(::ftruncate(m_control_fd.get(), protocol::k_control_bytes));
  void* page = ::mmap(nullptr, protocol::k_control_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, m_control_fd.get(), 0);
  if (page == MAP_FAILED) throw_system_error("mmap(control page)", __FILE__, __LINE__, errno);
  m_control = new (page) protocol::ControlBlock();

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, m_output.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, m_output.get(), 2);
  posix_spawn_file_actions_adddup2(&actions, child_end.get(), protocol::k_channel_fd);
  posix_spawn_file_actions_adddup2(&actions, m_control_fd.get(), protocol::k_control_fd);
  // A new process group: a kill reaches whatever the implementation may have started.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<std::string> args = wrapper;
  args.push_back(worker_exe.string());
  const std::string exe = args.front();
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::vector<std::string> env_strings = worker_environment();
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int rc = ::posix_spawn(&m_pid, exe.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    m_pid = -1;
    throw InternalError(fmt::format("cannot start the worker {}: {}", exe, std::strerror(rc)));
  }
  // From here until it is reaped, an interruption of kwb kills the worker's group (util/interrupt.h).
  if (!register_child_group(m_pid)) {
    (void)kill_and_reap();
    throw InternalError("too many child processes at once");
  }
  m_channel = Channel(std::move(parent_end));
  m_has_cpu_clock = ::clock_getcpuclockid(m_pid, &m_cpu_clock) == 0;
  // The exact CPU clock: a software task-clock counter on the worker, opened before it can start a thread (it is
  // still reading its first request), inherited by every thread it starts.
  perf_event_attr a{};
  a.type = PERF_TYPE_SOFTWARE;
  a.size = sizeof a;
  a.config = PERF_COUNT_SW_TASK_CLOCK;
  a.inherit = 1;
  const long fd = ::syscall(SYS_perf_event_open, &a, m_pid, -1, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd >= 0) {
    m_task_clock = UniqueFd(static_cast<int>(fd));
    m_cpu_clock_note = "perf task-clock";
  } else {
    m_cpu_clock_note = fmt::format("process CPU clock (perf_event_open: {})", std::strerror(errno));
  }
}

// On the cpu backend the parent spins while a call runs (worker/protocol.h), so the two must never share a CPU: the
// scheduler places a woken process on its waker's CPU, where it would wait behind the spinning parent. With two
// CPUs or more, the parent takes the last CPU it may use and the worker (and every thread it starts) the others.
// With one CPU there is nothing to split, and the parent yields while it waits (await_state).
void WorkerProcess::place_on_cpus(bool apart) {
  const cpu_set_t& allowed = cpus_at_start();
  if (CPU_COUNT(&allowed) < 2) return;
  if (!apart) {
    // A device backend: the runtime's threads (PoCL's CPU device) may use every CPU; the parent sleeps while the
    // call runs (await_state), so it takes none from them.
    (void)::sched_setaffinity(m_pid, sizeof allowed, &allowed);
    return;
  }
  int parent_cpu = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) parent_cpu = c;
  }
  cpu_set_t mine;
  CPU_ZERO(&mine);
  CPU_SET(parent_cpu, &mine);
  cpu_set_t theirs = allowed;
  CPU_CLR(parent_cpu, &theirs);
  if (::sched_setaffinity(0, sizeof mine, &mine) == 0) {
    m_own_cpu = ::sched_setaffinity(m_pid, sizeof theirs, &theirs) == 0;
  }
}

int64_t WorkerProcess::cpu_time_ns() const {
  if (m_task_clock.valid()) {
    uint64_t v = 0;
    if (::read(m_task_clock.get(), &v, sizeof v) == static_cast<ssize_t>(sizeof v)) return static_cast<int64_t>(v);
    return -1;
  }
  timespec t{};
  if (!m_has_cpu_clock || m_pid <= 0 || ::clock_gettime(m_cpu_clock, &t) != 0) return -1;
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

int WorkerProcess::thread_count() const {
  if (m_pid <= 0) return -1;
  // Field 20 of /proc/PID/stat; the command name (field 2) is in parentheses and may hold spaces, so count from
  // the last ')'.
  std::ifstream in(fmt::format("/proc/{}/stat", m_pid));
  std::string line;
  if (!std::getline(in, line)) return -1;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(line.substr(close + 1));
  std::string f;
  for (int i = 3; i <= 20 && fields >> f; ++i) {
    if (i == 20) return std::atoi(f.c_str());
  }
  return -1;
}

WorkerProcess::~WorkerProcess() {
  if (m_pid > 0) (void)kill_and_reap();
  end_runtime_cache();  // a worker forgotten rather than reaped (try_reap) leaves its private directory too
  if (m_control != nullptr) ::munmap(m_control, protocol::k_control_bytes);
}

std::optional<int> WorkerProcess::try_reap() {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(m_pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno == EINTR) return std::nullopt;
    // Not a child of this process any more (nothing to reap): forget it.
    unregister_child_group(m_pid);
    m_pid = -1;
    return 0;
  }
  if (info.si_pid == 0) return std::nullopt;
  const int status = reap_child(m_pid);
  m_pid = -1;
  end_runtime_cache();
  return status;
}

int WorkerProcess::kill_and_reap() {
  ::kill(-m_pid, SIGKILL);
  ::kill(m_pid, SIGKILL);
  const int status = reap_child(m_pid);
  m_pid = -1;
  end_runtime_cache();
  return status;
}

void WorkerProcess::fail_protocol(const std::string& detail) {
  if (m_pid > 0) (void)kill_and_reap();
  WorkerDeath d;
  d.reason = FailureReason::protocol;
  d.detail = detail + "; worker killed";
  const std::string tail = output_tail(600);
  if (!tail.empty()) d.detail += "; its last output: " + tail;
  m_death = d;
}

std::string WorkerProcess::output_tail(size_t max_bytes) const {
  off_t size = ::lseek(m_output.get(), 0, SEEK_END);
  if (size <= 0) return "";
  size_t n = std::min(static_cast<size_t>(size), max_bytes);
  std::string s(n, '\0');
  ssize_t got = ::pread(m_output.get(), s.data(), n, size - static_cast<off_t>(n));
  s.resize(got > 0 ? static_cast<size_t>(got) : 0);
  return s;
}

FailureReason WorkerProcess::classify_fault(uint64_t address, const std::string& access, WorkerDeath& d) const {
  for (const Region& r : m_regions) {
    if (address < r.region_begin || address >= r.region_end) continue;
    d.fault_buffer = r.id;
    const bool inside = address >= r.data_begin && address < r.data_end;
    if (address >= r.data_end) {
      const uint64_t past = address - r.data_end + 1;
      d.fault_where = fmt::format("{} byte{} past the end", past, past == 1 ? "" : "s");
    } else if (address < r.data_begin) {
      const uint64_t before = r.data_begin - address;
      d.fault_where = fmt::format("{} byte{} before the start", before, before == 1 ? "" : "s");
    } else {
      d.fault_where = fmt::format("at byte {}", address - r.data_begin);
    }
    // A read outside a tensor's data reaches its fence (an input's PROT_NONE pages, an output's guard pages).
    if (!inside && access == "read") return FailureReason::out_of_bounds_read;
    if (!r.writable) return inside ? FailureReason::input_modified : FailureReason::out_of_bounds_write;
    if (!inside) return FailureReason::out_of_bounds_write;
    return FailureReason::crashed;
  }
  return FailureReason::crashed;
}

void WorkerProcess::record_death(Channel::Status status, const std::string& malformed_detail) {
  WorkerDeath d;
  // A timeout and a malformed message are classified by how they were found; any other death by how it ended.
  const bool classified = status == Channel::Status::timeout || status == Channel::Status::malformed;
  if (status == Channel::Status::timeout) {
    ::kill(-m_pid, SIGKILL);
    ::kill(m_pid, SIGKILL);
    d.reason = FailureReason::timeout;
    d.detail = fmt::format("no answer within {:.1f} s; worker killed", static_cast<double>(m_timeout.count()) / 1000.0);
  }
  if (status == Channel::Status::malformed) {
    ::kill(-m_pid, SIGKILL);
    ::kill(m_pid, SIGKILL);
    d.reason = FailureReason::protocol;
    d.detail = "worker sent a malformed message (" + malformed_detail + "); worker killed";
  }
  const int wstatus = reap_dead_worker();
  // A worker killed by kwb's own interruption handler, or found dead while kwb is being interrupted, is kwb's doing:
  // never the candidate's failure, and nothing is recorded of it.
  if (const int sig = interrupt_signal(); sig != 0) throw Interrupted(sig);
  if (!classified) {
    if (WIFSIGNALED(wstatus)) {
      classify_signal(WTERMSIG(wstatus), d);
    } else if (WIFEXITED(wstatus)) {
      d.exit_code = WEXITSTATUS(wstatus);
      d.reason = FailureReason::exited;
      d.detail = fmt::format("worker exited with status {} in the middle of a request", d.exit_code);
    } else {
      d.reason = FailureReason::crashed;
      d.detail = "worker disappeared";
    }
  }
  std::string tail = output_tail(600);
  if (!tail.empty()) d.detail += "; its last output: " + tail;
  m_death = d;
}

int WorkerProcess::reap_dead_worker() {
  // The worker closed its end or was killed: reap it. A worker that closed the socket but lingers is killed too.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    if (const std::optional<int> reaped = try_reap()) return *reaped;
    if (interrupt_signal() != 0 || std::chrono::steady_clock::now() > give_up) return kill_and_reap();
    ::usleep(1000);
  }
}

void WorkerProcess::classify_signal(int signal, WorkerDeath& d) const {
  d.signal = signal;
  // A fault inside the sandbox ends the worker by SIGKILL after its report (its action cannot be reset to the
  // default there: worker_main.cpp's on_fault); the report names the fault's signal.
  if (d.signal == SIGKILL && m_fault) {
    const std::optional<std::uint64_t> reported = protocol::unsigned_field(*m_fault, "signal");
    if (reported && (*reported == SIGSEGV || *reported == SIGBUS || *reported == SIGILL || *reported == SIGFPE)) {
      d.signal = static_cast<int>(*reported);
    }
  }
  d.reason = d.signal == SIGABRT ? FailureReason::aborted : FailureReason::crashed;
  d.detail = fmt::format("worker killed by signal {} ({})", d.signal, ::strsignal(d.signal));
  if (d.signal == SIGSYS) {
    // The seccomp filter (worker/sandbox.h) denied a system call; the worker's handler names it.
    d.reason = FailureReason::sandbox_violation;
    if (m_fault && protocol::unsigned_field(*m_fault, "syscall")) {
      const int nr = static_cast<int>(*protocol::unsigned_field(*m_fault, "syscall"));
      char* name = ::seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
      d.detail = fmt::format("the sandbox denied system call {} ({}); the worker was killed (SIGSYS)",
                             name != nullptr ? name : "?", nr);
      std::free(name);
    } else {
      d.detail = "the sandbox denied a system call; the worker was killed (SIGSYS)";
    }
  } else if (d.signal == SIGXCPU || d.signal == SIGXFSZ) {
    d.reason = FailureReason::resource_limit;
    d.detail += d.signal == SIGXCPU ? ": the worker's CPU-time limit (RLIMIT_CPU) was reached"
                                    : ": the worker's output file-size limit (RLIMIT_FSIZE) was reached";
  } else if (m_fault && protocol::text_field(*m_fault, "resource") == "memory") {
    d.reason = FailureReason::resource_limit;
    d.detail = "an allocation failed at the worker's address-space limit (RLIMIT_AS); worker aborted";
  } else if (m_fault) {
    d.fault_address = protocol::unsigned_field(*m_fault, "address").value_or(0);
    if (d.signal == SIGSEGV || d.signal == SIGBUS) {
      d.reason = classify_fault(*d.fault_address, protocol::text_field(*m_fault, "access"), d);
    }
    d.detail += fmt::format(" at address {:#x}", *d.fault_address);
  }
}

std::optional<nlohmann::json> WorkerProcess::request(const nlohmann::json& message, std::span<const int> fds) {
  throw_if_interrupted();
  if (!alive()) return std::nullopt;
  thaw();  // every message is answered, so a frozen worker runs again first
  if (!m_channel.send(message, fds)) {
    record_death(Channel::Status::closed);
    return std::nullopt;
  }
  return request_reply(std::chrono::steady_clock::now() + m_timeout);
}

std::optional<nlohmann::json> WorkerProcess::request_reply(std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    Channel::Received r = m_channel.receive(deadline);
    if (r.status != Channel::Status::message) {
      record_death(r.status, r.error);
      return std::nullopt;
    }
    if (r.message.value("type", "") == protocol::k_fault) {
      m_fault = r.message;  // the death (and exit status) follows
      continue;
    }
    return r.message;
  }
}

std::string probe_backend(const std::filesystem::path& worker_exe, BackendKind backend) {
  WorkerProcess w(worker_exe, std::chrono::seconds(60));
  // A device runtime may need a writable directory to start at all (PoCL's kernel cache).
  const std::string dir =
      !is_device(backend) ? std::string() : w.use_runtime_cache(worker_runtime_cache_dir(backend, "probe").string());
  auto reply = w.request({{"type", protocol::k_probe}, {"backend", to_string(backend)}, {"runtime_cache_dir", dir}});
  if (!reply) {
    throw Error(ExitCode::unavailable,
                fmt::format("backend '{}': the worker died while opening it: {}", backend, w.m_death->detail));
  }
  if (reply->value("type", "") != protocol::k_probed) {
    std::string detail = protocol::text_field(*reply, "detail");
    if (detail.empty()) detail = "no detail";
    const std::string reason = protocol::text_field(*reply, "reason");
    if (reason == protocol::k_backend_unavailable) throw Error(ExitCode::unavailable, detail);
    if (reason == protocol::k_backend_usage) throw UsageError(detail);
    throw Error(ExitCode::unavailable, fmt::format("backend '{}' could not be opened: {}", backend, detail));
  }
  (void)w.shutdown();
  return reply->value("description", std::string());
}

LoadOutcome WorkerProcess::load(const std::filesystem::path& artifact, BackendKind backend, int threads,
                                const std::string& task, const WorkerLimits& limits, const DeviceOptions& device) {
  LoadOutcome out;
  const std::string runtime_dir = use_runtime_cache(device.runtime_cache_dir);
  // The artifact travels as a descriptor: the worker may run as a user of its own, who cannot reach kwb's cache.
  const int artifact_fd = ::open(artifact.c_str(), O_RDONLY | O_CLOEXEC);
  if (artifact_fd < 0) {
    throw InternalError(fmt::format("cannot open the built artifact {}: {}", artifact.string(), std::strerror(errno)));
  }
  UniqueFd artifact_owner(artifact_fd);
  std::vector<int> fds = {artifact_fd};
  UniqueFd filter;
  // Before the worker starts any thread (its runtime starts them while loading): threads inherit its CPUs.
  m_spin_for_done = !is_device(backend) && !device.untimed;
  m_device_backend = is_device(backend);
  place_on_cpus(m_spin_for_done);
  m_discount_stalls = m_own_cpu && m_spin_for_done && threads <= 1;
  std::filesystem::path load_path = artifact;
  if (m_profile_worker) {
    filter = profile_filter_program(m_pid);  // the profile worker's sandbox (worker/profile_filter.h)
    fds.push_back(filter.get());
    // valgrind reads the object's symbols by its file name, as the worker's user: when that is a user of its own, the
    // object is copied where it may read (and not write) it, at a path fixed by its content.
    if (workers_change_user()) load_path = readable_copy(artifact);
  }
  auto reply = request({{"type", protocol::k_load},
                        {"artifact", load_path.string()},
                        {"backend", to_string(backend)},
                        {"threads", threads},
                        {"task", task},
                        {"address_space_bytes", limits.address_space_bytes},
                        {"cpu_seconds", limits.cpu_seconds},
                        {"trace", device.trace},
                        {"cold", device.cold},
                        {"parent_spins", m_spin_for_done},
                        {"runtime_cache_dir", runtime_dir}},
                       fds);
  if (!reply) {
    out.reason = m_death->reason;
    out.detail = "while loading: " + m_death->detail;
    return out;
  }
  if (reply->value("type", "") != protocol::k_loaded) {
    const auto detail = reply->find("detail");
    out.detail = detail != reply->end() && detail->is_string()
                     ? detail->get<std::string>()
                     : "unexpected answer to load: " + reply->dump().substr(0, 200);
    const std::string said =
        reply->value("type", "") == protocol::k_error ? protocol::text_field(*reply, "reason") : std::string();
    // The worker opens the backend before it loads the implementation, but the implementation's constructors can
    // write this same answer (tests/adversarial/forged_backend_error.cpp). A device backend that was probed fine
    // before the verb (probe_backend) and is unavailable at load is the machine's doing: exit 69, no verdict (a
    // forgery of it can deny a verdict, never win one). A usage error (a device selection that names nothing) is
    // caught by the probe, and on cpu nothing can be unavailable: such answers at load are forged, and fall through
    // to the implementation's protocol failure.
    if (said == protocol::k_backend_unavailable && is_device(backend)) throw Error(ExitCode::unavailable, out.detail);
    // Reasons the worker may give for a load it refused; anything else is a forged or garbled answer.
    static constexpr FailureReason k_load_reasons[] = {FailureReason::load_failed, FailureReason::missing_symbol,
                                                       FailureReason::abi_mismatch, FailureReason::setup_failed};
    const std::optional<FailureReason> reason = parse_failure_reason(said);
    const bool expected =
        reason && std::find(std::begin(k_load_reasons), std::end(k_load_reasons), *reason) != std::end(k_load_reasons);
    out.reason = expected ? *reason : FailureReason::protocol;
    return out;
  }
  out.ok = true;
  out.device = reply->value("device", std::string());
  if (auto s = reply->find("sandbox"); s != reply->end() && s->is_array()) {
    for (const auto& f : *s) {
      if (f.is_string()) out.sandbox.push_back(f.get<std::string>());
    }
  }
  return out;
}

bool WorkerProcess::map(int id, const SharedBuffer& buffer) { return map_buffer(id, buffer, false); }

bool WorkerProcess::replace(int id, const SharedBuffer& buffer) { return map_buffer(id, buffer, true); }

bool WorkerProcess::map_buffer(int id, const SharedBuffer& buffer, bool replace) {
  const BufferLayout& l = buffer.layout();
  nlohmann::json b = {{"id", id},
                      {"total", l.total},
                      {"data_offset", l.data_offset},
                      {"nbytes", l.nbytes},
                      {"writable", !buffer.read_only_for_others()},
                      {"replace", replace}};
  const int fd = buffer.fd();
  auto reply = request({{"type", protocol::k_map}, {"buffers", nlohmann::json::array({b})}}, std::span(&fd, 1));
  if (!reply) return false;
  // The answer comes from a process the candidate controls: anything but a well-formed `mapped` for this buffer is
  // the candidate's protocol violation, never kwb's internal error.
  try {
    if (reply->value("type", "") != protocol::k_mapped) throw std::runtime_error("not a mapped answer");
    const auto& list = reply->at("buffers");
    if (!list.is_array() || list.size() != 1) throw std::runtime_error("not one buffer");
    const auto& m = list.at(0);
    if (m.at("id").get<int>() != id) throw std::runtime_error("another buffer's id");
    Region r{id,
             !buffer.read_only_for_others(),
             m.at("region_begin").get<uint64_t>(),
             m.at("region_end").get<uint64_t>(),
             m.at("data_begin").get<uint64_t>(),
             m.at("data_end").get<uint64_t>()};
    std::erase_if(m_regions, [&](const Region& x) { return x.id == id; });
    m_regions.push_back(r);
  } catch (const std::exception& e) {
    fail_protocol(fmt::format("the worker's answer to mapping buffer {} is not a valid `mapped` message ({}): {}", id,
                              e.what(), reply->dump().substr(0, 200)));
    return false;
  }
  return true;
}

bool WorkerProcess::unmap(const std::vector<int>& ids) {
  auto reply = request({{"type", protocol::k_unmap}, {"ids", ids}});
  std::erase_if(m_regions, [&](const Region& r) { return std::find(ids.begin(), ids.end(), r.id) != ids.end(); });
  return reply.has_value();
}

bool WorkerProcess::await_state(uint32_t word, std::chrono::steady_clock::time_point deadline, bool spin,
                                int64_t* stalled_ns, const timespec* since) {
  std::atomic<uint32_t>& state = m_control->state;
  const auto spin_started = std::chrono::steady_clock::now();
  timespec last{};
  if (stalled_ns != nullptr) {
    if (since != nullptr) {
      last = *since;
    } else {
      ::clock_gettime(CLOCK_MONOTONIC, &last);
    }
  }
  for (uint64_t i = 0;; ++i) {
    const uint32_t now_state = state.load(std::memory_order_acquire);
    if (now_state == word) return true;
    if (stalled_ns != nullptr) {
      // Gaps in this loop are times this process was not running (preempted on a busy machine); the worker may have
      // said ready in one and spun, unseen, since.
      timespec t{};
      ::clock_gettime(CLOCK_MONOTONIC, &t);
      const int64_t gap = (t.tv_sec - last.tv_sec) * 1'000'000'000LL + (t.tv_nsec - last.tv_nsec);
      if (gap > k_stall_ns) *stalled_ns += gap;
      last = t;
    }
    if (spin) {
      protocol::cpu_relax();
      if ((i & 1023) != 1023) continue;
    } else {
      // Sleep until the worker changes the word (it wakes the futex on armed and done), at most 1 ms at a time.
      timespec ts{0, 1'000'000};
      ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state), FUTEX_WAIT, now_state, &ts, nullptr, 0);
    }
    // Every ~1024 spins (a few microseconds) or every wake-up: is the worker still there, on time, and silent?
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline) {
      record_death(Channel::Status::timeout);
      return false;
    }
    pollfd p{m_channel.fd(), POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) {
      Channel::Received r = m_channel.receive(now + std::chrono::milliseconds(100));
      if (r.status != Channel::Status::message) {
        record_death(r.status, r.error);
        return false;
      }
      if (r.message.value("type", "") == protocol::k_fault) {
        m_fault = r.message;  // its death follows
        continue;
      }
      if (r.message.value("type", "") == protocol::k_error &&
          parse_failure_reason(protocol::text_field(r.message, "reason")) == FailureReason::device_fault) {
        WorkerDeath d;
        fail_protocol("");
        d.reason = FailureReason::device_fault;
        d.detail = "the device runtime failed during the call: " + protocol::text_field(r.message, "detail");
        m_death = d;
        return false;
      }
      fail_protocol("the worker sent a message in the middle of a call, which only the control page may carry: " +
                    r.message.dump().substr(0, 200));
      return false;
    }
    // A long call on a machine with few cores: let the implementation's own threads have this core now and then.
    if (spin && now - spin_started > std::chrono::microseconds(50)) ::sched_yield();
  }
}

namespace {

int64_t span_ns(const timespec& a, const timespec& b) {
  return (b.tv_sec - a.tv_sec) * 1'000'000'000LL + (b.tv_nsec - a.tv_nsec);
}

}  // namespace

RunOutcome WorkerProcess::run(const RunRequest& req, const RunHooks& hooks) {
  throw_if_interrupted();
  const uint64_t call = ++m_calls;
  RunOutcome out;
  auto fail = [&]() {
    out.death = m_death;
    return out;
  };
  if (!alive()) return fail();
  thaw();
  if (!send_run(call, req)) return fail();
  const auto deadline = std::chrono::steady_clock::now() + m_timeout;
  using protocol::Phase;
  using protocol::state_word;
  std::atomic<uint32_t>& state = m_control->state;
  // The worker parses the request and arms; it answers on the socket instead only when it refuses the request.
  // On a CPU of its own the parent spins for armed and for the answer below rather than sleep: each sleep costs a
  // wake-up (an inter-processor interrupt, a VM exit on a virtual machine), tens of microseconds a call here, in
  // every block, for no one's benefit; the worker's CPU is not touched.
  if (!await_state(state_word(call, Phase::armed), deadline, m_own_cpu)) return fail();
  // The worker is armed and asleep. Its CPU clock is read before the call's data goes in: from here on, whatever any
  // of its threads does (while the parent writes the inputs and poison, while it flushes caches, while the worker
  // wakes) is charged to the call (session/worker_session.h, charged_ns).
  CallClocks c;
  c.cpu_a = cpu_time_ns();
  if (m_last_capture_cpu >= 0 && c.cpu_a >= 0) out.gap_cpu_ns = c.cpu_a - m_last_capture_cpu;
  if (hooks.before_wake) hooks.before_wake();
  // Stalls of this process count from the wake on: the worker may say ready and spin while this process is not
  // running, in the futex call below as well as in the wait. Only where the worker cannot cause them
  // (m_discount_stalls); elsewhere they are charged as the worker's.
  ::clock_gettime(CLOCK_MONOTONIC, &c.woke);
  state.store(state_word(call, Phase::wake), std::memory_order_release);
  protocol::futex_wake(state);
  if (!await_state(state_word(call, Phase::ready), deadline, true, m_discount_stalls ? &c.stalled_ns : nullptr,
                   &c.woke)) {
    return fail();
  }
  ::clock_gettime(CLOCK_MONOTONIC, &c.seen_ready);
  c.cpu_b = cpu_time_ns();
  // CLOCK_MONOTONIC through the vDSO (docs/timing.md), read here, in the parent, where no candidate code runs.
  ::clock_gettime(CLOCK_MONOTONIC, &c.t0);
  state.store(state_word(call, Phase::go), std::memory_order_release);
  if (!await_state(state_word(call, Phase::done), deadline, m_spin_for_done)) return fail();
  ::clock_gettime(CLOCK_MONOTONIC, &c.t1);
  c.cpu_1 = cpu_time_ns();
  c.cpu_read = c.cpu_1;
  out.rc = m_control->rc.load(std::memory_order_relaxed);
  if (m_device_backend && !read_back(call, deadline, c)) return fail();
  if (hooks.at_done) hooks.at_done();
  c.cpu_2 = cpu_time_ns();
  m_last_capture_cpu = c.cpu_2;
  state.store(state_word(call, Phase::collect), std::memory_order_release);
  protocol::futex_wake(state);
  call_figures(c, out);
  if (!answer(call, deadline, c.cpu_a, out)) return fail();
  return out;
}

bool WorkerProcess::send_run(uint64_t call, const RunRequest& req) {
  protocol::RunMessage message;
  message.call = call;
  message.inputs = req.inputs;
  message.outputs = req.outputs;
  message.scalars = req.scalars;
  message.stack_offset = req.stack_offset;
  if (m_channel.send(protocol::to_json(message))) return true;
  record_death(Channel::Status::closed);
  return false;
}

// A device worker reads the outputs back before the parent captures them (worker/protocol.h, downloaded): that read
// is timed as CPU and as wall time, like the uploads before go, and nothing after it can change the outputs the
// parent validates.
bool WorkerProcess::read_back(uint64_t call, std::chrono::steady_clock::time_point deadline, CallClocks& c) {
  using protocol::Phase;
  using protocol::state_word;
  // The worker spins until this word, then reads the outputs back; the parent sleeps on the futex meanwhile, as for
  // done: the read runs on the runtime's threads, which must have the CPUs.
  m_control->state.store(state_word(call, Phase::read_back), std::memory_order_release);
  if (!await_state(state_word(call, Phase::downloaded), deadline, false)) return false;
  timespec read{};
  ::clock_gettime(CLOCK_MONOTONIC, &read);
  c.cpu_read = cpu_time_ns();
  c.read_wall_ns = span_ns(c.t1, read);
  return true;
}

void WorkerProcess::call_figures(const CallClocks& c, RunOutcome& out) {
  out.ns = span_ns(c.t0, c.t1);
  out.reaction_ns = span_ns(c.seen_ready, c.t0) + c.stalled_ns;
  out.cpu_windows_exact = cpu_clock_exact();
  if (c.cpu_a >= 0 && c.cpu_b >= 0) out.pre_cpu_ns = c.cpu_b - c.cpu_a;
  if (c.cpu_b >= 0 && c.cpu_1 >= 0) out.inside_cpu_ns = c.cpu_1 - c.cpu_b;
  if (c.cpu_read >= 0 && c.cpu_2 >= 0) out.post_cpu_ns = c.cpu_2 - c.cpu_read;
  if (m_device_backend) {
    out.pre_wall_ns = std::max<int64_t>(0, span_ns(c.woke, c.seen_ready) - c.stalled_ns);
    out.read_wall_ns = c.read_wall_ns;
    if (c.cpu_1 >= 0 && c.cpu_read >= 0) out.read_cpu_ns = c.cpu_read - c.cpu_1;
  }
}

// After collect the worker answers on the socket with the call's figures. On a CPU of its own the parent spins up to
// 300 us for the answer before it sleeps on the socket (docs/timing.md).
bool WorkerProcess::answer(uint64_t call, std::chrono::steady_clock::time_point deadline, int64_t cpu_a,
                           RunOutcome& out) {
  if (m_own_cpu) {
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(300);
    for (uint32_t i = 0;; ++i) {
      pollfd p{m_channel.fd(), POLLIN, 0};
      if (::poll(&p, 1, 0) != 0) break;
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > spin_until) break;
      protocol::cpu_relax();
    }
  }
  auto reply = request_reply(deadline);
  if (!reply) return false;
  if (reply->value("type", "") != protocol::k_ran || protocol::unsigned_field(*reply, "call") != call) {
    if (reply->value("type", "") == protocol::k_error &&
        parse_failure_reason(protocol::text_field(*reply, "reason")) == FailureReason::device_fault) {
      fail_protocol("");
      WorkerDeath d;
      d.reason = FailureReason::device_fault;
      d.detail = "the device runtime failed during the call: " + protocol::text_field(*reply, "detail");
      m_death = d;
    } else {
      fail_protocol("unexpected answer to a run request: " + reply->dump().substr(0, 200));
    }
    return false;
  }
  const int64_t cpu_answer = cpu_time_ns();  // the worker sleeps in recvmsg now
  if (cpu_a >= 0 && cpu_answer >= 0) out.cycle_cpu_ns = cpu_answer - cpu_a;
  try {
    parse_ran(*reply, out);
  } catch (const std::exception& e) {
    fail_protocol(fmt::format("malformed answer to a run request ({}): {}", e.what(), reply->dump().substr(0, 200)));
    return false;
  }
  return true;
}

void WorkerProcess::parse_ran(const nlohmann::json& reply_json, RunOutcome& out) {
  const nlohmann::json* reply = &reply_json;
  out.answered = true;
  out.descriptors_intact = reply->at("descriptors_intact").get<bool>();
  // An answer must fit the worker's backend: device figures from a cpu worker, or profile figures from a timing
  // worker, were written by something other than kwb's worker code (the implementation, having taken over its
  // control flow). The caller ends the worker for a protocol violation.
  if (!m_device_backend) {
    for (const char* field : {"device_ns", "inputs_modified_on_device", "written_outside_on_device",
                              "off_stream_commands", "off_stream_detail", "runtime_tampered", "kernels"}) {
      if (reply->contains(field)) {
        throw std::runtime_error(fmt::format("a cpu worker's answer carries the device field '{}'", field));
      }
    }
  } else if (!reply->contains("device_ns")) {
    throw std::runtime_error("a device worker's answer lacks its device time (device_ns)");
  }
  if (!m_profile_worker && reply->contains("profile")) {
    throw std::runtime_error("a timing worker's answer carries profile figures");
  }
  if (m_device_backend) {
    out.device = true;
    out.device_ns = reply->value("device_ns", int64_t{-1});
    out.off_stream_commands = reply->value("off_stream_commands", uint64_t{0});
    out.off_stream_detail = reply->value("off_stream_detail", std::string());
    out.runtime_tampered = reply->value("runtime_tampered", std::string());
    if (auto m = reply->find("inputs_modified_on_device"); m != reply->end() && m->is_array()) {
      for (const auto& n : *m) out.inputs_modified_on_device.push_back(n.get<std::string>());
    }
    if (auto m = reply->find("written_outside_on_device"); m != reply->end() && m->is_array()) {
      for (const auto& n : *m) out.written_outside_on_device.push_back(n.get<std::string>());
    }
    if (auto k = reply->find("kernels"); k != reply->end() && k->is_array()) {
      out.kernels.emplace();
      for (const auto& c : *k) {
        out.kernels->push_back(
            {c.value("name", std::string()), c.value("on_call_stream", true), c.value("device_ns", int64_t{-1})});
      }
    }
  }
  if (auto p = reply->find("profile"); p != reply->end() && p->is_object()) {
    RunProfile rp;
    rp.alloc_count = p->value("alloc_count", uint64_t{0});
    rp.alloc_bytes = p->value("alloc_bytes", uint64_t{0});
    rp.free_count = p->value("free_count", uint64_t{0});
    rp.on_valgrind = p->value("on_valgrind", false);
    rp.callgrind_requests = p->value("callgrind_requests", false);
    const nlohmann::json hw = p->value("hw", nlohmann::json::object());
    if (hw.value("available", false)) {
      rp.hw_instructions = hw.value("instructions", uint64_t{0});
      rp.hw_cycles = hw.value("cycles", uint64_t{0});
    } else {
      rp.hw_unavailable = hw.value("reason", std::string("not reported"));
    }
    out.profile = rp;
  }
}

bool WorkerProcess::freeze(std::chrono::steady_clock::time_point deadline) {
  if (!alive()) return false;
  if (m_frozen) return true;
  // The worker's own group (POSIX_SPAWN_SETPGROUP): its threads and anything it left behind stop together.
  if (::kill(-m_pid, SIGSTOP) != 0) (void)::kill(m_pid, SIGSTOP);
  for (;;) {
    // The stop is reported to the parent once every thread of the worker has stopped (a group stop); peek at the
    // report first, so an exit is left for the usual reaping.
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(m_pid), &info, WSTOPPED | WEXITED | WNOHANG | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (info.si_pid != 0) {
      if (info.si_code == CLD_STOPPED) {
        siginfo_t consumed{};
        (void)::waitid(P_PID, static_cast<id_t>(m_pid), &consumed, WSTOPPED | WNOHANG);
        m_frozen = true;
        return true;
      }
      break;  // it ended
    }
    if (std::chrono::steady_clock::now() > deadline) {
      WorkerDeath d;
      d.reason = FailureReason::timeout;
      d.detail = "the worker did not stop when told to (SIGSTOP), before another worker's call; worker killed";
      (void)kill_and_reap();
      m_death = d;
      return false;
    }
    timespec pause{0, 10'000};
    ::nanosleep(&pause, nullptr);
  }
  // Gone: classified the usual way, by how it ended.
  record_death(Channel::Status::closed);
  return false;
}

void WorkerProcess::thaw() {
  if (!m_frozen) return;
  m_frozen = false;
  if (m_pid <= 0) return;
  if (::kill(-m_pid, SIGCONT) != 0) (void)::kill(m_pid, SIGCONT);
}

bool WorkerProcess::shutdown() {
  if (!alive()) return false;
  thaw();
  // The goodbye is awaited like any answer; a worker that is already gone (it exited right after its last answer,
  // which it may have forged) fails here with the usual classification of its death.
  auto reply = request({{"type", protocol::k_exit}});
  if (!reply) return false;
  const auto calls = reply->find("calls");
  bool complete = reply->value("type", "") == protocol::k_bye && calls != reply->end() && calls->is_number_unsigned() &&
                  calls->get<uint64_t>() == m_calls;
  if (!complete) {
    WorkerDeath d;
    d.reason = FailureReason::protocol;
    d.detail = fmt::format("the worker's goodbye does not account for the {} run requests it was sent: {}", m_calls,
                           reply->dump().substr(0, 200));
    m_death = d;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    // A polite exit still ends whatever the worker started in its process group (a helper a device runtime may
    // spawn, or one the implementation did): nothing of one visit outlives it into the next (reap_child).
    if (try_reap()) return complete;
    if (std::chrono::steady_clock::now() > deadline) break;
    ::usleep(500);
  }
  (void)kill_and_reap();
  return complete;
}

}  // namespace kwb
