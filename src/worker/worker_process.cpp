#include "worker/worker_process.h"

#include "util/error.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <seccomp.h>
#include <time.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

extern char** environ;

namespace kwb {

std::vector<std::string> worker_environment() {
  // A fixed, minimal environment: allocator tunables (MALLOC_*), LD_PRELOAD or locale settings of whoever runs kwb
  // must not change how an implementation behaves or what it costs. Device runtimes keep their own variables.
  // The backends' device selection (KWB_OPENCL_PLATFORM, KWB_OPENCL_DEVICE, KWB_CUDA_DEVICE) too.
  static const char* const k_prefixes[] = {"POCL_", "OCL_ICD", "CUDA_", "NVIDIA_", "LD_LIBRARY_PATH=", "KWB_OPENCL_",
                                           "KWB_CUDA_DEVICE="};
  std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C"};
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view v(*e);
    for (const char* p : k_prefixes) {
      if (v.starts_with(p)) env.emplace_back(v);
    }
  }
  return env;
}

WorkerProcess::WorkerProcess(const std::filesystem::path& worker_exe, std::chrono::milliseconds timeout,
                             const std::vector<std::string>& wrapper)
    : m_timeout(timeout) {
  int sv[2];
  KWB_POSIX_CALL(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv));
  UniqueFd parent_end(sv[0]);
  UniqueFd child_end(sv[1]);
  m_output = UniqueFd(KWB_POSIX_CALL(::memfd_create("kwb-worker-output", MFD_CLOEXEC)));

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, m_output.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, m_output.get(), 2);
  posix_spawn_file_actions_adddup2(&actions, child_end.get(), 3);
  // A new process group: a kill reaches whatever the implementation may have started.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<std::string> args = wrapper;
  args.push_back(worker_exe.string());
  const std::string exe = args.front();
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::vector<std::string> env_strings = worker_environment();
  std::vector<char*> envp;
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int rc = ::posix_spawn(&m_pid, exe.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    m_pid = -1;
    throw InternalError(fmt::format("cannot start the worker {}: {}", exe, std::strerror(rc)));
  }
  m_channel = Channel(std::move(parent_end));
  m_has_cpu_clock = ::clock_getcpuclockid(m_pid, &m_cpu_clock) == 0;
}

int64_t WorkerProcess::cpu_time_ns() const {
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
  if (m_pid > 0) {
    ::kill(-m_pid, SIGKILL);
    ::kill(m_pid, SIGKILL);
    int status;
    while (::waitpid(m_pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
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

std::string WorkerProcess::classify_fault(uint64_t address) const {
  for (const Region& r : m_regions) {
    if (address < r.region_begin || address >= r.region_end) continue;
    if (!r.writable) return "input_modified";
    if (address < r.data_begin || address >= r.data_end) return "out_of_bounds_write";
    return "crashed";
  }
  return "crashed";
}

void WorkerProcess::record_death(Channel::Status status, const std::string& malformed_detail) {
  WorkerDeath d;
  int wstatus = 0;
  if (status == Channel::Status::timeout) {
    ::kill(-m_pid, SIGKILL);
    ::kill(m_pid, SIGKILL);
    d.reason = "timeout";
    d.detail = fmt::format("no answer within {:.1f} s; worker killed", static_cast<double>(m_timeout.count()) / 1000.0);
  }
  if (status == Channel::Status::malformed) {
    ::kill(-m_pid, SIGKILL);
    ::kill(m_pid, SIGKILL);
    d.reason = "protocol";
    d.detail = "worker sent a malformed message (" + malformed_detail + "); worker killed";
  }
  // The worker closed its end or was killed: reap it. A worker that closed the socket but lingers is killed too.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    pid_t r = ::waitpid(m_pid, &wstatus, WNOHANG);
    if (r == m_pid) break;
    if (r < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() > give_up) {
      ::kill(-m_pid, SIGKILL);
      ::kill(m_pid, SIGKILL);
    }
    ::usleep(1000);
  }
  ::kill(-m_pid, SIGKILL);  // anything the implementation left behind in its process group
  m_pid = -1;
  if (d.reason.empty()) {
    if (WIFSIGNALED(wstatus)) {
      d.signal = WTERMSIG(wstatus);
      d.reason = d.signal == SIGABRT ? "aborted" : "crashed";
      d.detail = fmt::format("worker killed by signal {} ({})", d.signal, ::strsignal(d.signal));
      if (d.signal == SIGSYS) {
        // The seccomp filter (worker/sandbox.h) denied a system call; the worker's handler names it.
        d.reason = "sandbox_violation";
        if (m_fault && m_fault->contains("syscall")) {
          const int nr = m_fault->value("syscall", -1);
          char* name = ::seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
          d.detail = fmt::format("the sandbox denied system call {} ({}); the worker was killed (SIGSYS)",
                                 name != nullptr ? name : "?", nr);
          std::free(name);
        } else {
          d.detail = "the sandbox denied a system call; the worker was killed (SIGSYS)";
        }
      } else if (d.signal == SIGXCPU || d.signal == SIGXFSZ) {
        d.reason = "resource_limit";
        d.detail += d.signal == SIGXCPU ? ": the worker's CPU-time limit (RLIMIT_CPU) was reached"
                                        : ": the worker's output file-size limit (RLIMIT_FSIZE) was reached";
      } else if (m_fault && m_fault->value("resource", "") == "memory") {
        d.reason = "resource_limit";
        d.detail = "an allocation failed at the worker's address-space limit (RLIMIT_AS); worker aborted";
      } else if (m_fault) {
        d.fault_address = m_fault->value("address", uint64_t{0});
        if (d.signal == SIGSEGV || d.signal == SIGBUS) d.reason = classify_fault(*d.fault_address);
        d.detail += fmt::format(" at address {:#x}", *d.fault_address);
      }
    } else if (WIFEXITED(wstatus)) {
      d.exit_code = WEXITSTATUS(wstatus);
      d.reason = "exited";
      d.detail = fmt::format("worker exited with status {} in the middle of a request", d.exit_code);
    } else {
      d.reason = "crashed";
      d.detail = "worker disappeared";
    }
  }
  std::string tail = output_tail(600);
  if (!tail.empty()) d.detail += "; its last output: " + tail;
  m_death = d;
}

std::optional<nlohmann::json> WorkerProcess::request(const nlohmann::json& message, std::span<const int> fds) {
  if (!alive()) return std::nullopt;
  if (!m_channel.send(message, fds)) {
    record_death(Channel::Status::closed);
    return std::nullopt;
  }
  const auto deadline = std::chrono::steady_clock::now() + m_timeout;
  for (;;) {
    Channel::Received r = m_channel.receive(deadline);
    if (r.status != Channel::Status::message) {
      record_death(r.status, r.error);
      return std::nullopt;
    }
    if (r.message.value("type", "") == "fault") {
      m_fault = r.message;  // the death (and exit status) follows
      continue;
    }
    return r.message;
  }
}

std::string probe_backend(const std::filesystem::path& worker_exe, const std::string& backend) {
  WorkerProcess w(worker_exe, std::chrono::seconds(60));
  auto reply = w.request({{"type", "probe"}, {"backend", backend}});
  if (!reply) {
    throw Error(ExitCode::unavailable,
                fmt::format("backend '{}': the worker died while opening it: {}", backend, w.m_death->detail));
  }
  if (reply->value("type", "") != "probed") {
    const std::string detail = reply->value("detail", std::string("no detail"));
    if (reply->value("reason", "") == "backend_unavailable") throw Error(ExitCode::unavailable, detail);
    if (reply->value("reason", "") == "backend_usage") throw UsageError(detail);
    throw Error(ExitCode::unavailable, fmt::format("backend '{}' could not be opened: {}", backend, detail));
  }
  (void)w.shutdown();
  return reply->value("description", std::string());
}

LoadOutcome WorkerProcess::load(const std::filesystem::path& artifact, const std::string& backend, int threads,
                                const std::string& task, const WorkerLimits& limits, const DeviceOptions& device) {
  LoadOutcome out;
  auto reply = request({{"type", "load"}, {"artifact", artifact.string()}, {"backend", backend},
                        {"threads", threads}, {"task", task},
                        {"address_space_bytes", limits.address_space_bytes}, {"cpu_seconds", limits.cpu_seconds},
                        {"trace", device.trace}, {"cold", device.cold},
                        {"runtime_cache_dir", device.runtime_cache_dir}});
  if (!reply) {
    out.reason = m_death->reason;
    out.detail = "while loading: " + m_death->detail;
    return out;
  }
  if (reply->value("type", "") != "loaded") {
    out.reason = reply->value("reason", "load_failed");
    out.detail = reply->value("detail", "");
    return out;
  }
  out.ok = true;
  out.device = reply->value("device", std::string());
  if (auto s = reply->find("sandbox"); s != reply->end() && s->is_array()) {
    for (const auto& f : *s) out.sandbox.push_back(f.get<std::string>());
  }
  return out;
}

bool WorkerProcess::map(int id, const SharedBuffer& buffer) { return map_buffer(id, buffer, false); }

bool WorkerProcess::replace(int id, const SharedBuffer& buffer) { return map_buffer(id, buffer, true); }

bool WorkerProcess::map_buffer(int id, const SharedBuffer& buffer, bool replace) {
  const BufferLayout& l = buffer.layout();
  nlohmann::json b = {{"id", id}, {"total", l.total}, {"data_offset", l.data_offset}, {"nbytes", l.nbytes},
                      {"writable", !buffer.sealed()}, {"replace", replace}};
  const int fd = buffer.fd();
  auto reply = request({{"type", "map"}, {"buffers", nlohmann::json::array({b})}}, std::span(&fd, 1));
  if (!reply) return false;
  if (reply->value("type", "") != "mapped") {
    throw InternalError("worker could not map a buffer: " + reply->value("detail", std::string("?")));
  }
  for (const auto& m : (*reply)["buffers"]) {
    const int mapped_id = m["id"].get<int>();
    std::erase_if(m_regions, [&](const Region& r) { return r.id == mapped_id; });
    m_regions.push_back({mapped_id, !buffer.sealed(), m["region_begin"].get<uint64_t>(),
                         m["region_end"].get<uint64_t>(), m["data_begin"].get<uint64_t>(),
                         m["data_end"].get<uint64_t>()});
  }
  return true;
}

bool WorkerProcess::unmap(const std::vector<int>& ids) {
  auto reply = request({{"type", "unmap"}, {"ids", ids}});
  std::erase_if(m_regions, [&](const Region& r) { return std::find(ids.begin(), ids.end(), r.id) != ids.end(); });
  return reply.has_value();
}

bool WorkerProcess::flush() {
  auto reply = request({{"type", "flush"}});
  if (!reply) return false;
  if (reply->value("type", "") != "flushed") {
    throw InternalError("worker could not flush its caches: " + reply->value("detail", std::string("?")));
  }
  return true;
}

RunOutcome WorkerProcess::run(const RunRequest& req) {
  auto tensors = [](const std::vector<TensorArg>& list) {
    nlohmann::json arr = nlohmann::json::array();
    for (const TensorArg& t : list) {
      arr.push_back({{"name", t.name}, {"buffer", t.buffer}, {"dtype", t.dtype}, {"shape", t.shape}});
    }
    return arr;
  };
  nlohmann::json scalars = nlohmann::json::array();
  for (const auto& [name, value] : req.scalars) scalars.push_back({name, value});
  const uint64_t call = ++m_calls;
  RunOutcome out;
  const nlohmann::json message = {{"type", "run"}, {"call", call}, {"inputs", tensors(req.inputs)},
                                  {"outputs", tensors(req.outputs)}, {"scalars", scalars}};
  const int64_t cpu_before = cpu_time_ns();
  const auto sent = std::chrono::steady_clock::now();
  auto reply = request(message);
  out.parent_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - sent).count();
  const int64_t cpu_after = cpu_time_ns();
  if (cpu_before >= 0 && cpu_after >= 0) out.cpu_ns = cpu_after - cpu_before;
  if (!reply) {
    out.death = m_death;
    return out;
  }
  if (reply->value("type", "") != "ran" || reply->value("call", uint64_t{0}) != call) {
    WorkerDeath d;
    if (reply->value("type", "") == "error" && reply->value("reason", "") == "device_fault") {
      d.reason = "device_fault";
      d.detail = "the device runtime failed during the call: " + reply->value("detail", std::string());
    } else {
      d.reason = "protocol";
      d.detail = "unexpected answer to a run request: " + reply->dump().substr(0, 200);
    }
    ::kill(-m_pid, SIGKILL);
    ::kill(m_pid, SIGKILL);
    int st;
    ::waitpid(m_pid, &st, 0);
    m_pid = -1;
    m_death = d;
    out.death = d;
    return out;
  }
  out.answered = true;
  out.rc = reply->value("rc", -1);
  out.ns = reply->value("ns", int64_t{-1});
  out.descriptors_intact = reply->value("descriptors_intact", false);
  if (reply->contains("device_ns")) {
    out.device = true;
    out.device_ns = reply->value("device_ns", int64_t{-1});
    out.off_stream_commands = reply->value("off_stream_commands", uint64_t{0});
    out.off_stream_detail = reply->value("off_stream_detail", std::string());
    if (auto m = reply->find("inputs_modified_on_device"); m != reply->end() && m->is_array()) {
      for (const auto& n : *m) out.inputs_modified_on_device.push_back(n.get<std::string>());
    }
    if (auto m = reply->find("written_outside_on_device"); m != reply->end() && m->is_array()) {
      for (const auto& n : *m) out.written_outside_on_device.push_back(n.get<std::string>());
    }
    if (auto k = reply->find("kernels"); k != reply->end() && k->is_array()) {
      out.kernels.emplace();
      for (const auto& c : *k) {
        out.kernels->push_back({c.value("name", std::string()), c.value("on_call_stream", true),
                                c.value("device_ns", int64_t{-1})});
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
  return out;
}

bool WorkerProcess::shutdown() {
  if (!alive()) return false;
  // The goodbye is awaited like any answer; a worker that is already gone (it exited right after its last answer,
  // which it may have forged) fails here with the usual classification of its death.
  auto reply = request({{"type", "exit"}});
  if (!reply) return false;
  bool complete = reply->value("type", "") == "bye" && reply->value("calls", uint64_t{0}) == m_calls;
  if (!complete) {
    WorkerDeath d;
    d.reason = "protocol";
    d.detail = fmt::format("the worker's goodbye does not account for the {} run requests it was sent: {}", m_calls,
                           reply->dump().substr(0, 200));
    m_death = d;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    int status;
    pid_t r = ::waitpid(m_pid, &status, WNOHANG);
    if (r == m_pid) {
      // A polite exit still ends whatever the worker started in its process group (a helper a device runtime may
      // spawn, or one the implementation did): nothing of one visit outlives it into the next.
      ::kill(-m_pid, SIGKILL);
      m_pid = -1;
      return complete;
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    ::usleep(500);
  }
  ::kill(-m_pid, SIGKILL);
  ::kill(m_pid, SIGKILL);
  int status;
  while (::waitpid(m_pid, &status, 0) < 0 && errno == EINTR) {
  }
  m_pid = -1;
  return complete;
}

}  // namespace kwb
