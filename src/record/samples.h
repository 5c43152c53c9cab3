// samples.csv: every timed call of a comparison, one row each (docs/evidence-bundle.md). The row type and its
// columns are declared once here (describe); the writer (compare, validate) and the reader (the bundle reader, for
// verify and the reports) walk that declaration, so a column added, renamed or moved is one edit.
#pragma once

#include "util/cpu_watch.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kwb {

struct Sample {
  std::string workload;
  int block = 0;           // -1 for the pilot
  std::string arm;         // "A", "A'", "B"
  int order_position = 0;  // position of this arm's visit within its block
  int64_t pid = 0;
  int sample_index = 0;  // call index within the visit
  bool warmup = false;
  int input_set = 0;
  int64_t ns = 0;  // the sample: window_ns plus the CPU charged outside it (util/cpu_watch.h, charged_ns)
  bool output_valid = false;
  int64_t device_ns = -1;  // device backends: the device's events around the call; -1 for cpu (no device clock)
  // The visit's layout (stats/layout.h): which build of the arm's layout pool ran, the stack offset at the call and
  // each tensor's offset within its page (inputs then outputs).
  int layout = 0;
  uint32_t stack_offset = 0;
  std::vector<uint32_t> tensor_offsets;
  // The CPU watch's figures for the call (session/worker_session.h, CallResult): the worker's CPU charged before go
  // (beyond the parent's reaction) and after done, -1 where not watched per window; the go-to-done window; the
  // worker's CPU between the previous call and this one (bounded by its median, not charged).
  int64_t pre_cpu_ns = -1;
  int64_t post_cpu_ns = -1;
  int64_t window_ns = 0;
  int64_t gap_cpu_ns = -1;
  // Device backends: the call's uploads before go and read-back after done, as the worker's CPU and as wall time
  // (CallResult), recorded and not charged (util/cpu_watch.h, device_charged_ns). -1 on cpu.
  int64_t outside_cpu_ns = -1;
  int64_t outside_wall_ns = -1;
};

// A block's floor (util/cpu_watch.h, Floor): the medians of the CPU before go and after done over the rows given
// that count (timed, valid, on a host backend and watched per window): the reference arm's (A's) rows of the block
// before it, or for block 0 of the pilot (block -1). {0, 0} when none does.
inline cpu_watch::Floor block_floor(const std::vector<const Sample*>& reference_rows) {
  std::vector<int64_t> pre, post;
  for (const Sample* s : reference_rows) {
    if (s->warmup || !s->output_valid || s->outside_cpu_ns >= 0 || s->pre_cpu_ns < 0 || s->post_cpu_ns < 0) continue;
    pre.push_back(s->pre_cpu_ns);
    post.push_back(s->post_cpu_ns);
  }
  return {cpu_watch::median_ns(std::move(pre)), cpu_watch::median_ns(std::move(post))};
}

// A host sample charged again net of its block's floor (from window_ns, pre_cpu_ns and post_cpu_ns, which keep what
// the parent read); a device sample (outside_cpu_ns recorded) is left as it is.
inline void charge_beyond(Sample& s, const cpu_watch::Floor& floor) {
  if (s.outside_cpu_ns >= 0 || (floor.pre_ns == 0 && floor.post_ns == 0)) return;
  s.ns = cpu_watch::charged_ns(s.window_ns, s.pre_cpu_ns, s.post_cpu_ns, floor);
}

// A row of a bundle's samples.csv: the comparison it belongs to ("aa" or "ab"), the sample, and its line (for
// messages).
struct SampleRow : Sample {
  std::string comparison;
  int line = 0;
};

template <typename V, typename S>
void describe_columns(V& v, S& s) {
  v("workload", s.workload);
  v("block", s.block);
  v("arm", s.arm);
  v("order_position", s.order_position);
  v("pid", s.pid);
  v("sample_index", s.sample_index);
  v("warmup", s.warmup);
  v("input_set", s.input_set);
  v("ns", s.ns);
  v("output_valid", s.output_valid);
  v("device_ns", s.device_ns);
  v("layout", s.layout);
  v("stack_offset", s.stack_offset);
  v("tensor_offsets", s.tensor_offsets);
  v("pre_cpu_ns", s.pre_cpu_ns);
  v("post_cpu_ns", s.post_cpu_ns);
  v("window_ns", s.window_ns);
  v("gap_cpu_ns", s.gap_cpu_ns);
  v("outside_cpu_ns", s.outside_cpu_ns);
  v("outside_wall_ns", s.outside_wall_ns);
}

// The header line (with its newline); a bundle's file starts with a "comparison" column, compare's own does not.
std::string samples_csv_header(bool with_comparison);
// compare --output-dir's samples.csv.
std::string samples_csv(const std::vector<Sample>& samples);
// A bundle's samples.csv.
std::string samples_csv(const std::vector<SampleRow>& rows);

// Reads a bundle's samples.csv: the header must be exactly samples_csv_header(true). A malformed row is a problem
// ("samples.csv:<line>: ..."), never a crash; the rows that parse are returned.
std::vector<SampleRow> parse_samples_csv(std::string_view text, std::vector<std::string>& problems);
// Reads compare --output-dir's samples.csv (header samples_csv_header(false)); every row's comparison is "".
std::vector<SampleRow> parse_compare_samples_csv(std::string_view text, std::vector<std::string>& problems);

}  // namespace kwb
