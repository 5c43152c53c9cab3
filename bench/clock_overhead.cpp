// bench/clock_overhead.cpp: the cost and granularity of the clocks a timer could use on this machine.
//
// For each clock it prints
//   - the resolution the kernel advertises (clock_getres; for steady_clock the period of its type),
//   - ns per call: a batch of back-to-back reads timed with CLOCK_MONOTONIC, median over several batches,
//   - the smallest nonzero difference seen between two back-to-back reads, and how often two reads were equal
//     (a coarse clock returns the same value many times in a row).
// rdtsc/rdtscp count TSC ticks; they are converted to ns with a frequency calibrated against CLOCK_MONOTONIC.
// Build and run: bench/run_clock_overhead.sh. Not a test: the figures depend on the machine (CPU, clocksource,
// virtualisation), and on nothing else running at the same time.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#define KWB_BENCH_X86 1
#endif

namespace {

volatile uint64_t g_sink;  // keeps every read alive

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

template <clockid_t Id>
uint64_t read_posix() {
  timespec ts;
  clock_gettime(Id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t read_steady() { return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()); }

#ifdef KWB_BENCH_X86
uint64_t read_rdtsc() { return __rdtsc(); }
uint64_t read_rdtscp() {
  unsigned aux;
  return __rdtscp(&aux);
}
bool has_rdtscp() {
  unsigned a, b, c, d;
  if (__get_cpuid(0x80000001u, &a, &b, &c, &d) == 0) return false;
  return (d >> 27) & 1u;
}
// TSC ticks per ns, against CLOCK_MONOTONIC over ~100 ms.
double tsc_ghz() {
  const uint64_t t0 = mono_ns(), c0 = __rdtsc();
  while (mono_ns() - t0 < 100000000u) {
  }
  const uint64_t t1 = mono_ns(), c1 = __rdtsc();
  return static_cast<double>(c1 - c0) / static_cast<double>(t1 - t0);
}
#endif

struct Row {
  std::string name, resolution;
  double ns_per_call = 0, ns_per_call_min = 0;
  double min_delta_ns = 0;  // smallest nonzero back-to-back delta, in ns
  double zero_fraction = 0;
};

template <uint64_t (*Read)()>
Row measure(const std::string& name, const std::string& resolution, double ns_per_unit) {
  constexpr int k_batches = 15, k_calls = 200000, k_pairs = 200000;
  std::vector<double> per_call;
  for (int b = 0; b < k_batches + 1; ++b) {  // batch 0 warms up and is dropped
    uint64_t acc = 0;
    const uint64_t t0 = mono_ns();
    for (int i = 0; i < k_calls; ++i) acc += Read();
    const uint64_t t1 = mono_ns();
    g_sink = acc;
    if (b > 0) per_call.push_back(static_cast<double>(t1 - t0) / k_calls);
  }
  std::sort(per_call.begin(), per_call.end());
  uint64_t min_delta = UINT64_MAX, zeros = 0;
  for (int i = 0; i < k_pairs; ++i) {
    const uint64_t a = Read();
    const uint64_t b = Read();
    const uint64_t d = b - a;
    if (d == 0) {
      ++zeros;
    } else if (d < min_delta) {
      min_delta = d;
    }
  }
  Row r;
  r.name = name;
  r.resolution = resolution;
  r.ns_per_call = per_call[per_call.size() / 2];
  r.ns_per_call_min = per_call.front();
  r.min_delta_ns = min_delta == UINT64_MAX ? 0.0 : static_cast<double>(min_delta) * ns_per_unit;
  r.zero_fraction = static_cast<double>(zeros) / k_pairs;
  return r;
}

std::string getres(clockid_t id) {
  timespec ts;
  if (clock_getres(id, &ts) != 0) return "?";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f ns", static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec));
  return buf;
}

std::string first_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  if (!std::getline(f, s)) return "?";
  return s;
}

}  // namespace

int main() {
  std::printf("clocksource: %s (available: %s)\n",
              first_line("/sys/devices/system/clocksource/clocksource0/current_clocksource").c_str(),
              first_line("/sys/devices/system/clocksource/clocksource0/available_clocksource").c_str());
  using P = std::chrono::steady_clock::period;
  char steady_res[64];
  std::snprintf(steady_res, sizeof steady_res, "%.0f ns (period)", 1e9 * P::num / P::den);

  std::vector<Row> rows;
  rows.push_back(measure<read_posix<CLOCK_MONOTONIC>>("CLOCK_MONOTONIC", getres(CLOCK_MONOTONIC), 1.0));
  rows.push_back(measure<read_posix<CLOCK_MONOTONIC_RAW>>("CLOCK_MONOTONIC_RAW", getres(CLOCK_MONOTONIC_RAW), 1.0));
  rows.push_back(
      measure<read_posix<CLOCK_MONOTONIC_COARSE>>("CLOCK_MONOTONIC_COARSE", getres(CLOCK_MONOTONIC_COARSE), 1.0));
  rows.push_back(measure<read_steady>("steady_clock::now()", steady_res, 1.0));
#ifdef KWB_BENCH_X86
  const double ghz = tsc_ghz();
  char tsc_res[64];
  std::snprintf(tsc_res, sizeof tsc_res, "1 tick = %.3f ns", 1.0 / ghz);
  rows.push_back(measure<read_rdtsc>("rdtsc", tsc_res, 1.0 / ghz));
  if (has_rdtscp()) rows.push_back(measure<read_rdtscp>("rdtscp", tsc_res, 1.0 / ghz));
  std::printf("TSC: %.3f GHz (calibrated against CLOCK_MONOTONIC over 100 ms)\n", ghz);
#endif
  std::printf("\n%-24s %-20s %12s %12s %18s %10s\n", "clock", "resolution", "ns/call med", "ns/call min",
              "min nonzero delta", "equal %");
  for (const Row& r : rows) {
    char delta[32];
    if (r.min_delta_ns > 0) {
      std::snprintf(delta, sizeof delta, "%.1f ns", r.min_delta_ns);
    } else {
      std::snprintf(delta, sizeof delta, "none seen");
    }
    std::printf("%-24s %-20s %12.1f %12.1f %18s %9.1f%%\n", r.name.c_str(), r.resolution.c_str(), r.ns_per_call,
                r.ns_per_call_min, delta, 100.0 * r.zero_fraction);
  }
  std::printf(
      "\nns/call: median (and min) over 15 batches of 200000 back-to-back calls, timed with CLOCK_MONOTONIC.\n"
      "min nonzero delta / equal %%: over 200000 pairs of back-to-back reads (rdtsc is not ordered, so two\n"
      "reads can overlap in the pipeline and differ by a tick; rdtscp waits for earlier instructions).\n");
  return 0;
}
