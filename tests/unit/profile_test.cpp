// The profile's arithmetic and its reader of callgrind's output, on fixed inputs: no processes, no valgrind.
#include "profile/profile.h"
#include "profile/bandwidth.h"
#include "profile/callgrind_output.h"
#include "support/build_paths.h"
#include "task/task.h"
#include "util/error.h"

#include "util/text.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace kwb {
namespace {

// Cut from a real per-call dump of tasks/rmsnorm/cpu/baseline.cpp (valgrind 3.19, --dump-instr=no
// --compress-strings=no --compress-pos=no), with the libc/libstdc++ internals trimmed to keep it short.
constexpr const char* k_dump = R"(# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 17298
cmd:  ./kwb-profile-worker
part: 1


desc: I1 cache: 32768 B, 64 B, 8-way associative
desc: D1 cache: 49152 B, 64 B, 12-way associative
desc: LL cache: 536870912 B, 64 B, 2-way associative

desc: Timerange: Basic block 0 - 335294
desc: Trigger: Client Request: kwb_run call 2

positions: line
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
summary: 7004 1100 1060 10 520 512 10 0 256


ob=/cache/artifacts/abc/impl.so
fl=???
fn=(anonymous namespace)::pass_square(float const*, float*, long)
0 3098 513 512 2 257 255 2 0 255

fn=kwb_run
0 103 39 12 10 3 0 10 1
cob=/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30
cfi=???
cfn=operator new[](unsigned long)
calls=1 0
0 700 300 169 19 25 5 2 0 1
0 1 1 0 0 1
cfn=(anonymous namespace)::pass_square(float const*, float*, long)
calls=1 0
0 3098 513 512 2 257 255 2 0 255
0 6 0 1 1 0 0 1
cfn=(anonymous namespace)::pass_square(float const*, float*, long)
calls=1 0
0 3098 513 512 2 257 255 2 0 255

ob=/build/kwb-profile-worker
fl=???
fn=(below main)
0 4 1 2
cob=/cache/artifacts/abc/impl.so
cfi=???
cfn=kwb_run
calls=1 0
0 7006 1366 1206 0 0 0 0 0 0

ob=/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30
fl=???
fn=operator new[](unsigned long)
0 700 300 169 19 25 5 2 0 1

totals: 7010 1367 1208 33 542 515 14 0 512
)";

TEST(profile_test, callgrind_reader_gets_events_totals_and_the_trigger) {
  CallgrindDump d = parse_callgrind(k_dump);
  ASSERT_EQ(d.events.size(), 9u);
  EXPECT_EQ(d.events[0], "Ir");
  EXPECT_EQ(d.total("Ir"), 7010u);  // totals:, not summary:
  EXPECT_EQ(d.total("D1mr") + d.total("D1mw"), 542u + 515u);
  EXPECT_EQ(d.total("DLmr") + d.total("DLmw"), 512u);
  EXPECT_EQ(d.total("nope"), 0u);
  EXPECT_EQ(d.trigger, "Client Request: kwb_run call 2");
  EXPECT_EQ(d.descriptions.size(), 5u);
}

const CallgrindFunction& find(const CallgrindDump& d, const std::string& name) {
  for (const CallgrindFunction& f : d.functions) {
    if (f.name == name) return f;
  }
  throw std::runtime_error("no function " + name);
}

TEST(profile_test, callgrind_reader_separates_self_and_inclusive_costs) {
  CallgrindDump d = parse_callgrind(k_dump);
  const CallgrindFunction& run = find(d, "kwb_run");
  EXPECT_EQ(run.object, "/cache/artifacts/abc/impl.so");
  EXPECT_EQ(d.event(run.self, "Ir"), 103u + 1 + 6);                // the lines that follow no calls=
  EXPECT_EQ(d.event(run.inclusive, "Ir"), 110u + 700 + 2 * 3098);  // plus every call it made
  EXPECT_EQ(run.times_called, 1u);
  const CallgrindFunction& square = find(d, "(anonymous namespace)::pass_square(float const*, float*, long)");
  EXPECT_EQ(d.event(square.self, "Ir"), 3098u);
  EXPECT_EQ(square.times_called, 2u);
  // A call arc with cob= lands in that object; the next one without cob= is back in the caller's object.
  const CallgrindFunction& op_new = find(d, "operator new[](unsigned long)");
  EXPECT_EQ(op_new.object, "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30");
  EXPECT_EQ(square.object, "/cache/artifacts/abc/impl.so");
  // "(below main)" is a name, not a compressed id.
  EXPECT_EQ(find(d, "(below main)").object, "/build/kwb-profile-worker");
}

TEST(profile_test, window_overhead_is_totals_minus_the_calls_into_kwb_run) {
  CallgrindDump d = parse_callgrind(k_dump);
  const uint64_t in_run = d.event(d.inclusive_calls_to("kwb_run"), "Ir");
  EXPECT_EQ(in_run, 7006u);
  EXPECT_EQ(d.total("Ir") - in_run, 4u);
}

TEST(profile_test, callgrind_reader_accepts_compressed_names_and_missing_totals) {
  const char* text =
      "events: Ir Dr\n"
      "ob=(1) /lib/a.so\n"
      "fn=(1) f\n"
      "5 10 2\n"
      "cfn=(2) g\n"
      "calls=3 7\n"
      "5 30\n"
      "fn=(2)\n"
      "7 30 1\n"
      "jump=2 9\n"
      "9\n";
  CallgrindDump d = parse_callgrind(text);
  EXPECT_EQ(d.total("Ir"), 40u);  // no totals: or summary:, so the sum of self costs
  EXPECT_EQ(d.total("Dr"), 3u);
  const CallgrindFunction& g = find(d, "g");
  EXPECT_EQ(g.object, "/lib/a.so");
  EXPECT_EQ(g.times_called, 3u);
  EXPECT_EQ(d.event(find(d, "f").inclusive, "Ir"), 40u);
}

TEST(profile_test, callgrind_reader_refuses_what_is_not_callgrind_output) {
  EXPECT_THROW(parse_callgrind("hello world\n"), DataError);
  EXPECT_THROW(parse_callgrind("events: Ir\nfn=f\n12 x\n"), DataError);
  EXPECT_THROW(parse_callgrind("fn=(4)\n"), DataError);
}

TEST(profile_test, short_function_names_drop_namespace_noise_and_parameters) {
  EXPECT_EQ(short_function_name("(anonymous namespace)::pass_square(float const*, float*, long)"), "pass_square");
  EXPECT_EQ(short_function_name("kwb_run"), "kwb_run");
  EXPECT_EQ(short_function_name("(below main)"), "(below main)");
  EXPECT_EQ(short_function_name("operator new[](unsigned long)"), "operator new[]");
  EXPECT_EQ(short_function_name("std::vector<int, std::allocator<int> >::push_back(int const&)"),
            "std::vector<int, std::allocator<int> >::push_back");
}

// A mangled symbol (a CUDA kernel as CUPTI names it, a symbol valgrind could not demangle) reads as its source does.
TEST(profile_test, mangled_names_are_demangled_and_others_left_as_they_are) {
  EXPECT_EQ(demangle("_Z14rmsnorm_kernelPKfS0_Pfii"), "rmsnorm_kernel(float const*, float const*, float*, int, int)");
  EXPECT_EQ(short_function_name("_ZN12_GLOBAL__N_111pass_squareEPKfPfl"), "pass_square");
  EXPECT_EQ(demangle("rmsnorm_rows"), "rmsnorm_rows");  // an OpenCL kernel, a C function
  EXPECT_EQ(demangle("_Znot a symbol"), "_Znot a symbol");
}

TEST(profile_test, min_bytes_moved_counts_every_input_and_output_once) {
  const Task task = load_task(std::filesystem::path(KWB_SOURCE_DIR) / "tasks" / "rmsnorm");
  // x [rows, cols] + weight [cols] in, y [rows, cols] out, all f32.
  EXPECT_EQ(min_bytes_moved(task, *task.find_case("decode")), (4096u + 4096u + 4096u) * 4u);
  EXPECT_EQ(min_bytes_moved(task, *task.find_case("prefill")), (2u * 64 * 4096 + 4096) * 4u);
  EXPECT_EQ(min_bytes_moved(task, *task.find_case("dram")), (2ull * 8192 * 4096 + 4096) * 4u);
  EXPECT_GT(min_bytes_moved(task, *task.find_case("dram")), k_large_workload_bytes);
  EXPECT_LT(min_bytes_moved(task, *task.find_case("prefill")), k_large_workload_bytes);
}

TEST(profile_test, roofline_arithmetic) {
  EXPECT_DOUBLE_EQ(achieved_gb_per_s(1'000'000'000, 1e9), 1.0);  // 1 GB in 1 s
  EXPECT_DOUBLE_EQ(achieved_gb_per_s(49152, 2457.6), 20.0);      // 48 KiB in 2.4576 us
  EXPECT_DOUBLE_EQ(achieved_gb_per_s(100, 0.0), 0.0);            // no time, no figure (never Inf)
  EXPECT_DOUBLE_EQ(roofline_fraction(15.0, 30.0), 0.5);
  EXPECT_DOUBLE_EQ(roofline_fraction(60.0, 30.0), 2.0);  // above 1: served from caches
  EXPECT_DOUBLE_EQ(roofline_fraction(15.0, 0.0), 0.0);
}

TEST(profile_test, bandwidth_record_round_trips_and_refuses_other_schemas) {
  BandwidthProbe p;
  p.environment = current_environment();
  p.array_bytes = 64ull << 20;
  p.trials = 5;
  p.copy_gb_per_s = 12.5;
  p.triad_gb_per_s = 13.25;
  p.peak_gb_per_s = 13.25;
  p.measured_at = "2025-01-01T00:00:00Z";
  const nlohmann::json j = to_json(p);
  EXPECT_EQ(j["schema"], "kwb.bandwidth");
  EXPECT_EQ(j["schema_version"], 1);
  const BandwidthProbe q = bandwidth_probe_from_json(j);
  EXPECT_EQ(q.environment.digest(), p.environment.digest());
  EXPECT_DOUBLE_EQ(q.peak_gb_per_s, 13.25);
  EXPECT_EQ(q.array_bytes, p.array_bytes);
  nlohmann::json other = j;
  other["schema_version"] = 2;
  EXPECT_THROW(bandwidth_probe_from_json(other), DataError);
  EXPECT_THROW(bandwidth_probe_from_json(nlohmann::json::object()), DataError);
}

TEST(profile_test, environment_key_names_the_cpu_and_kernel) {
  const EnvironmentKey k = current_environment();
  EXPECT_FALSE(k.cpu_model.empty());
  EXPECT_FALSE(k.kernel.empty());
  EXPECT_EQ(k.digest().size(), 64u);
  EnvironmentKey other = k;
  other.kernel += "-other";
  EXPECT_NE(other.digest(), k.digest());
}

TEST(profile_test, json_and_markdown_render_unavailable_measurements_as_such) {
  ProfileReport r;
  r.task = "rmsnorm";
  r.implementation = "/x/baseline.cpp";
  r.backend = BackendKind::cpu;
  r.valgrind.reason = "valgrind not found on PATH";
  r.bandwidth.peak_gb_per_s = 20.0;
  WorkloadProfile w;
  w.name = "decode";
  w.dims = "x[1, 4096]";
  w.instructions.unavailable_reason = r.valgrind.reason;
  w.allocations.available = true;
  w.allocations.counts = {4, 4};
  w.allocations.bytes = {32776, 32776};
  w.allocations.frees = {4, 4};
  w.allocations.count_per_call = 4;
  w.allocations.bytes_per_call = 32776;
  w.hardware.unavailable_reason = "perf_event_open(instructions): No such file or directory";
  w.roofline.min_bytes = 49152;
  w.roofline.measured = true;
  w.roofline.ns = {2400, 2500, 2600};
  w.roofline.median_ns = 2500;
  w.roofline.achieved_gb_per_s = achieved_gb_per_s(49152, 2500);
  w.roofline.peak_gb_per_s = 20.0;
  w.roofline.fraction = roofline_fraction(w.roofline.achieved_gb_per_s, 20.0);
  r.workloads.push_back(w);

  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j["schema"], k_profile_schema);
  EXPECT_EQ(j["schema_version"], k_profile_schema_version);
  const nlohmann::json& wj = j["workloads"][0];
  EXPECT_EQ(wj["instructions"]["available"], false);
  EXPECT_EQ(wj["instructions"]["reason"], "valgrind not found on PATH");
  EXPECT_FALSE(wj["instructions"].contains("instructions_per_call"));
  EXPECT_EQ(wj["allocations"]["count_per_call"], 4.0);
  EXPECT_EQ(wj["hardware_counters"]["available"], false);
  EXPECT_NEAR(wj["roofline"]["fraction_of_probe"].get<double>(), 49152.0 / 2500 / 20.0, 1e-12);
  EXPECT_EQ(wj["roofline"]["label"], "descriptive: not a verdict");
}

}  // namespace
}  // namespace kwb
