// The device pass of `kwb profile` (profile.h): for a device backend, callgrind would count the host runtime, not
// the kernels; what says what an implementation does on the device is the worker's kernel trace. A few warm-up
// calls first, not counted (PoCL compiles each kernel at its first launch per configuration; CUDA loads modules
// lazily), then the counted calls; every call is traced and validated like a checked call.
#include "profile/profile.h"
#include "util/text.h"

#include "stats/descriptive.h"
#include "task/data.h"

#include <fmt/format.h>

#include <map>

namespace kwb {

namespace {

constexpr int k_device_warmups = 2;
constexpr int k_device_calls = 5;

std::string trace_mechanism(BackendKind backend) {
  if (backend == BackendKind::opencl) {
    return "kwb-worker's exported clEnqueue* wrappers; one profiling event per command on the call's "
           "CL_QUEUE_PROFILING_ENABLE queue (check and profile only, never timed calls)";
  }
  return "CUPTI activity records (CONCURRENT_KERNEL, MEMCPY, MEMSET) collected in kwb-worker around kwb_run "
         "(check and profile only, never timed calls)";
}

double median_or_zero(std::vector<double> v) { return v.empty() ? 0.0 : stats::median(v); }

}  // namespace

nlohmann::json to_json(const DeviceProfile& d) {
  if (!d.available) return {{"available", false}, {"reason", d.unavailable_reason}, {"mechanism", d.mechanism}};
  nlohmann::json kernels = nlohmann::json::array();
  for (const DeviceKernelStat& k : d.kernels) {
    kernels.push_back({{"name", k.name},
                       {"launches_per_call", k.launches_per_call},
                       {"median_device_ns", k.median_device_ns},
                       {"on_call_stream", k.on_call_stream}});
  }
  return {{"available", true},
          {"mechanism", d.mechanism},
          {"warmups", d.warmups},
          {"calls", d.calls},
          {"commands_per_call", d.commands_per_call},
          {"commands", d.commands},
          {"kernels", kernels},
          {"median_call_device_ns", d.median_call_device_ns},
          {"median_host_ns", d.median_host_ns}};
}

void device_pass(const Task& task, const Artifact& artifact, const InputSet& set, const ProfileOptions& o,
                 WorkloadProfile& wp) {
  DeviceProfile& d = wp.device;
  d.mechanism = trace_mechanism(o.backend);
  d.warmups = k_device_warmups;
  d.calls = k_device_calls;
  SessionOptions so;
  so.backend = o.backend;
  so.timeout = o.timeout;
  so.poison_seed = mix_seed(o.nonce, 0xDE71CE);
  so.trace = true;
  WorkerSession session(task, artifact, so);
  LoadOutcome lo = session.start();
  if (!lo.ok) {
    wp.failures.push_back({set.case_->name, -1, "loads", lo.reason, lo.detail});
    d.unavailable_reason = "the worker could not load the implementation";
    return;
  }
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> launch_ns;
  std::map<std::string, size_t> launches;
  std::map<std::string, bool> on_stream;
  std::vector<double> call_device_ns, host_ns;
  for (int k = 0; k < d.warmups + d.calls; ++k) {
    CallResult r = session.call(set, k, CallMode::check);
    if (!r.valid()) {
      for (Failure& f : r.failures) wp.failures.push_back(std::move(f));
      d.unavailable_reason = "a traced call failed validation: nothing is reported for it";
      return;
    }
    if (k < d.warmups) continue;
    if (!r.kernels) {
      d.unavailable_reason = "the worker returned no trace for a traced call";
      return;
    }
    d.commands.push_back(r.kernels->size());
    for (const DeviceCommand& c : *r.kernels) {
      if (!launches.contains(c.name)) order.push_back(c.name);
      ++launches[c.name];
      if (c.device_ns >= 0) launch_ns[c.name].push_back(static_cast<double>(c.device_ns));
      on_stream[c.name] = on_stream.contains(c.name) ? on_stream[c.name] && c.on_call_stream : c.on_call_stream;
    }
    if (r.device_ns >= 0) call_device_ns.push_back(static_cast<double>(r.device_ns));
    host_ns.push_back(static_cast<double>(r.ns));
  }
  session.shutdown();
  double total = 0;
  for (size_t n : d.commands) total += static_cast<double>(n);
  d.commands_per_call = d.commands.empty() ? 0 : total / static_cast<double>(d.commands.size());
  for (const std::string& name : order) {
    // CUDA C++ kernels are traced by their mangled symbol (CUPTI): shown as their source spells them.
    d.kernels.push_back({demangle(name), static_cast<double>(launches[name]) / d.calls, median_or_zero(launch_ns[name]),
                         on_stream[name]});
  }
  d.median_call_device_ns = median_or_zero(call_device_ns);
  d.median_host_ns = median_or_zero(host_ns);
  d.available = true;
}

}  // namespace kwb
