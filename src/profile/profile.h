// `kwb profile` and the profile stage of `kwb validate`: what an implementation does on each workload, measured
// separately from timing and never part of a decision (docs/profile.md).
//
//   instructions per call     callgrind, collecting only inside kwb_run (client requests in kwb-profile-worker)
//   D1 / LL misses per call   callgrind's cache simulation, same window
//   passes                    the functions that ran inside kwb_run, with their share of the instructions
//   allocations per call      malloc interposition in kwb-profile-worker, counting only inside kwb_run
//   hardware counters         perf_event_open around kwb_run in kwb-profile-worker, where the kernel allows it
//   bytes moved, roofline     minimum bytes from the signature; median time of a short run in kwb-worker; the
//                             machine's STREAM-style bandwidth (profile/bandwidth.h)
//
// run_profile does not check the implementation: the caller must have run the check and refused to profile an
// implementation that failed it (no metric is ever reported for rejected code). Every call the profile makes is
// still validated like a checked call; a call that fails validation is a failure of the profile, not a number.
#pragma once

#include "builder/builder.h"
#include "profile/bandwidth.h"
#include "profile/valgrind.h"
#include "session/worker_session.h"
#include "task/task.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace kwb {

inline constexpr const char* k_profile_schema = "kwb.profile";
inline constexpr int k_profile_schema_version = 1;

// A workload moving more than this is "large": callgrind runs it once, without a warm-up call (a 128 MiB RMSNorm
// takes ~10 s per call under callgrind, and caches cannot hold it, so a warm-up would not change what is seen).
inline constexpr uint64_t k_large_workload_bytes = 64ull << 20;

struct ProfileOptions {
  BackendKind backend = BackendKind::cpu;
  std::vector<std::string> workloads;  // case names; empty: every timing case
  // Per call; x50 under valgrind. No default here: callers pass the user's value or pipeline/defaults.h's.
  std::chrono::milliseconds timeout{0};
  int callgrind_calls = 2;    // collected calls per workload (1 for a large workload)
  int callgrind_warmups = 1;  // uncollected calls first (0 for a large workload): lazy binding, first touch
  int native_calls = 4;       // calls in kwb-profile-worker without valgrind: allocations, hardware counters
  int timing_warmups = 3;     // the short timing run in kwb-worker behind the achieved bandwidth
  int timing_calls = 15;
  uint64_t nonce = 0;                // input data: 0 = the task's published seeds (set 0 of each case)
  std::filesystem::path raw_dir;     // keep callgrind's files here, one folder per workload (empty: discarded)
  std::filesystem::path cache_root;  // bandwidth probe and derived builds are cached here (empty: cache_dir())
  std::function<void(const std::string&)> progress;  // one line per step, for people
};

// Callgrind's counts for one collected call.
struct EventCounts {
  uint64_t instructions = 0;     // Ir
  uint64_t data_reads = 0;       // Dr
  uint64_t data_writes = 0;      // Dw
  uint64_t d1_misses = 0;        // D1mr + D1mw
  uint64_t ll_misses = 0;        // DLmr + DLmw (data misses of the last-level cache)
  uint64_t i1_misses = 0;        // I1mr
  uint64_t window_overhead = 0;  // instructions collected outside kwb_run (the toggle and the call itself)
};

// One function that ran inside the window, averaged over the collected calls.
struct FunctionShare {
  std::string name;                   // as callgrind prints it (demangled)
  std::string short_name;             // without namespace noise and parameters
  std::string object;                 // the ELF file it came from
  bool implementation = false;        // code of the implementation's own shared object
  double self_instructions = 0;       // per call
  double inclusive_instructions = 0;  // per call
  double self_share = 0;              // of all instructions in the window
  double inclusive_share = 0;
  double calls = 0;  // times called per call of kwb_run
};

struct InstructionProfile {
  bool available = false;
  std::string unavailable_reason;
  int warmups = 0;
  int calls = 0;
  std::string note;                   // why this many calls, which build ran
  std::vector<EventCounts> per_call;  // every collected call, in order
  double instructions_per_call = 0;   // means over the collected calls
  double d1_misses_per_call = 0;
  double ll_misses_per_call = 0;
  double data_reads_per_call = 0;
  double data_writes_per_call = 0;
  std::vector<FunctionShare> functions;  // every function with instructions of its own, most first
  int implementation_functions = 0;      // "passes": functions of the implementation's object that ran
  std::vector<std::string> cache_model;  // valgrind's simulated I1/D1/LL geometry
  // Set when valgrind could not execute the artifact itself (AVX-512 on valgrind 3.19): callgrind then ran the
  // same source built with the same recorded command plus -mno-avx512f, and the counts describe that build.
  bool derived_build = false;
  std::string derived_reason;
  BuildIdentity profiled_identity;
};

struct AllocationProfile {
  bool available = false;
  std::string unavailable_reason;
  std::string mechanism = "malloc/calloc/realloc/aligned interposition in kwb-profile-worker, inside kwb_run only";
  std::vector<uint64_t> counts, bytes, frees;  // one per call
  double count_per_call = 0;                   // means over the calls
  double bytes_per_call = 0;
};

struct HardwareCounterProfile {
  bool available = false;
  std::string unavailable_reason;
  std::vector<uint64_t> instructions, cycles;  // user space, inside kwb_run, one per call
  double instructions_per_call = 0;            // medians over the calls
  double cycles_per_call = 0;
};

struct RooflineProfile {
  uint64_t min_bytes = 0;  // every input and output once
  bool measured = false;
  std::string unavailable_reason;
  int warmups = 0;
  std::vector<int64_t> ns;  // the timed calls, as the worker measured them
  double median_ns = 0;
  double achieved_gb_per_s = 0;
  double peak_gb_per_s = 0;  // the bandwidth probe
  double fraction = 0;       // achieved / peak; above 1: served from caches
};

// Device backends: what one call launches on the device, from the worker's kernel trace (docs/backends.md).
struct DeviceKernelStat {
  std::string name;
  double launches_per_call = 0;
  double median_device_ns = 0;  // per launch, over every traced launch of this name (0: no timestamps)
  bool on_call_stream = true;
};

struct DeviceProfile {
  bool available = false;
  std::string unavailable_reason;
  std::string mechanism;  // how the trace was taken
  int warmups = 0;
  int calls = 0;
  std::vector<size_t> commands;  // per traced call
  double commands_per_call = 0;
  std::vector<DeviceKernelStat> kernels;  // in launch order of the first call, then any others
  double median_call_device_ns = 0;       // the call's start-to-end events
  double median_host_ns = 0;              // the host clock around the call (traced: slower than a timed call)
};

struct WorkloadProfile {
  std::string name;
  std::string dims;
  InstructionProfile instructions;
  AllocationProfile allocations;
  HardwareCounterProfile hardware;
  RooflineProfile roofline;
  DeviceProfile device;           // device backends only
  std::vector<Failure> failures;  // calls that failed validation or died while being profiled
  double seconds = 0;
};

struct ProfileReport {
  std::string task;
  std::string implementation;
  BuildIdentity identity;
  BackendKind backend = BackendKind::cpu;
  ValgrindInstall valgrind;
  BandwidthProbe bandwidth;
  std::vector<WorkloadProfile> workloads;
  bool has_failures() const;
};

// Throws UsageError for a workload name the task does not have, DataError for an artifact that did not build.
ProfileReport run_profile(const Task& task, const Artifact& artifact, const ProfileOptions& options);

// The device pass of one workload (profile/device_profile.cpp): warm-ups, then traced calls in kwb-worker, every
// one validated; fills wp.device and adds failures to wp. (The roofline comes from the untraced timing pass.)
void device_pass(const Task& task, const Artifact& artifact, const InputSet& set, const ProfileOptions& o,
                 WorkloadProfile& wp);
nlohmann::json to_json(const DeviceProfile& d);

nlohmann::json to_json(const ProfileReport& r);

// kwb-profile-worker: $KWB_PROFILE_WORKER, else next to the kwb executable.
std::filesystem::path profile_worker_executable();

}  // namespace kwb
