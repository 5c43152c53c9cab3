// kwb profile TASK_DIR --impl SOURCE [--workload NAME]... [--json]
// Checks the implementation first and refuses to profile one that fails (no metric for rejected code), then
// reports per workload what it does: instructions, cache misses, passes, allocations, bytes and bandwidth.
#include "builder/builder.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/terminal.h"
#include "pipeline/check.h"
#include "profile/profile.h"
#include "task/task.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/units.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

namespace kwb::cli {

namespace {

namespace fs = std::filesystem;

struct ProfileArgs {
  std::string task_dir;
  std::string impl;
  BackendKind backend = BackendKind::cpu;
  std::vector<std::string> workloads;
  bool json = false;
  bool require_valgrind = false;
  double timeout_seconds = k_default_timeout_seconds;
  int callgrind_calls = ProfileOptions{}.callgrind_calls;
  std::string raw_dir;
};

// "4" when every call allocated the same, "0.33 (1, 0, 0)" when they differ.
std::string per_call_text(double mean, const std::vector<uint64_t>& each, bool as_bytes) {
  const bool same = std::all_of(each.begin(), each.end(), [&](uint64_t v) { return v == each.front(); });
  std::string head = as_bytes ? bytes_text(mean) : fmt::format("{:g}", mean);
  if (same) return head;
  return fmt::format("{} ({})", head, fmt::join(each, ", "));
}

void print_refusal(const CheckReport& check, const std::string& why) {
  std::cout << fmt::format("kwb profile: task {}, implementation {}\n\n", check.task, check.implementation);
  std::cout << "profile refused: " << why << "\n\n";
  std::cout << "check failures:\n";
  size_t shown = 0;
  for (const Failure& f : check.failures) {
    if (shown++ == 20) {
      std::cout << fmt::format("  ... and {} more (kwb check --json lists all)\n", check.failures.size() - 20);
      break;
    }
    std::string where = f.case_name.empty() ? "build" : f.case_name;
    if (f.call >= 0) where += fmt::format(" call {}", f.call);
    std::string detail = f.detail.size() > 300 ? f.detail.substr(0, 300) + " ..." : f.detail;
    std::cout << fmt::format("  [{}] {}: {} — {}\n", f.reason, where, f.assertion, detail);
  }
}

void print_header(const ProfileReport& r, const CheckReport& check) {
  std::cout << fmt::format("kwb profile: task {}, implementation {}\n", r.task, r.implementation);
  std::cout << fmt::format("  artifact sha256 {}; check PASS ({} assertions)\n",
                           r.identity.artifact_sha256.substr(0, 16), check.passed);
  if (!is_device(r.backend))
    std::cout << fmt::format("  instructions, cache misses, functions: {}\n",
                             r.valgrind.found ? "callgrind (" + r.valgrind.version + "), collected inside kwb_run only"
                                              : "unavailable: " + r.valgrind.reason);
  for (const WorkloadProfile& w : r.workloads) {
    if (!w.instructions.cache_model.empty()) {
      std::cout << fmt::format("  simulated caches: {}\n", fmt::join(w.instructions.cache_model, "; "));
      break;
    }
  }
  std::cout << fmt::format("  memory bandwidth probe: {:.2f} GB/s (copy {:.2f}, triad {:.2f}; one thread; {}{})\n",
                           r.bandwidth.peak_gb_per_s, r.bandwidth.copy_gb_per_s, r.bandwidth.triad_gb_per_s,
                           r.bandwidth.from_cache ? "cached, measured " : "measured ", r.bandwidth.measured_at);
}

void print_workload_table(const ProfileReport& r) {
  std::vector<std::vector<std::string>> rows;
  for (const WorkloadProfile& w : r.workloads) {
    const InstructionProfile& ip = w.instructions;
    const AllocationProfile& a = w.allocations;
    const HardwareCounterProfile& h = w.hardware;
    const RooflineProfile& rl = w.roofline;
    rows.push_back({w.name, w.dims, ip.available ? grouped_count(ip.instructions_per_call) : "n/a",
                    ip.available ? grouped_count(ip.d1_misses_per_call) : "n/a",
                    ip.available ? grouped_count(ip.ll_misses_per_call) : "n/a",
                    a.available ? per_call_text(a.count_per_call, a.counts, false) : "n/a",
                    a.available ? per_call_text(a.bytes_per_call, a.bytes, true) : "n/a",
                    h.available ? grouped_count(h.instructions_per_call) : "n/a",
                    bytes_text(static_cast<double>(rl.min_bytes)), rl.measured ? time_text(rl.median_ns) : "n/a",
                    rl.measured ? fmt::format("{:.2f}", rl.achieved_gb_per_s) : "n/a",
                    rl.measured && rl.peak_gb_per_s > 0 ? fmt::format("{:.2f}", rl.fraction) : "n/a"});
  }
  std::cout << "\n"
            << format_table({"workload", "dims", "instr/call", "D1 miss/call", "LL miss/call", "allocs/call",
                             "alloc bytes/call", "hw instr/call", "min bytes", "median", "GB/s", "of probe"},
                            rows);
}

void print_device_commands(const ProfileReport& r) {
  std::cout << "\ndevice commands per call (the worker's trace; device time per launch, median):\n";
  for (const WorkloadProfile& w : r.workloads) {
    const DeviceProfile& d = w.device;
    if (!d.available) {
      std::cout << fmt::format("  {}: unavailable: {}\n", w.name, d.unavailable_reason);
      continue;
    }
    std::cout << fmt::format("  {}: {:g} command(s) per call, {} on the device per call\n", w.name, d.commands_per_call,
                             d.median_call_device_ns > 0 ? time_text(d.median_call_device_ns) : "n/a");
    for (const DeviceKernelStat& k : d.kernels) {
      std::cout << fmt::format("    {:<24} x{:<4g} {:>10}{}\n", k.name, k.launches_per_call,
                               k.median_device_ns > 0 ? time_text(k.median_device_ns) : "n/a",
                               k.on_call_stream ? "" : "  (other queue/stream)");
    }
  }
  if (!r.workloads.empty()) std::cout << "  trace: " << r.workloads.front().device.mechanism << "\n";
}

void print_passes(const ProfileReport& r) {
  std::cout << "\npasses: functions that ran inside kwb_run, share of its instructions (* = the implementation's "
               "own code)\n";
  for (const WorkloadProfile& w : r.workloads) {
    const InstructionProfile& ip = w.instructions;
    if (!ip.available) {
      std::cout << fmt::format("  {}: unavailable: {}\n", w.name, ip.unavailable_reason);
      continue;
    }
    // Every function of the implementation (the passes), however small; other code (the allocator, the
    // harness's call) only where it matters.
    std::vector<std::string> parts;
    size_t others = 0;
    for (const FunctionShare& f : ip.functions) {
      if (!f.implementation && (f.self_share < 0.005 || others++ == 6)) continue;
      const std::string share =
          f.self_share < 0.001 ? std::string("<0.1%") : fmt::format("{:.1f}%", 100 * f.self_share);
      parts.push_back(fmt::format("{}{}{} {}", f.implementation ? "*" : "", f.short_name,
                                  f.implementation ? "" : " [" + fs::path(f.object).filename().string() + "]", share));
    }
    std::cout << fmt::format("  {} ({} of the implementation's functions ran): {}\n", w.name,
                             ip.implementation_functions, fmt::join(parts, ", "));
  }
}

// Notes that hold for several workloads are printed once, naming them all.
void print_notes(const ProfileReport& r) {
  std::vector<std::pair<std::string, std::vector<std::string>>> notes;
  auto note = [&](const std::string& workload, const std::string& text) {
    for (auto& [t, names] : notes) {
      if (t == text) {
        names.push_back(workload);
        return;
      }
    }
    notes.push_back({text, {workload}});
  };
  for (const WorkloadProfile& w : r.workloads) {
    const InstructionProfile& ip = w.instructions;
    if (ip.available) note(w.name, "callgrind: " + ip.note);
    if (ip.derived_build) note(w.name, ip.derived_reason);
    if (!w.allocations.available) note(w.name, "allocations unavailable: " + w.allocations.unavailable_reason);
    if (!w.hardware.available) note(w.name, "hardware counters unavailable: " + w.hardware.unavailable_reason);
    if (!w.roofline.measured) note(w.name, "bandwidth unavailable: " + w.roofline.unavailable_reason);
    for (const Failure& f : w.failures) {
      note(w.name, fmt::format("FAILED [{}] {}: {}", f.reason, f.assertion, f.detail.substr(0, 300)));
    }
  }
  std::cout << "\nnotes:\n";
  for (const auto& [text, names] : notes) std::cout << fmt::format("  {}: {}\n", fmt::join(names, ", "), text);
  std::cout << "  GB/s = min bytes (every input and output once) / median time of a short run in kwb-worker; "
               "'of probe' above 1 means the data came from caches.\n";
}

void print_human(const ProfileReport& r, const CheckReport& check) {
  print_header(r, check);
  print_workload_table(r);
  if (is_device(r.backend)) {
    print_device_commands(r);
  } else {
    print_passes(r);
  }
  print_notes(r);
  std::cout << "\ndescriptive only: a profile never changes a decision\n";
}

}  // namespace

Action add_profile(CLI::App& root) {
  auto args = std::make_shared<ProfileArgs>();
  CLI::App* app =
      root.add_subcommand("profile",
                          "What an implementation does per workload: instructions, cache misses, passes, allocations, "
                          "bytes moved and achieved bandwidth (descriptive; checks it first)");
  app->add_option("task_dir", args->task_dir, "Task folder (holding task.toml)")->required();
  app->add_option("--impl", args->impl, "Implementation source (.c/.cpp)")->required();
  add_backend_option(*app, args->backend);
  app->add_option("--workload", args->workloads, "Only this case (repeatable; default: every timing case)");
  app->add_flag("--json", args->json, "Print one JSON object (schema kwb.profile) instead of the tables");
  app->add_option("--timeout-seconds", args->timeout_seconds, "Per call (x50 under valgrind)")
      ->capture_default_str()
      ->check(in_range(k_timeout_range));
  app->add_option("--callgrind-calls", args->callgrind_calls,
                  "Collected calls per workload under callgrind (1 for workloads moving over 64 MiB)")
      ->capture_default_str()
      ->check(in_range(k_callgrind_calls_range));
  app->add_option("--raw-dir", args->raw_dir, "Keep callgrind's output files and valgrind's log here");
  app->add_flag("--require-valgrind", args->require_valgrind,
                "Exit 69 when valgrind is missing (otherwise the rest is still measured and kwb exits 0)");
  return [args]() {
    Task task = load_task(args->task_dir);
    if (!task.backends.contains(args->backend)) {
      throw DataError(fmt::format("{}: the task has no [backends.{}] section", task.manifest.string(), args->backend));
    }
    for (const std::string& w : args->workloads) (void)task.require_case("--workload", w, true);
    require_backend(args->backend);
    Artifact art = build_implementation({args->impl, 0, args->backend});
    const auto timeout = timeout_from_seconds(args->timeout_seconds);

    // No metric is ever reported for rejected code: the full check first.
    std::cerr << "kwb profile: checking the implementation first\n";
    CheckOptions co;
    co.backend = args->backend;
    co.timeout = timeout;
    CheckReport check = run_check(task, art, co);
    if (auto why = timing_refusal(check)) {
      if (args->json) {
        std::cout << json_text({{"schema", k_profile_schema},
                                {"schema_version", k_profile_schema_version},
                                {"refused", true},
                                {"reason", *why},
                                {"check", to_json(check)}},
                               2)
                  << "\n";
      } else {
        print_refusal(check, *why);
      }
      return static_cast<int>(art.ok ? ExitCode::rejected : ExitCode::data_error);
    }

    ProfileOptions po;
    po.backend = args->backend;
    po.workloads = args->workloads;
    po.timeout = timeout;
    po.callgrind_calls = args->callgrind_calls;
    po.raw_dir = args->raw_dir;
    po.progress = [](const std::string& line) { std::cerr << "kwb profile: " << line << "\n"; };
    ProfileReport report = run_profile(task, art, po);
    if (args->json) {
      nlohmann::json j = to_json(report);
      j["refused"] = false;
      j["check"] = {{"verdict", "PASS"}, {"passed", check.passed}};
      std::cout << json_text(j, 2) << "\n";
    } else {
      print_human(report, check);
    }
    if (report.has_failures()) return static_cast<int>(ExitCode::rejected);
    if (args->require_valgrind && !report.valgrind.found) {
      std::cerr << "kwb profile: " << report.valgrind.reason << "\n";
      return static_cast<int>(ExitCode::unavailable);
    }
    return static_cast<int>(ExitCode::ok);
  };
}

}  // namespace kwb::cli
