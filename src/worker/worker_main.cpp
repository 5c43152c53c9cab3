// kwb-worker: the only process that ever loads an implementation. It maps the buffers the parent hands it and calls
// the candidate when the parent says go on the control page. It takes no time and decides nothing: the parent
// takes both timestamps of every call, validates every output and owns every verdict. Protocol:
// docs/worker-protocol.md, worker/protocol.h.
#include "backend/backend.h"
#include "kwb/kernel.h"
#include "util/error.h"
#include "util/failure_reason.h"
#include "util/fd.h"
#include "util/worker_user.h"
#include "worker/buffer_layout.h"
#include "worker/channel.h"
#include "worker/protocol.h"
#include "worker/sandbox.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#ifdef KWB_PROFILE_WORKER
// kwb-profile-worker: the same worker, built a second time with probes around kwb_run and nothing else
// (docs/profile.md). kwb-worker, the timing worker, is compiled without this block and stays as it is.
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#include <alloca.h>
#include <cerrno>
#include <fstream>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define KWB_HAVE_CALLGRIND_REQUESTS 1
#else
// Without valgrind's headers the client requests are no-ops; the parent then finds no per-call dumps and reports
// instruction counts as unavailable rather than guessing.
#define CALLGRIND_TOGGLE_COLLECT
#define CALLGRIND_DUMP_STATS_AT(label) ((void)(label))
#define RUNNING_ON_VALGRIND 0
#define KWB_HAVE_CALLGRIND_REQUESTS 0
#endif

// Defined in worker/alloc_counter.cpp, which is linked into kwb-profile-worker only.
extern "C" void kwb_alloc_counter_start();
extern "C" void kwb_alloc_counter_stop(uint64_t* allocations, uint64_t* bytes, uint64_t* frees);
#endif

namespace kwb {

namespace {

// The backend's call path (backend/backend.h, CallPath) on a page of its own, read-only and sealed once it holds the
// backend's calls, before the implementation is loaded (a worker loads one implementation, once). Its address is a
// link-time constant, so no writable pointer leads to it.
struct alignas(4096) SealedCallPath {
  CallPath path;
};
SealedCallPath g_call_path;

#ifndef SYS_mseal
#define SYS_mseal 462
#endif

void seal_call_path(const CallPath& path) {
  g_call_path.path = path;
  ::mprotect(&g_call_path, sizeof g_call_path, PROT_READ);
  // Linux 6.10+; elsewhere the page stays read-only, and the sandbox denies mprotect to single-threaded tasks.
  (void)::syscall(SYS_mseal, &g_call_path, sizeof g_call_path, 0);
}

}  // namespace

namespace {

constexpr int k_channel_fd = protocol::k_channel_fd;

// ---- faults ---------------------------------------------------------------------------------------------------
// On SIGSEGV/SIGBUS/SIGILL/SIGFPE the handler reports the faulting address (so the parent can tell a write into
// a read-only input from a write past an output) and re-raises with the default action, so the parent also sees
// the death by signal. Only async-signal-safe calls: a formatted buffer and one send().

char g_fault_stack[1 << 16];

// si_code of a SIGSYS raised by a seccomp filter (SYS_SECCOMP in <asm-generic/siginfo.h>, which glibc's headers
// do not export and which clashes with them when included).
constexpr int k_sys_seccomp = 1;

size_t format_u64(char* out, uint64_t v) {
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; ++i) out[i] = tmp[n - 1 - i];
  return n;
}

// The first thread to fault reports; a device runtime's threads may fault at the same instant (every work-item of a
// kernel writing a read-only input), and a second fault must neither kill the worker before the first report is sent
// nor send a report of its own: it waits here until the first thread's re-raised signal ends the process.
std::atomic<int> g_faulting{0};

void on_fault(int sig, siginfo_t* info, void* context) {
  if (sig != SIGSYS && g_faulting.exchange(1) != 0) {
    for (;;) (void)g_faulting.load(std::memory_order_relaxed);  // no system call: the sandbox may deny any
  }
  char msg[128];
  size_t n = 0;
  auto put = [&](const char* s) {
    while (*s) msg[n++] = *s++;
  };
  put("{\"type\":\"fault\",\"signal\":");
  n += format_u64(msg + n, static_cast<uint64_t>(sig));
  put(",\"address\":");
  n += format_u64(msg + n, reinterpret_cast<uint64_t>(info->si_addr));
#if defined(__x86_64__)
  // The page fault's error code: bit 1 set for a write. An over-read of a fenced input is told from a write to it.
  if (sig == SIGSEGV && context != nullptr) {
    const auto* uc = static_cast<const ucontext_t*>(context);
    put((uc->uc_mcontext.gregs[REG_ERR] & 2) != 0 ? ",\"access\":\"write\"" : ",\"access\":\"read\"");
  }
#else
  (void)context;
#endif
  if (sig == SIGSYS && info->si_code == k_sys_seccomp) {
    put(",\"syscall\":");  // the call the sandbox denied (worker/sandbox.h)
    n += format_u64(msg + n, static_cast<uint64_t>(info->si_syscall));
  }
  put("}");
  (void)!::send(k_channel_fd, msg, n, MSG_NOSIGNAL);
  // SIGSYS's handler is one-shot (SA_RESETHAND), and its disposition must not be touched (the sandbox denies it);
  // the others go back to the default action here, after the report. The re-raised signal stays pending until this
  // handler returns, then kills. Inside the sandbox no fault's action can be changed, not even back to the default
  // (worker/sandbox.cpp, add_fault_handler_rules): the worker then ends by SIGKILL, and the parent takes the signal
  // from the report it already has (worker_process.cpp).
  if (sig != SIGSYS && ::signal(sig, SIG_DFL) == SIG_ERR) ::kill(::getpid(), SIGKILL);
  ::raise(sig);
}

// operator new failed, which under RLIMIT_AS means the address-space limit was reached: say so before dying, since
// an abort alone looks like any other abort.
void on_out_of_memory() {
  static const char msg[] = "{\"type\":\"fault\",\"signal\":0,\"resource\":\"memory\"}";
  (void)!::send(k_channel_fd, msg, sizeof msg - 1, MSG_NOSIGNAL);
  ::abort();
}

// kwb's handler for the faults, (re)installed: a device runtime may put its own in front (PoCL's LLVM registers
// handlers that remove its temporary files when it first compiles a kernel), and a fault must reach on_fault
// directly, whichever thread takes it. Called at start, once more as the run phase begins, and before every call
// (where the run filter makes it a no-op: no one can have replaced them there).
void claim_fault_handlers() {
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  // Not one-shot: a second thread faulting while the first reports must reach on_fault (which holds it), not the
  // default action (which would end the worker before the report is out).
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) ::sigaction(sig, &sa, nullptr);
}

void install_fault_handlers() {
  stack_t ss{};
  ss.ss_sp = g_fault_stack;
  ss.ss_size = sizeof g_fault_stack;
  ::sigaltstack(&ss, nullptr);
  claim_fault_handlers();
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  ::sigaction(SIGSYS, &sa, nullptr);
  std::set_new_handler(on_out_of_memory);
}

// ---- buffers --------------------------------------------------------------------------------------------------

struct Mapping {
  unsigned char* reservation = nullptr;  // guard page + memfd + guard page
  size_t reservation_size = 0;
  unsigned char* data = nullptr;
  size_t nbytes = 0;
  void* device = nullptr;  // the backend's mirror (a cl_mem, a device pointer); null for host-memory backends
  ~Mapping() {
    if (reservation != nullptr) ::munmap(reservation, reservation_size);
  }
};

// Maps the memfd `fd` (`total` bytes, its data at `data_offset`, `nbytes` long) into the reservation after its
// first guard page. An output is mapped whole: its canaries stay writable, for the parent to find a stray write.
// An input is fenced like an output, but for reads: only the pages that hold its data are mapped, and the rest of
// the reservation stays PROT_NONE, so an over-read that leaves the data's pages faults (out_of_bounds_read, with the
// input's name) instead of reading canary bytes. What stays readable around it is the rest of its first and last
// page: check places every input so that it ends flush with a page (within 64 bytes; session/worker_session.cpp),
// timing at its layout's offset. (mmap, not mprotect: the run phase's seccomp filter allows only the first.)
bool map_tensor(unsigned char* reservation, int fd, size_t total, size_t data_offset, size_t nbytes, bool writable,
                int extra_flags) {
  size_t from = 0, to = total;
  if (!writable) {
    from = data_offset / k_page * k_page;
    to = std::min(total, std::max(from + k_page, (data_offset + nbytes + k_page - 1) / k_page * k_page));
  }
  const int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  void* at = ::mmap(reservation + k_page + from, to - from, prot, MAP_SHARED | MAP_FIXED | extra_flags, fd,
                    static_cast<off_t>(from));
  return at != MAP_FAILED;
}

#ifdef KWB_PROFILE_WORKER
// ---- probes around kwb_run (kwb-profile-worker only) ------------------------------------------------------------
// Hardware counters for the calling thread, user space only, opened once and enabled only around kwb_run. Under
// valgrind they are not opened: they would count the emulator, not the implementation.
class HardwareCounters {
public:
  HardwareCounters() {
    if (RUNNING_ON_VALGRIND) {
      m_unavailable = "not counted under valgrind (the counters would count the emulator)";
      return;
    }
    m_leader = open_counter(PERF_COUNT_HW_INSTRUCTIONS, -1, "instructions");
    if (m_leader >= 0) m_cycles = open_counter(PERF_COUNT_HW_CPU_CYCLES, m_leader, "cycles");
    if (m_leader >= 0 && m_cycles < 0) {
      ::close(m_leader);
      m_leader = -1;
    }
  }
  ~HardwareCounters() {
    if (m_cycles >= 0) ::close(m_cycles);
    if (m_leader >= 0) ::close(m_leader);
  }
  HardwareCounters(const HardwareCounters&) = delete;  // owns two perf file descriptors
  HardwareCounters& operator=(const HardwareCounters&) = delete;

  void start() {
    if (m_leader < 0) return;
    ::ioctl(m_leader, PERF_EVENT_IOC_RESET, PERF_IOC_FLAG_GROUP);
    ::ioctl(m_leader, PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP);
  }
  void stop() {
    if (m_leader >= 0) ::ioctl(m_leader, PERF_EVENT_IOC_DISABLE, PERF_IOC_FLAG_GROUP);
  }
  nlohmann::json read() const {
    if (m_leader < 0) return {{"available", false}, {"reason", m_unavailable}};
    uint64_t values[3] = {0, 0, 0};  // PERF_FORMAT_GROUP: nr, then one value per counter
    if (::read(m_leader, values, sizeof values) != static_cast<ssize_t>(sizeof values) || values[0] != 2) {
      return {{"available", false}, {"reason", "reading the perf counter group failed"}};
    }
    return {{"available", true}, {"instructions", values[1]}, {"cycles", values[2]}};
  }

private:
  int open_counter(uint64_t config, int group, const char* name) {
    perf_event_attr a{};
    a.type = PERF_TYPE_HARDWARE;
    a.size = sizeof a;
    a.config = config;
    if (group < 0) a.disabled = 1;  // members follow their group leader
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    a.read_format = PERF_FORMAT_GROUP;
    const long fd = ::syscall(SYS_perf_event_open, &a, 0, -1, group, 0);
    if (fd < 0) {
      const int err = errno;
      std::string paranoid;
      std::ifstream("/proc/sys/kernel/perf_event_paranoid") >> paranoid;
      m_unavailable = std::string("perf_event_open(") + name + "): " + std::strerror(err) +
                      (paranoid.empty() ? "" : " (kernel.perf_event_paranoid = " + paranoid + ")");
      return -1;
    }
    return static_cast<int>(fd);
  }

  int m_leader = -1;
  int m_cycles = -1;
  std::string m_unavailable;
};
#endif

// ---- the worker -----------------------------------------------------------------------------------------------

class Worker {
public:
  Worker() : m_channel(UniqueFd(k_channel_fd)) {
    void* page =
        ::mmap(nullptr, protocol::k_control_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, protocol::k_control_fd, 0);
    if (page == MAP_FAILED) throw std::runtime_error("the control page (fd 4) cannot be mapped");
    m_control = static_cast<protocol::ControlBlock*>(page);
    ::close(protocol::k_control_fd);
  }

  int serve() {
    for (;;) {
      Channel::Received in = m_channel.receive(std::nullopt);
      if (in.status != Channel::Status::message) return finish();
      const std::string type = in.message.value("type", "");
      nlohmann::json reply;
      try {
        if (type == protocol::k_probe) {
          reply = probe(in.message);
        } else if (type == protocol::k_load) {
          reply = load(in.message, in.fds);
        } else if (type == protocol::k_map) {
          reply = map(in.message, in.fds);
        } else if (type == protocol::k_unmap) {
          reply = unmap(in.message);
        } else if (type == protocol::k_run) {
          reply = run(in.message);
        } else if (type == protocol::k_exit) {
          // The parent requires this answer and the count: a worker that vanished after its last answer (an
          // implementation that forged that answer and left, say) cannot produce it.
          const int rc = finish();
          (void)m_channel.send({{"type", protocol::k_bye}, {"calls", m_calls}});
          return rc;
        } else {
          reply = error(FailureReason::protocol, "unknown message type " + type);
        }
      } catch (const Error& e) {
        // A backend that cannot start here (no driver, no device) is not the implementation's fault: the parent
        // stops with exit 69 and this message.
        // A device selection that names nothing (KWB_OPENCL_DEVICE=99, say) is the user's to fix.
        const std::string_view reason = e.code() == ExitCode::unavailable ? protocol::k_backend_unavailable
                                        : e.code() == ExitCode::usage     ? protocol::k_backend_usage
                                                                          : to_string(FailureReason::protocol);
        reply = {{"type", protocol::k_error}, {"reason", reason}, {"detail", e.what()}};
      } catch (const std::exception& e) {
        reply = error(FailureReason::protocol, e.what());
      }
      if (!m_channel.send(reply)) return finish();
    }
  }

private:
  nlohmann::json error(FailureReason reason, const std::string& detail) {
    return {{"type", protocol::k_error}, {"reason", to_string(reason)}, {"detail", detail}};
  }

  // The parent names the backend as text (worker/protocol.h); only kwb's own names are accepted.
  static BackendKind backend_kind(const nlohmann::json& m) {
    const std::string name = m.at("backend").get<std::string>();
    if (std::optional<BackendKind> kind = parse_backend(name)) return *kind;
    throw std::runtime_error("unknown backend '" + name + "'");
  }

  static BackendOptions backend_options(const nlohmann::json& m) {
    BackendOptions o;
    o.trace = m.value("trace", false);
    o.cold = m.value("cold", false);
    o.runtime_cache_dir = m.value("runtime_cache_dir", std::string());
    return o;
  }

  // Opens the backend and says what it found, loading nothing: the parent asks this once before a verb starts,
  // so a missing driver or device is reported as such (exit 69) rather than as a failing implementation.
  nlohmann::json probe(const nlohmann::json& m) {
    auto backend = make_backend(backend_kind(m), backend_options(m));
    return {
        {"type", protocol::k_probed}, {"backend", to_string(backend->id())}, {"description", backend->description()}};
  }

  nlohmann::json load(const nlohmann::json& m, std::vector<UniqueFd>& fds) {
    if (m_backend) return error(FailureReason::protocol, "load: an implementation is already loaded");
      // The artifact arrives as a descriptor the parent opened (a worker started by root runs as a user of its own and
      // cannot reach kwb's cache); the loader and Landlock see it through /proc/self/fd.
#ifdef KWB_PROFILE_WORKER
    if (fds.size() != 2) {
      return error(FailureReason::protocol, "load: expected the artifact's and the filter's descriptors");
    }
#else
    if (fds.size() != 1) return error(FailureReason::protocol, "load: expected the artifact's descriptor");
#endif
    m_artifact_fd = std::move(fds[0]);
#ifdef KWB_PROFILE_WORKER
    // By name: valgrind reads the object's symbols from the file it was mapped from (the parent made the name
    // readable for this worker's user, util/worker_dirs.h readable_copy).
    const std::string path = m.at("artifact").get<std::string>();
#else
    const std::string path = "/proc/self/fd/" + std::to_string(m_artifact_fd.get());
#endif
    // The device runtime starts before the sandbox goes up: opening a driver reads files and starts threads that
    // no implementation may do on its own.
    m_backend = make_backend(backend_kind(m), backend_options(m));
    seal_call_path(m_backend->call_path());
    m_task = m.at("task").get<std::string>();
    m_parent_spins = m.value("parent_spins", false);
    if (std::optional<nlohmann::json> e = enter_load_sandbox(m, path, fds)) return *e;
    if (std::optional<nlohmann::json> e = load_implementation(m, path)) return *e;
#ifndef KWB_PROFILE_WORKER
    // The fault handlers are kwb's from here on: set now (a device runtime's thread that no load filter covers may
    // have put its own in front during kwb_setup, and so may the implementation), and no thread can set another once
    // the run filter is in (worker/sandbox.cpp, add_fault_handler_rules).
    claim_fault_handlers();
    if (std::string e = m_sandbox->enter_run_phase(); !e.empty()) {
      return error(FailureReason::load_failed, "the worker could not enter its run sandbox (" + e + ")");
    }
    return {{"type", protocol::k_loaded},
            {"pid", ::getpid()},
            {"sandbox", m_sandbox->features()},
            {"device", m_backend->description()}};
#else
    return {{"type", protocol::k_loaded},
            {"pid", ::getpid()},
            {"sandbox", m_profile_features},
            {"device", m_backend->description()}};
#endif
  }

  // load's sandbox, up before the implementation is mapped: its error, or nothing.
  std::optional<nlohmann::json> enter_load_sandbox(const nlohmann::json& m, const std::string& path,
                                                   std::vector<UniqueFd>& fds) {
#ifdef KWB_PROFILE_WORKER
    (void)m;
    (void)path;
    // Under valgrind: a deny-list of its own (worker/sandbox.h, enter_profile_sandbox) before the implementation's
    // constructors run.
    if (std::string e = enter_profile_sandbox(fds[1].get(), m_profile_features); !e.empty()) {
      return error(FailureReason::load_failed,
                   "the profile worker could not enter its sandbox (" + e + "); nothing was loaded");
    }
#else
    (void)fds;
    // The sandbox goes up before dlopen, because the implementation's constructors (and IFUNC resolvers) run
    // inside dlopen; the stricter run filter follows kwb_setup (worker/sandbox.h).
    SandboxPolicy policy;
    policy.threads = m.at("threads").get<int>();
    policy.address_space_bytes = m.value("address_space_bytes", uint64_t{0});
    policy.cpu_seconds = m.value("cpu_seconds", uint64_t{0});
    policy.runtime = m_backend->sandbox_needs();
    m_sandbox = std::make_unique<Sandbox>(policy);
    if (std::string e = m_sandbox->enter_load_phase(path); !e.empty()) {
      return error(FailureReason::load_failed,
                   "the worker could not enter its sandbox (" + e + "); nothing was loaded");
    }
#endif
    return std::nullopt;
  }

  // The implementation mapped, its ABI checked, its entry points found and its kwb_setup run: its error, or nothing.
  std::optional<nlohmann::json> load_implementation(const nlohmann::json& m, const std::string& path) {
    // Constructors of the implementation run here, inside this worker, never in the parent.
    m_handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (m_handle == nullptr) return error(FailureReason::load_failed, ::dlerror());
    auto* abi = static_cast<const uint32_t*>(::dlsym(m_handle, "kwb_abi_version"));
    if (abi == nullptr) {
      return error(FailureReason::missing_symbol,
                   "kwb_abi_version is not exported: put KWB_CANDIDATE_ABI at file scope");
    }
    if (*abi != KWB_ABI_VERSION) {
      return error(FailureReason::abi_mismatch, "implementation built for ABI " + std::to_string(*abi) +
                                                    ", kwb speaks " + std::to_string(KWB_ABI_VERSION));
    }
    m_run = reinterpret_cast<kwb_run_fn>(::dlsym(m_handle, "kwb_run"));
    if (m_run == nullptr) {
      return error(FailureReason::missing_symbol, "kwb_run is not exported (declare it extern \"C\" KWB_EXPORT)");
    }
    m_teardown = reinterpret_cast<kwb_teardown_fn>(::dlsym(m_handle, "kwb_teardown"));
    auto setup = reinterpret_cast<kwb_setup_fn>(::dlsym(m_handle, "kwb_setup"));
    if (setup != nullptr) {
      kwb_context ctx{};
      ctx.abi_version = KWB_ABI_VERSION;
      ctx.max_threads = m.at("threads").get<int32_t>();
      ctx.task_name = m_task.c_str();
      m_backend->fill_context(ctx);
      int rc = setup(&ctx);
      if (rc != 0) return error(FailureReason::setup_failed, "kwb_setup returned " + std::to_string(rc));
    }
    return std::nullopt;
  }

  nlohmann::json map(const nlohmann::json& m, std::vector<UniqueFd>& fds) {
    const auto& buffers = m.at("buffers");
    if (buffers.size() != fds.size()) throw std::runtime_error("map: buffer count does not match fds");
    nlohmann::json mapped = nlohmann::json::array();
    auto describe = [](int id, const Mapping& mp) -> nlohmann::json {
      return {{"id", id},
              {"region_begin", reinterpret_cast<uint64_t>(mp.reservation)},
              {"region_end", reinterpret_cast<uint64_t>(mp.reservation + mp.reservation_size)},
              {"data_begin", reinterpret_cast<uint64_t>(mp.data)},
              {"data_end", reinterpret_cast<uint64_t>(mp.data + mp.nbytes)}};
    };
    for (size_t i = 0; i < buffers.size(); ++i) {
      const auto& b = buffers[i];
      const int id = b.at("id").get<int>();
      const size_t total = b.at("total").get<size_t>();
      const bool writable = b.at("writable").get<bool>();
      if (b.value("replace", false)) {
        // Other contents behind the same addresses: the parent swaps a buffer of the same layout into an existing
        // mapping, so anything an implementation keyed on addresses now sees changed data. Populated here, so that
        // no page fault of the swap lands inside a timed call.
        auto it = m_buffers.find(id);
        if (it == m_buffers.end() || it->second->reservation_size != total + 2 * k_page) {
          throw std::runtime_error("map: replace of an unknown buffer, or by one of another size");
        }
        Mapping& old = *it->second;
        if (!map_tensor(old.reservation, fds[i].get(), total, b.at("data_offset").get<size_t>(),
                        b.at("nbytes").get<size_t>(), writable, MAP_POPULATE)) {
          throw std::runtime_error("map: cannot replace buffer " + std::to_string(id));
        }
        mapped.push_back(describe(id, old));
        continue;
      }
      auto mp = std::make_unique<Mapping>();
      mp->reservation_size = total + 2 * k_page;
      void* res = ::mmap(nullptr, mp->reservation_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (res == MAP_FAILED) throw std::runtime_error("map: cannot reserve address space");
      mp->reservation = static_cast<unsigned char*>(res);
      mp->data = mp->reservation + k_page + b.at("data_offset").get<size_t>();
      mp->nbytes = b.at("nbytes").get<size_t>();
      if (!map_tensor(mp->reservation, fds[i].get(), total, b.at("data_offset").get<size_t>(), mp->nbytes, writable,
                      0)) {
        throw std::runtime_error("map: cannot map buffer " + std::to_string(id));
      }
      if (!m_backend->host_memory()) {
        mp->device = writable ? m_backend->create_buffer(id, mp->nbytes)
                              : m_backend->create_input_buffer(id, mp->data, mp->nbytes);
      }
      mapped.push_back(describe(id, *mp));
      m_buffers[id] = std::move(mp);
    }
    return {{"type", protocol::k_mapped}, {"buffers", mapped}};
  }

  nlohmann::json unmap(const nlohmann::json& m) {
    for (const auto& id : m.at("ids")) {
      if (m_buffers.erase(id.get<int>()) > 0 && !m_backend->host_memory()) m_backend->release_buffer(id.get<int>());
    }
    return {{"type", protocol::k_unmapped}};
  }

  struct TensorArgs {
    std::vector<int> buffers;
    std::vector<DLTensor> tensors;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<std::string> names;
    std::vector<const char*> name_ptrs;
  };

  static bool same(const DLTensor& a, const DLTensor& b, const std::vector<int64_t>& shape) {
    if (a.data != b.data || a.ndim != b.ndim || a.dtype.code != b.dtype.code || a.dtype.bits != b.dtype.bits ||
        a.dtype.lanes != b.dtype.lanes || a.strides != b.strides || a.byte_offset != b.byte_offset ||
        a.shape != b.shape) {
      return false;
    }
    for (int32_t i = 0; i < a.ndim; ++i) {
      if (a.shape[i] != shape[static_cast<size_t>(i)]) return false;
    }
    return true;
  }

  // A device runtime's error around the call (a kernel that faulted, a queue the implementation broke) is the
  // implementation's failure, reported as such; the parent then ends this worker (a CUDA context is unusable after a
  // fault).
  nlohmann::json run(const nlohmann::json& m) {
    claim_fault_handlers();
    try {
      return run_call(m);
    } catch (const Error& e) {
      return error(FailureReason::device_fault, e.what());
    }
  }

  void build_tensors(const std::vector<protocol::TensorArg>& list, TensorArgs& out) {
    out.tensors.resize(list.size());
    out.shapes.resize(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const protocol::TensorArg& t = list[i];
      auto found = m_buffers.find(t.buffer);
      if (found == m_buffers.end()) throw std::runtime_error("run: unknown buffer " + std::to_string(t.buffer));
      Mapping& mp = *found->second;
      out.buffers.push_back(t.buffer);
      out.shapes[i] = t.shape;
      out.names.push_back(t.name);
      DLTensor& d = out.tensors[i];
      d.data = m_backend->host_memory() ? static_cast<void*>(mp.data) : mp.device;
      d.device = m_backend->device();
      d.ndim = static_cast<int32_t>(out.shapes[i].size());
      d.dtype = to_dlpack(t.dtype);
      d.shape = out.shapes[i].data();
      d.strides = nullptr;  // compact row-major
      d.byte_offset = 0;
    }
    for (const std::string& n : out.names) out.name_ptrs.push_back(n.c_str());
  }

  // A call's arguments as the candidate gets them, and its descriptors as they were before the call (compared
  // after it). The scalars' names point into the message.
  struct CallArgs {
    TensorArgs in, out;
    std::vector<kwb_scalar> scalars;
    std::vector<DLTensor> in_copy, out_copy;
  };

  void build_args(const protocol::RunMessage& msg, CallArgs& a) {
    build_tensors(msg.inputs, a.in);
    build_tensors(msg.outputs, a.out);
    for (const auto& [name, value] : msg.scalars) a.scalars.push_back({name.c_str(), value});
    a.in_copy = a.in.tensors;
    a.out_copy = a.out.tensors;
  }

  // The candidate's view of one call. It points into `in`, `out` and `scalars`, which outlive it.
  kwb_call make_call(TensorArgs& in, TensorArgs& out, std::vector<kwb_scalar>& scalars) const {
    kwb_call call{};
    call.abi_version = KWB_ABI_VERSION;
    call.num_inputs = static_cast<int32_t>(in.tensors.size());
    call.inputs = in.tensors.data();
    call.input_names = in.name_ptrs.data();
    call.num_outputs = static_cast<int32_t>(out.tensors.size());
    call.outputs = out.tensors.data();
    call.output_names = out.name_ptrs.data();
    call.num_scalars = static_cast<int32_t>(scalars.size());
    call.scalars = scalars.data();
    call.stream = m_backend->stream();
    return call;
  }

  // Says armed and sleeps until the parent has written the call's inputs and woken it; false when the control page
  // is then not in this call's wake phase.
  static bool arm_and_wait_for_wake(std::atomic<uint32_t>& state, uint64_t seq) {
    const uint32_t armed = protocol::state_word(seq, protocol::Phase::armed);
    state.store(armed, std::memory_order_release);
    protocol::futex_wake(state);  // a parent that sleeps while it waits for armed
    while (state.load(std::memory_order_acquire) == armed) protocol::futex_wait(state, armed);
    return state.load(std::memory_order_acquire) == protocol::state_word(seq, protocol::Phase::wake);
  }

  // A device backend gets the parent's bytes (inputs, and the outputs' fresh poison) before the call, through the
  // sealed call path only.
  void upload_all(const CallPath& path, const TensorArgs& in, const TensorArgs& out) const {
    for (const TensorArgs* list : {&in, &out}) {
      for (int id : list->buffers) {
        const Mapping& mp = *m_buffers.at(id);
        path.upload(path.self, id, mp.data, mp.nbytes);
      }
    }
    path.prepare_call(path.self);
  }

  // Once the parent has timed done, the outputs go back to its buffers, before it captures them: it times this read
  // as it times the uploads, and nothing after it can change what it validates. An error answer when the control
  // page left the phases of this call.
  std::optional<nlohmann::json> read_back(const CallPath& path, std::atomic<uint32_t>& state, uint64_t seq,
                                          const TensorArgs& out) {
    const uint32_t done = protocol::state_word(seq, protocol::Phase::done);
    const uint32_t read_back = protocol::state_word(seq, protocol::Phase::read_back);
    for (uint32_t spins = 1; state.load(std::memory_order_acquire) == done; ++spins) {
      protocol::cpu_relax();
      if ((spins & 0xFFFF) == 0) ::sched_yield();
    }
    if (const uint32_t now = state.load(std::memory_order_acquire); now != read_back) {
      return error(FailureReason::protocol, "the control page left the done phase for " + std::to_string(now) +
                                                " instead of read_back: something in the worker wrote it");
    }
    for (int id : out.buffers) {
      Mapping& mp = *m_buffers.at(id);
      path.download(path.self, id, mp.data, mp.nbytes);
    }
    const uint32_t downloaded = protocol::state_word(seq, protocol::Phase::downloaded);
    uint32_t expected = read_back;
    if (!state.compare_exchange_strong(expected, downloaded, std::memory_order_acq_rel)) {
      return error(FailureReason::protocol,
                   "the control page left the read_back phase while the outputs were "
                   "read back (it read " +
                       std::to_string(expected) + "): something in the worker wrote it");
    }
    protocol::futex_wake(state);
    return std::nullopt;
  }

  // The answer to a call the parent has captured: whether the descriptors are intact and, on a device backend, the
  // device copies' checks and what the call ran.
  nlohmann::json ran_reply(uint64_t seq, bool device, const CallArgs& args) {
    const TensorArgs& in = args.in;
    const TensorArgs& out = args.out;
    const std::vector<DLTensor>& in_copy = args.in_copy;
    const std::vector<DLTensor>& out_copy = args.out_copy;
    nlohmann::json modified = nlohmann::json::array();
    nlohmann::json overrun = nlohmann::json::array();
    if (device) {
      for (size_t i = 0; i < in.buffers.size(); ++i) {
        Mapping& mp = *m_buffers.at(in.buffers[i]);
        if (!m_backend->matches(in.buffers[i], mp.data, mp.nbytes)) modified.push_back(in.names[i]);
      }
      for (const TensorArgs* list : {&in, &out}) {
        for (size_t i = 0; i < list->buffers.size(); ++i) {
          if (!m_backend->guards_intact(list->buffers[i])) overrun.push_back(list->names[i]);
        }
      }
    }
    // After the outputs are read back: work the implementation enqueued after the call either came before that
    // read (and is reported here) or after it (and the outputs the parent validates lack it).
    const CallDeviceInfo info = m_backend->collect_call();

    bool intact = true;
    for (size_t i = 0; i < in.tensors.size(); ++i) intact = intact && same(in.tensors[i], in_copy[i], in.shapes[i]);
    for (size_t i = 0; i < out.tensors.size(); ++i) intact = intact && same(out.tensors[i], out_copy[i], out.shapes[i]);
    nlohmann::json reply = {{"type", protocol::k_ran}, {"call", seq}, {"descriptors_intact", intact}};
    if (device) {
      reply["device_ns"] = info.device_ns;
      reply["inputs_modified_on_device"] = modified;
      reply["written_outside_on_device"] = overrun;
      reply["off_stream_commands"] = info.off_stream_commands;
      reply["off_stream_detail"] = info.off_stream_detail;
      if (!info.runtime_tampered.empty()) reply["runtime_tampered"] = info.runtime_tampered;
      if (info.traced) {
        nlohmann::json kernels = nlohmann::json::array();
        for (const KernelRecord& k : info.kernels) {
          kernels.push_back({{"name", k.name}, {"on_call_stream", k.on_call_stream}, {"device_ns", k.device_ns}});
        }
        reply["kernels"] = kernels;
      }
    }
#ifdef KWB_PROFILE_WORKER
    reply["profile"] = m_last_profile;
#endif
    return reply;
  }

  // One call, driven by the parent through the control page (worker/protocol.h): the worker takes no time. It
  // arms, sleeps until the parent has written the call's inputs and woken it, says ready, spins until go, runs,
  // says done (a device worker then reads the outputs back and says downloaded) and sleeps until the parent has
  // captured the outputs; only then does it check the device copies and answer on the socket.
  nlohmann::json run_call(const nlohmann::json& m) {
    if (m_run == nullptr) return error(FailureReason::protocol, "run before load");
    const protocol::RunMessage msg = protocol::run_message_from_json(m);
    CallArgs args;
    build_args(msg, args);

    // Layout randomization: kwb_run's frame starts stack_offset bytes lower than it would (a multiple of 16, so the
    // ABI's alignment holds). Taken here, before the call's window, so it costs nothing inside it.
    volatile char* stack_pad = static_cast<volatile char*>(alloca(msg.stack_offset + 16));
    stack_pad[0] = 0;
    const kwb_call call = make_call(args.in, args.out, args.scalars);

    // From here to the read-back, the backend is called only through the sealed call path.
    const CallPath& path = g_call_path.path;
    const bool device = !path.host_memory;
    const uint64_t seq = msg.call;
    std::atomic<uint32_t>& state = m_control->state;
    const uint32_t go = protocol::state_word(seq, protocol::Phase::go);
    const uint32_t done = protocol::state_word(seq, protocol::Phase::done);
    if (!arm_and_wait_for_wake(state, seq)) {
      return error(FailureReason::protocol, "run: the control page is not in the wake phase of this call");
    }
    // A device backend gets the parent's bytes before the call, and the outputs back after it: the parent validates
    // exactly what the device computed. None of it is timed. Between wake and ready the worker runs nothing but
    // this function (and upload_all) and, on a device backend, the sealed call path's functions and the sealed
    // OpenCL table: no virtual call, nothing the implementation could have redirected in an earlier call (the
    // parent counts this window's CPU).
    if (device) upload_all(path, args.in, args.out);
    ++m_calls;
    state.store(protocol::state_word(seq, protocol::Phase::ready), std::memory_order_release);
    // Spin for go (the parent reacts within microseconds); should the parent share this CPU after all, yield now
    // and then so that it can run.
    for (uint32_t spins = 1; state.load(std::memory_order_acquire) != go; ++spins) {
      protocol::cpu_relax();
      if ((spins & 0xFFFF) == 0) ::sched_yield();
    }
    path.begin_call(path.self);
#ifdef KWB_PROFILE_WORKER
    const int rc = profiled_run(call, seq);
#else
    const int rc = m_run(&call);
#endif
    path.finish_call(path.self);
    m_control->rc.store(rc, std::memory_order_relaxed);
    // Only go may become done: a control page that left go during the call was written by something in this
    // process other than the worker (the parent has then already taken the call as done, and its CPU watch has seen
    // what ran afterwards). Say so instead of overwriting the parent's next phase.
    uint32_t expected_go = go;
    if (!state.compare_exchange_strong(expected_go, done, std::memory_order_acq_rel)) {
      return error(FailureReason::protocol, "the control page left the go phase while kwb_run ran (it read " +
                                                std::to_string(expected_go) + "): something in the worker wrote it");
    }
    // A parent that sleeps through the call is woken; one that spins for done (a timed cpu worker's) is not: the
    // system call would be kwb's own CPU after done, charged to the call (docs/timing.md, "What a sample charges").
    if (!m_parent_spins) protocol::futex_wake(state);
    if (device) {
      if (std::optional<nlohmann::json> failed = read_back(path, state, seq, args.out)) return *failed;
    }
    // Asleep until the parent has captured the outputs (after done, or after downloaded on a device backend).
    const uint32_t captured_after = device ? protocol::state_word(seq, protocol::Phase::downloaded) : done;
    while (state.load(std::memory_order_acquire) == captured_after) protocol::futex_wait(state, captured_after);
    return ran_reply(seq, device, args);
  }

#ifdef KWB_PROFILE_WORKER
  // The measurement window is kwb_run and nothing else: callgrind collects only between the two toggles, the
  // allocation counter and the hardware counters are switched on just outside them. After the window, callgrind
  // writes this call's costs to their own file, labelled with the call number (the parent maps files to calls by
  // that label, and drops warm-up calls).
  int profiled_run(const kwb_call& call, uint64_t call_number) {
    if (!m_counters) m_counters = std::make_unique<HardwareCounters>();
    uint64_t allocations = 0, bytes = 0, frees = 0;
    kwb_alloc_counter_start();
    m_counters->start();
    CALLGRIND_TOGGLE_COLLECT;
    const int rc = m_run(&call);
    CALLGRIND_TOGGLE_COLLECT;
    m_counters->stop();
    kwb_alloc_counter_stop(&allocations, &bytes, &frees);
    const std::string label = "kwb_run call " + std::to_string(call_number);
    CALLGRIND_DUMP_STATS_AT(label.c_str());
    m_last_profile = {{"alloc_count", allocations},
                      {"alloc_bytes", bytes},
                      {"free_count", frees},
                      {"hw", m_counters->read()},
                      {"on_valgrind", RUNNING_ON_VALGRIND != 0},
                      {"callgrind_requests", KWB_HAVE_CALLGRIND_REQUESTS != 0}};
    return rc;
  }
#endif

  int finish() {
    if (m_teardown != nullptr) m_teardown();
    m_buffers.clear();
    return 0;
  }

  Channel m_channel;
  protocol::ControlBlock* m_control = nullptr;  // shared with the parent; never unmapped
  UniqueFd m_artifact_fd;
  std::unique_ptr<Backend> m_backend;
  std::string m_task;
  void* m_handle = nullptr;  // never dlclose'd: an implementation's destructors would run at an arbitrary point
  kwb_run_fn m_run = nullptr;
  kwb_teardown_fn m_teardown = nullptr;
  std::map<int, std::unique_ptr<Mapping>> m_buffers;
  uint64_t m_calls = 0;  // kwb_run calls made
  // The parent spins for done (load's parent_spins): it needs no wake-up then. Were this flipped by the
  // implementation, a sleeping parent would notice done within its 1 ms futex timeout, on the implementation's time.
  bool m_parent_spins = false;
#ifndef KWB_PROFILE_WORKER
  std::unique_ptr<Sandbox> m_sandbox;
#endif
#ifdef KWB_PROFILE_WORKER
  std::vector<std::string> m_profile_features;
  std::unique_ptr<HardwareCounters> m_counters;
  nlohmann::json m_last_profile;
#endif
};

}  // namespace
}  // namespace kwb

namespace kwb {
namespace {

// A worker started by root becomes a user of its own before it reads a request (util/worker_user.h): no
// capabilities, no access to what only root may read, nothing that can trace or signal kwb or another worker, and
// no file another worker wrote (docs/threat-model.md). Returns what failed, or "".
std::string drop_privileges() {
  if (::geteuid() != 0 && ::getuid() != 0) return "";
  const std::optional<WorkerUser> user = worker_user_of(::getpid());
  if (::setgroups(0, nullptr) != 0) return std::string("setgroups: ") + std::strerror(errno);
  if (::setresgid(user->gid, user->gid, user->gid) != 0) return std::string("setresgid: ") + std::strerror(errno);
  if (::setresuid(user->uid, user->uid, user->uid) != 0) return std::string("setresuid: ") + std::strerror(errno);
  if (::getuid() == 0 || ::geteuid() == 0 || ::setresuid(0, 0, 0) == 0) return "root could be regained";
  return "";
}

// The worker dies with its parent: PR_SET_PDEATHSIG (set after the credential change, which clears it), then a check
// that the parent named in the environment is still the parent (it may have died before the signal was armed).
std::string tie_to_parent() {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return std::string("PR_SET_PDEATHSIG: ") + std::strerror(errno);
  const char* expected = std::getenv("KWB_PARENT_PID");
  if (expected != nullptr && std::to_string(::getppid()) != expected) return "the parent is already gone";
  return "";
}

}  // namespace
}  // namespace kwb

namespace kwb {

// The allocator of a warm, long-running process (docs/timing.md "The allocator"): glibc's malloc keeps what it
// freed instead of returning it to the kernel. Left at its defaults, an almost empty process like this one unmaps
// every large block at free (and trims its heap top), so an implementation that allocates temporaries pays a page
// fault per 4 KiB on every call (480 per rmsnorm prefill call, 65 538 per dram call): a cost of the harness's empty
// heap, not of the kernel, and the largest source of per-call variance measured here. Every arm gets the same
// setting, set before any implementation is loaded; the profile worker uses it too, so its counts describe the
// calls that are timed. Allocations are still counted by the profile stage.
void retain_freed_memory() {
  ::mallopt(M_MMAP_MAX, 0);                                      // every block from the heap, which is kept ...
  ::mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());  // ... and never trimmed
}

}  // namespace kwb

int main() {
  // Only fds 0-4 are the worker's (docs/worker-protocol.md); anything else inherited by accident (a parent's log or
  // bundle file opened without O_CLOEXEC) must not reach the implementation. Not under valgrind, which keeps its own
  // descriptors high in the same table.
#ifndef KWB_PROFILE_WORKER
  ::close_range(kwb::protocol::k_first_unused_fd, ~0U, 0);
#endif
  for (std::string (*step)() : {kwb::drop_privileges, kwb::tie_to_parent}) {
    if (std::string e = step(); !e.empty()) {
      const std::string msg = "kwb-worker: " + e + "\n";
      (void)!::write(2, msg.data(), msg.size());
      ::_exit(71);
    }
  }
  kwb::harden_process();
  kwb::install_fault_handlers();
  kwb::retain_freed_memory();
  try {
    kwb::Worker worker;
    int rc = worker.serve();
    ::_exit(rc);  // no static destructors: the implementation may have registered some
  } catch (const std::exception& e) {
    (void)!::write(2, e.what(), std::strlen(e.what()));
    ::_exit(70);
  }
}
