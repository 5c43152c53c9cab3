#include "session/worker_session.h"

#include "builder/elf_inspect.h"
#include "oracle/tolerance.h"
#include "session/cold_flush.h"
#include "session/replay.h"
#include "util/error.h"
#include "util/paths.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

namespace kwb {

nlohmann::json to_json(const Failure& f) {
  nlohmann::json j = {{"case", f.case_name},
                      {"call", f.call},
                      {"assertion", f.assertion},
                      {"reason", to_string(f.reason)},
                      {"detail", f.detail}};
  if (f.elements > 0) j["elements"] = f.elements;
  return j;
}

std::vector<std::string> distinct_reasons(const std::vector<Failure>& failures) {
  std::vector<std::string> names;
  for (const Failure& f : failures) {
    const std::string name(to_string(f.reason));
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

WorkerSession::WorkerSession(const Task& task, const Artifact& artifact, const SessionOptions& options)
    : m_task(task),
      m_artifact(artifact),
      m_options(options),
      m_rng(mix_seed(options.poison_seed, 0x5E55)),
      m_secret(unpredictable_seed()) {
  if (options.timeout <= std::chrono::milliseconds(0)) throw InternalError("WorkerSession without a per-call timeout");
}

WorkerSession::~WorkerSession() = default;

WorkerLimits WorkerSession::limits() const {
  // Room for the worker itself, every buffer of the largest case several times over (inputs, outputs, an
  // implementation's temporaries) and the thread stacks and malloc arenas the task allows. A backstop against
  // unbounded memory, not a budget: the check's correctness cases and the timing pools stay far below it.
  uint64_t largest = 0;
  for (const Case& c : m_task.cases) {
    uint64_t bytes = 0;
    for (const auto* list : {&m_task.signature.inputs, &m_task.signature.outputs}) {
      for (const TensorSpec& s : *list) bytes += resolve_shape(s, c).elements() * dtype_size(s.dtype);
    }
    largest = std::max(largest, bytes);
  }
  WorkerLimits l;
  const auto threads = static_cast<uint64_t>(std::max(1, m_task.threads));
  l.address_space_bytes = (uint64_t{2} << 30) + 6 * largest + threads * (uint64_t{256} << 20);
  l.cpu_seconds = 3600;  // only matters if the parent is gone; the per-call timeout is the real deadline
  return l;
}

LoadOutcome WorkerSession::start() {
  m_worker.reset();
  m_slots = {};
  m_outputs = {};
  m_gap_cpu.clear();
  m_idle_cpu.clear();
  m_calls_watched = 0;
  m_outputs_case.clear();
  m_previous_expected.clear();
  // Before any process exists: an artifact that interposes on the runtime or on clocks is never loaded.
  if (LoadRefusal refusal = refuse_to_load(m_artifact.path); refusal.reason) {
    LoadOutcome out;
    out.reason = *refusal.reason;
    out.detail = refusal.detail;
    return out;
  }
  m_worker = std::make_unique<WorkerProcess>(
      m_options.worker_executable.empty() ? worker_executable() : m_options.worker_executable, m_options.timeout,
      m_options.wrapper);
  DeviceOptions device;
  device.trace = m_options.trace;
  device.cold = m_options.cold;
  if (device_backend()) {
    // Compiled kernels are cached per implementation identity and worker environment: workers of one artifact
    // under the same runtime settings share them (PoCL compiles each kernel for each launch configuration once),
    // workers of different artifacts, or under other settings, never do.
    const std::filesystem::path dir = worker_runtime_cache_dir(
        m_options.backend, worker_runtime_cache_key(m_options.backend, m_artifact.identity.key));
    device.runtime_cache_dir = dir.string();
  }
  LoadOutcome out = m_worker->load(m_artifact.path, m_options.backend, m_task.threads, m_task.name, limits(), device);
  return out;
}

bool WorkerSession::shutdown() { return m_worker ? m_worker->shutdown() : true; }

bool WorkerSession::freeze() {
  return m_worker && m_worker->freeze(std::chrono::steady_clock::now() + m_options.timeout);
}

const InputSet& WorkerSession::twin_of(const InputSet& set) {
  if (!set.twin) set.twin = std::make_unique<InputSet>(make_twin(m_task, set, m_secret.next()));
  return *set.twin;
}

std::string WorkerSession::fault_tensor(const WorkerDeath& d) const {
  if (!d.fault_buffer) return "";
  for (size_t i = 0; i < m_slots.ids.size() && i < m_task.signature.inputs.size(); ++i) {
    if (m_slots.ids[i] == *d.fault_buffer) {
      return fmt::format("; the address is {} of input '{}'", d.fault_where, m_task.signature.inputs[i].name);
    }
  }
  for (size_t i = 0; i < m_outputs.ids.size() && i < m_task.signature.outputs.size(); ++i) {
    if (m_outputs.ids[i] == *d.fault_buffer) {
      return fmt::format("; the address is {} of output '{}'", d.fault_where, m_task.signature.outputs[i].name);
    }
  }
  return "";
}

bool WorkerSession::ensure_slots(const InputSet& set) {
  bool same = m_slots.case_name == set.case_->name && m_slots.buffers.size() == set.inputs.size();
  for (size_t i = 0; same && i < set.inputs.size(); ++i) {
    same = m_slots.buffers[i]->layout().nbytes == set.inputs[i]->layout().nbytes;
  }
  if (same) return true;
  if (!m_slots.ids.empty() && alive()) m_worker->unmap(m_slots.ids);
  m_slots = {};
  for (size_t i = 0; i < set.inputs.size(); ++i) {
    // Without a layout's offsets (check), an input ends flush with a page, within the cache line timing's offsets
    // keep (64 bytes): the worker fences the pages after it, so an over-read past the end faults
    // (out_of_bounds_read) rather than reading canaries.
    const size_t nbytes = set.inputs[i]->layout().nbytes;
    const size_t offset =
        m_options.tensor_offsets.empty() ? (k_page - nbytes % k_page) % k_page / 64 * 64 : tensor_offset(i);
    auto buf =
        std::make_unique<SharedBuffer>(fmt::format("kwb-in-{}", m_task.signature.inputs[i].name), nbytes, offset);
    buf->seal_for_others();
    const int id = next_id();
    if (!m_worker->map(id, *buf)) return false;
    m_slots.ids.push_back(id);
    m_slots.buffers.push_back(std::move(buf));
  }
  m_slots.case_name = set.case_->name;
  return true;
}

void WorkerSession::fill_slots(const InputSet& set) {
  m_slots.sources.resize(set.inputs.size());
  for (size_t i = 0; i < set.inputs.size(); ++i) {
    if (m_slots.sources[i] == set.inputs[i]) continue;
    const auto from = set.inputs[i]->data();
    std::memcpy(m_slots.buffers[i]->data().data(), from.data(), from.size());
    m_slots.sources[i] = set.inputs[i];
  }
  m_slots.content = &set;
}

bool WorkerSession::ensure_outputs(const InputSet& set) {
  if (m_outputs_case == set.case_->name && !m_outputs.buffers.empty()) return true;
  if (!m_outputs.ids.empty() && alive()) m_worker->unmap(m_outputs.ids);
  m_outputs = {};
  for (size_t i = 0; i < m_task.signature.outputs.size(); ++i) {
    const TensorSpec& spec = m_task.signature.outputs[i];
    auto buf = std::make_unique<SharedBuffer>(fmt::format("kwb-out-{}", spec.name),
                                              set.output_shapes[i].elements() * dtype_size(spec.dtype),
                                              tensor_offset(m_task.signature.inputs.size() + i));
    int id = next_id();
    if (!m_worker->map(id, *buf)) return false;
    m_outputs.ids.push_back(id);
    m_outputs.buffers.push_back(std::move(buf));
  }
  m_outputs_case = set.case_->name;
  return true;
}

void OutputErrors::merge(const OutputErrors& o) {
  max_abs_error = std::max(max_abs_error, o.max_abs_error);
  max_rel_error = std::max(max_rel_error, o.max_rel_error);
  tolerance_used = std::max(tolerance_used, o.tolerance_used);
}

namespace {

// The pattern an output is filled with before each call, fresh per call, so that nothing can learn it, and such that
// an element left unwritten cannot pass for a result:
// - a floating dtype: a quiet NaN with a random payload, never the canonical one a computation produces. It cannot
//   pass a tolerance test by accident.
// - bool: a random byte from 2 to 255, which is no boolean.
// - an integer dtype, which has no pattern a result cannot hold: a random value that this call's expected output
//   does not contain (8-bit: one drawn from the values absent from it; wider: a random word, redrawn while the
//   output holds it). An unwritten element then differs from the oracle's value and is reported unwritten. Only an
//   8-bit output that holds all 256 values gets a value it contains, and an unwritten element hides where the
//   oracle expects exactly that value (1 in 256 of them), on this call only.
uint64_t make_poison(Rng& rng, DType dtype, std::span<const double> expected) {
  const DTypeInfo& t = dtype_info(dtype);
  if (t.kind == DTypeKind::floating) {
    for (;;) {
      // The quiet bit set and a random payload below it; never the canonical quiet NaN a computation produces.
      const uint64_t p = t.quiet_nan | (rng.next() & t.nan_payload);
      if (p != t.quiet_nan) return p;
    }
  }
  if (t.kind == DTypeKind::boolean) return 2 + rng.next() % 254;
  const uint64_t mask = t.size == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * t.size)) - 1;
  // The value a pattern reads as: load_element's view of its low bytes.
  auto value_of = [&](uint64_t bits) {
    unsigned char bytes[8];
    std::memcpy(bytes, &bits, sizeof bytes);
    return load_element(dtype, bytes, 0);
  };
  if (t.size == 1) {
    bool seen[256] = {};
    for (double e : expected) {
      if (e >= t.lowest && e <= t.highest) seen[static_cast<uint8_t>(static_cast<int>(e))] = true;
    }
    std::vector<uint64_t> absent;
    for (uint64_t b = 0; b < 256; ++b) {
      if (!seen[static_cast<uint8_t>(static_cast<int>(value_of(b)))]) absent.push_back(b);
    }
    if (!absent.empty()) return absent[rng.next() % absent.size()];
    return rng.next() & mask;
  }
  for (int attempt = 0;; ++attempt) {
    const uint64_t p = rng.next() & mask;
    const double v = value_of(p);
    if (attempt == 8 || std::find(expected.begin(), expected.end(), v) == expected.end()) return p;
  }
}

std::string describe(const ElementReport& e, const std::vector<int64_t>& dims) {
  std::vector<int64_t> idx(dims.size());
  size_t rest = e.index;
  for (size_t d = dims.size(); d-- > 0;) {
    idx[d] = static_cast<int64_t>(rest % static_cast<size_t>(dims[d]));
    rest /= static_cast<size_t>(dims[d]);
  }
  return fmt::format("first at [{}]: got {:.9g}, expected {:.9g}", fmt::join(idx, ", "), e.got, e.expected);
}

}  // namespace

// One call's assertions as they are made: a passed one counts, a failed one becomes a Failure of this call.
struct WorkerSession::Checks {
  CallResult& res;
  const std::string& case_name;
  int call_index;

  void fail(std::string assertion, FailureReason reason, std::string detail, size_t elements = 0) {
    res.failures.push_back({case_name, call_index, std::move(assertion), reason, std::move(detail), elements});
  }
  void check(bool ok, std::string assertion, FailureReason reason, std::string detail, size_t elements = 0) {
    if (ok) {
      ++res.passed;
    } else {
      fail(std::move(assertion), reason, std::move(detail), elements);
    }
  }
};

// Fresh per call, per output: its poison and its canaries' seed.
struct WorkerSession::Guards {
  std::vector<uint64_t> poison;
  std::vector<uint64_t> canary_seed;
};

namespace {

// The worker answered: the call's times and what it reports, and its first assertion (completed).
void take_answer(CallResult& res, const RunOutcome& out) {
  res.completed = true;
  res.ns = out.ns;
  res.window_ns = out.ns;
  res.profile = out.profile;
  res.device_ns = out.device_ns;
  res.kernels = out.kernels;
  ++res.passed;  // completed
}

// Where a damaged canary of `buf` lies: how many bytes before or after the output's data.
std::string overwrite_detail(const SharedBuffer& buf, size_t damaged, const std::string& name) {
  const BufferLayout& l = buf.layout();
  const bool before = damaged < l.data_offset;
  return fmt::format("bytes {} {} the data of output '{}' were overwritten",
                     before ? l.data_offset - damaged : damaged - l.data_offset - l.nbytes + 1,
                     before ? "before" : "after", name);
}

}  // namespace

CallResult WorkerSession::call(const InputSet& requested, int call_index, CallMode mode) {
  const bool check_mode = mode == CallMode::check;
  CallResult res;
  Checks checks{res, requested.case_->name, call_index};
  auto died = [&]() {
    const WorkerDeath& d = *m_worker->death();
    checks.fail("completed", d.reason, d.detail + fault_tensor(d));
    return res;
  };
  // A worker that died since its last answer (found out by an unmap, say) fails this call with its death.
  if (!m_worker || (!alive() && !m_worker->death())) throw InternalError("WorkerSession::call without a worker");
  if (!alive()) return died();
  if (!ensure_slots(requested) || !ensure_outputs(requested)) return died();

  // A timing trap: this call secretly runs on the set's twin, in the same slots.
  bool trap = mode == CallMode::timing && hardened() && m_secret.uniform01() < k_trap_probability;
  if (trap && !requested.twin && m_options.twins_made_between_visits) {
    m_twins_wanted.push_back(&requested);
    trap = false;
  }
  const InputSet& set = trap ? twin_of(requested) : requested;
  const Guards guards = draw_guards(set);
  // What the outputs hold at done, captured while the worker is provably asleep (its CPU clock is read around
  // this); compared after validation to catch work that goes on after the call.
  const bool watch_outputs = hardened();
  const RunOutcome out = m_worker->run(run_request(set), run_hooks(set, guards, watch_outputs));
  if (!out.answered) return died();
  const int64_t cpu_at_answer = hardened() && !device_backend() ? m_worker->cpu_time_ns() : -1;
  take_answer(res, out);
  check_reports(checks, out, set, check_mode);
  for (size_t i = 0; i < m_task.signature.outputs.size(); ++i) check_output(checks, i, set, guards, check_mode);
  if (trap) {
    for (Failure& f : res.failures) f.detail += "; the call ran on " + set.twin_detail + ", behind the same addresses";
  }
  if (hardened()) check_timing(checks, out, set, watch_outputs, cpu_at_answer);
  if (check_mode) m_previous_expected = set.expected;
  return res;
}

WorkerSession::Guards WorkerSession::draw_guards(const InputSet& set) {
  const size_t n_out = m_task.signature.outputs.size();
  Guards g{std::vector<uint64_t>(n_out), std::vector<uint64_t>(n_out)};
  for (size_t i = 0; i < n_out; ++i) {
    g.poison[i] = make_poison(m_rng, m_task.signature.outputs[i].dtype, set.expected[i]);
    g.canary_seed[i] = m_rng.next();
  }
  return g;
}

RunRequest WorkerSession::run_request(const InputSet& set) const {
  RunRequest req;
  for (size_t i = 0; i < set.inputs.size(); ++i) {
    const TensorSpec& s = m_task.signature.inputs[i];
    req.inputs.push_back({s.name, m_slots.ids[i], s.dtype, set.input_shapes[i].dims});
  }
  for (size_t i = 0; i < m_task.signature.outputs.size(); ++i) {
    const TensorSpec& s = m_task.signature.outputs[i];
    req.outputs.push_back({s.name, m_outputs.ids[i], s.dtype, set.output_shapes[i].dims});
  }
  const std::vector<double> scalars = resolve_scalars(m_task.signature, *set.case_);
  for (size_t i = 0; i < scalars.size(); ++i) req.scalars.emplace_back(m_task.signature.scalars[i].name, scalars[i]);
  req.stack_offset = m_options.stack_offset;
  return req;
}

// The call's data goes in while the worker sleeps, armed (worker/protocol.h): nothing of it exists in the worker's
// memory before the CPU clock starts watching, and the cold flush is the parent's own.
RunHooks WorkerSession::run_hooks(const InputSet& set, const Guards& guards, bool watch_outputs) {
  RunHooks hooks;
  hooks.before_wake = [this, &set, &guards]() {
    fill_slots(set);
    for (size_t i = 0; i < m_task.signature.outputs.size(); ++i) {
      m_outputs.buffers[i]->fill_pattern(guards.poison[i], dtype_size(m_task.signature.outputs[i].dtype));
      m_outputs.buffers[i]->write_canaries(guards.canary_seed[i]);
    }
    if (m_options.cold && !device_backend()) {
      std::vector<std::span<const unsigned char>> ranges;
      for (const auto& b : m_slots.buffers) ranges.push_back(std::as_const(*b).data());
      for (const auto& b : m_outputs.buffers) ranges.push_back(std::as_const(*b).data());
      ColdFlush::shared().flush(ranges);
    }
  };
  if (watch_outputs) {
    hooks.at_done = [this]() {
      m_at_done.resize(m_outputs.buffers.size());
      for (size_t i = 0; i < m_outputs.buffers.size(); ++i) {
        const auto bytes = std::as_const(*m_outputs.buffers[i]).data();
        m_at_done[i].resize(bytes.size());
        std::memcpy(m_at_done[i].data(), bytes.data(), bytes.size());
      }
    };
  }
  return hooks;
}

// What the worker reports about the call itself: its return code, its descriptors, the inputs (check), and on a
// device backend the device-side checks.
void WorkerSession::check_reports(Checks& checks, const RunOutcome& out, const InputSet& set, bool check_mode) {
  checks.check(out.rc == 0, "returned_zero", FailureReason::run_failed, fmt::format("kwb_run returned {}", out.rc));
  checks.check(out.descriptors_intact, "descriptors_intact", FailureReason::shape_mismatch,
               "the implementation changed a tensor descriptor (data pointer, shape, dtype or strides)");
  if (check_mode) {
    CallResult inputs = verify_inputs(set, checks.call_index);
    checks.res.passed += inputs.passed;
    checks.res.failures.insert(checks.res.failures.end(), inputs.failures.begin(), inputs.failures.end());
  }
  if (out.device) check_device_reports(checks, out);
}

void WorkerSession::check_device_reports(Checks& checks, const RunOutcome& out) const {
  // The host inputs are sealed; their device copies are not, so the worker compares them after every call.
  for (const TensorSpec& spec : m_task.signature.inputs) {
    const std::string& name = spec.name;
    const auto& modified = out.inputs_modified_on_device;
    checks.check(std::find(modified.begin(), modified.end(), name) == modified.end(), "input_unchanged:" + name,
                 FailureReason::input_modified, fmt::format("input '{}' changed on the device during the call", name));
  }
  // The device counterpart of the canaries: guard bytes around every device tensor, checked by the worker.
  for (const auto* list : {&m_task.signature.inputs, &m_task.signature.outputs}) {
    for (const TensorSpec& spec : *list) {
      const auto& over = out.written_outside_on_device;
      checks.check(
          std::find(over.begin(), over.end(), spec.name) == over.end(), "no_write_outside_on_device:" + spec.name,
          FailureReason::out_of_bounds_write,
          fmt::format("the guard bytes around the device copy of '{}' changed: something wrote outside it", spec.name));
    }
  }
  // All of a call's device work goes on the queue/stream kwb hands it (docs/candidate-abi.md): work elsewhere is
  // what escapes a stream-synchronized timer in other harnesses. kwb's synchronization covers it anyway; the
  // implementation is rejected for trying.
  checks.check(out.off_stream_commands == 0, "on_call_stream", FailureReason::work_off_queue, out.off_stream_detail);
  // The device runtime's own state in the worker (the OpenCL driver's dispatch table) is kwb's, not the
  // implementation's: rewriting it is tampering, whatever the outputs.
  checks.check(out.runtime_tampered.empty(), "device_runtime_intact", FailureReason::sandbox_violation,
               out.runtime_tampered);
}

// Output `i`: nothing written around it, every element written, NaN/Inf where the oracle has them, values within
// tolerance; a value mismatch in check that reproduces the previous call's result is a replay (session/replay.h).
void WorkerSession::check_output(Checks& checks, size_t i, const InputSet& set, const Guards& guards, bool check_mode) {
  const TensorSpec& spec = m_task.signature.outputs[i];
  const SharedBuffer& buf = *m_outputs.buffers[i];
  const auto& dims = set.output_shapes[i].dims;
  const auto damaged = buf.damaged_canary(guards.canary_seed[i]);
  checks.check(!damaged, "no_write_outside:" + spec.name, FailureReason::out_of_bounds_write,
               damaged ? overwrite_detail(buf, *damaged, spec.name) : "");
  const Tolerance& tol = m_task.output_tolerance.at(i);
  const OutputComparison cmp = compare_output(buf.data(), spec.dtype, set.expected[i], tol, guards.poison[i],
                                              check_mode ? ErrorStats::compute : ErrorStats::skip);
  if (checks.res.outputs.size() <= i) checks.res.outputs.resize(i + 1);
  checks.res.outputs[i].merge({cmp.max_abs_error, cmp.max_rel_error, cmp.max_tolerance_used});
  checks.res.max_rel_error = std::max(checks.res.max_rel_error, cmp.max_rel_error);
  checks.res.max_tolerance_used = std::max(checks.res.max_tolerance_used, cmp.max_tolerance_used);
  // An integer output's poison is a value of its dtype (make_poison): an element holding it was never written, or
  // was written with that very value, wrong there; the message says both.
  std::string unwritten =
      fmt::format("{} of {} elements of '{}' were never written", cmp.poison_left, cmp.elements, spec.name);
  if (cmp.poison_left > 0 && dtype_info(spec.dtype).kind == DTypeKind::integer) {
    unsigned char bytes[8];
    std::memcpy(bytes, &guards.poison[i], sizeof bytes);
    unwritten = fmt::format(
        "{} of {} elements of '{}' still hold this call's poison, {:.0f}, where the oracle expects "
        "another value: never written (or written with exactly that wrong value)",
        cmp.poison_left, cmp.elements, spec.name, load_element(spec.dtype, bytes, 0));
  }
  checks.check(cmp.poison_left == 0, "all_written:" + spec.name, FailureReason::output_not_written, unwritten,
               cmp.poison_left);
  checks.check(cmp.nonfinite_mismatches == 0, "nonfinite_agree:" + spec.name, FailureReason::nan_mismatch,
               cmp.first_nonfinite_mismatch
                   ? fmt::format("{} elements of '{}' disagree with the oracle on NaN/Inf; {}",
                                 cmp.nonfinite_mismatches, spec.name, describe(*cmp.first_nonfinite_mismatch, dims))
                   : "",
               cmp.nonfinite_mismatches);
  FailureReason reason = FailureReason::numeric_mismatch;
  std::string detail;
  if (cmp.value_mismatches > 0) {
    detail = fmt::format("{} of {} elements of '{}' {}; {}", cmp.value_mismatches, cmp.elements, spec.name,
                         tol.mode == ToleranceMode::exact || is_exact_dtype(spec.dtype)
                             ? "differ from the oracle's (compared exactly)"
                             : "outside " + describe_tolerance(tol),
                         describe(*cmp.first_value_mismatch, dims));
    const std::optional<Replay> replay =
        check_mode && i < m_previous_expected.size()
            ? detect_replay(m_previous_expected[i], set.expected[i], buf.data(), spec.dtype, tol)
            : std::nullopt;
    if (replay) {
      reason = FailureReason::stale_output;
      detail = fmt::format(
          "{} of the {} elements of '{}' where this call's result must differ from the previous "
          "call's reproduce the previous call's result (which had other inputs): the "
          "implementation replays old results; {}",
          replay->replayed, replay->differing, spec.name, detail);
    }
  }
  checks.check(cmp.value_mismatches == 0, "within_tolerance:" + spec.name, reason, detail, cmp.value_mismatches);
}

// The parent's cross-checks of the worker's clocks (hardened sessions only): the time is plausible, the CPU outside
// the window is charged, nothing ran outside the timer or after the answer.
void WorkerSession::check_timing(Checks& checks, const RunOutcome& out, const InputSet& set, bool watch_outputs,
                                 int64_t cpu_at_answer) {
  CallResult& res = checks.res;
  const bool host = !device_backend();
  const std::string lie = out.device ? implausible_device_timing(out) : implausible_timing(out, set);
  checks.check(lie.empty(), "timing_plausible", FailureReason::timing_implausible, lie);
  if (out.cpu_windows_exact && out.pre_cpu_ns >= 0 && out.post_cpu_ns >= 0) {
    // Charged, not bounded (util/cpu_watch.h): the worker spins for go for as long as the parent takes to react,
    // and that much is the parent's, not the implementation's.
    res.pre_cpu_ns = std::max<int64_t>(0, out.pre_cpu_ns - out.reaction_ns);
    res.post_cpu_ns = out.post_cpu_ns;
    res.gap_cpu_ns = out.gap_cpu_ns;
    if (host) {
      res.ns = cpu_watch::charged_ns(out.ns, res.pre_cpu_ns, res.post_cpu_ns);
    } else if (out.read_cpu_ns >= 0 && out.pre_wall_ns >= 0 && out.read_wall_ns >= 0) {
      // Device backends upload before go and read the outputs back after done on every call, kwb's own work:
      // recorded, not charged (device_charged_ns); the capture after the read is charged whole, as on cpu.
      res.outside_cpu_ns = res.pre_cpu_ns + out.read_cpu_ns;
      res.outside_wall_ns = out.pre_wall_ns + out.read_wall_ns;
      res.ns = cpu_watch::device_charged_ns(out.ns, res.post_cpu_ns);
    }
  }
  if (host) {
    const std::string outside = outside_timer(out);
    checks.check(outside.empty(), "work_inside_timer", FailureReason::work_outside_timer, outside);
  }
  // A device worker's outputs are captured once read back; its CPU after the answer is the runtime's, not watched.
  const std::string busy = work_after_return(watch_outputs, cpu_at_answer, !res.failures.empty());
  checks.check(busy.empty(), "settled_at_return", FailureReason::work_after_return, busy);
}

std::string WorkerSession::implausible_timing(const RunOutcome& out, const InputSet& set) const {
  const int threads = std::max(1, m_task.threads);
  // The traffic the task declares: every input element unless an input says it reads fewer (TensorSpec::reads: a
  // gather's selected rows), and every output element written.
  uint64_t bytes = 0;
  for (size_t i = 0; i < set.inputs.size() && i < m_task.signature.inputs.size(); ++i) {
    const TensorSpec& spec = m_task.signature.inputs[i];
    bytes += spec.reads ? input_reads(spec, *set.case_) * dtype_size(spec.dtype) : set.inputs[i]->layout().nbytes;
  }
  for (const auto& b : m_outputs.buffers) bytes += b->layout().nbytes;
  const double floor_ns = static_cast<double>(bytes) / (k_max_bytes_per_ns_per_thread * threads);
  if (out.ns <= 0) return fmt::format("the call took {} ns between go and done", out.ns);
  if (static_cast<double>(out.ns) < floor_ns) {
    return fmt::format(
        "the call said done {} ns after go, for a call that reads and writes at least {} bytes (the "
        "task's declared traffic), i.e. "
        "{:.0f} GB/s over {} thread(s): more than the {:.0f} GB/s per thread kwb takes as the physical "
        "ceiling",
        out.ns, bytes, static_cast<double>(bytes) / static_cast<double>(out.ns), threads,
        k_max_bytes_per_ns_per_thread);
  }
  return "";
}

namespace {

int64_t median_of(std::vector<int64_t> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

std::string WorkerSession::outside_timer(const RunOutcome& out) {
  if (!out.cpu_windows_exact) {
    // Only the coarse clock: exact where the worker sleeps, at both ends of the whole cycle. CPU beyond the timed
    // window times the threads allowed, plus the handling of the request, is work the timer did not see.
    const int threads = std::max(1, m_task.threads);
    if (out.cycle_cpu_ns > out.ns * threads + k_cycle_cpu_slack_ns) {
      return fmt::format(
          "the worker used {:.1f} us of CPU from the arrival of the call's inputs to its answer, for a "
          "call timed at {:.1f} us ({} thread(s) allowed, {:.0f} us for handling): work outside the timer",
          static_cast<double>(out.cycle_cpu_ns) / 1e3, static_cast<double>(out.ns) / 1e3, threads,
          static_cast<double>(k_cycle_cpu_slack_ns) / 1e3);
    }
    return "";
  }
  // Before go and after done the worker's CPU is charged to the sample (call()); between calls it is kwb's protocol
  // work, judged by its median over the worker's calls.
  if (out.gap_cpu_ns < 0 || ++m_calls_watched <= k_median_skip_calls) return "";
  m_gap_cpu.push_back(out.gap_cpu_ns);
  if (m_gap_cpu.size() < k_median_min_calls) return "";
  const int64_t gap = median_of(m_gap_cpu);
  if (gap > cpu_watch::k_gap_cpu_median_bound_ns) {
    return fmt::format(
        "over this worker's {} calls, the median CPU it used between one call's capture and the next "
        "call's inputs, where it only answers, reads the next request and arms, was {:.1f} us (bound "
        "{:.0f} us): work between the calls",
        m_gap_cpu.size(), static_cast<double>(gap) / 1e3,
        static_cast<double>(cpu_watch::k_gap_cpu_median_bound_ns) / 1e3);
  }
  return "";
}

std::string WorkerSession::implausible_device_timing(const RunOutcome& out) const {
  if (out.ns <= 0) return fmt::format("the call took {} ns between go and done", out.ns);
  // Both device backends always time the call with device events (profiling markers, CUDA events): a call without
  // that time is one whose synchronization or events were tampered with.
  if (out.device_ns < 0) {
    return "the device gave no time of its own for the call (its start and end events were not recorded or could "
           "not be read)";
  }
  // Device and host clocks tick separately; 1% + 20 us covers their disagreement over one call.
  if (out.device_ns > 0 && static_cast<double>(out.device_ns) > static_cast<double>(out.ns) * 1.01 + 20'000.0) {
    return fmt::format(
        "the device's events span {} ns, but the host clock around the same call says {} ns: the "
        "host time is too short",
        out.device_ns, out.ns);
  }
  return "";
}

std::string WorkerSession::work_after_return(bool at_done, int64_t cpu_at_answer, bool output_failed) {
  auto changed_output = [&]() -> std::string {
    for (size_t i = 0; at_done && i < m_at_done.size() && i < m_outputs.buffers.size(); ++i) {
      const auto now = std::as_const(*m_outputs.buffers[i]).data();
      if (now.size() != m_at_done[i].size() || std::memcmp(now.data(), m_at_done[i].data(), now.size()) != 0) {
        return fmt::format(
            "output '{}' changed after the call said done (between the capture of the outputs and the "
            "end of validation): work was still running after the call",
            m_task.signature.outputs[i].name);
      }
    }
    return "";
  };
  std::string why = changed_output();
  // A thread finishing the output late is why an output can be incomplete at done; where the task allows threads,
  // give it a moment to show itself, so the report names the cause rather than only the symptom.
  if (why.empty() && output_failed && m_task.threads > 1 && at_done) {
    for (int i = 0; i < 25 && why.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      why = changed_output();
    }
  }
  if (!why.empty() || cpu_at_answer < 0 || !alive()) return why;
  // From its answer on, the worker waits for the next request, blocked in recvmsg: an idle process uses no CPU.
  const int64_t cpu_now = m_worker->cpu_time_ns();
  if (cpu_now < 0) return "";
  const int64_t idle = cpu_now - cpu_at_answer;
  m_idle_cpu.push_back(idle);
  const bool judged = m_idle_cpu.size() >= k_median_skip_calls + k_median_min_calls;
  const int64_t median = judged ? median_of({m_idle_cpu.begin() + k_median_skip_calls, m_idle_cpu.end()}) : 0;
  if (idle > k_idle_cpu_bound_ns || median > k_idle_cpu_median_bound_ns) {
    return fmt::format(
        "the worker used {:.1f} us of CPU after answering (median {:.1f} us over its calls), while it had "
        "nothing to do but wait for the next request (bounds {:.0f} us per call, {:.0f} us median; {} "
        "thread(s) alive)",
        static_cast<double>(idle) / 1e3, static_cast<double>(median) / 1e3,
        static_cast<double>(k_idle_cpu_bound_ns) / 1e3, static_cast<double>(k_idle_cpu_median_bound_ns) / 1e3,
        m_worker->thread_count());
  }
  return "";
}

CallResult WorkerSession::verify_slots(int call_index) {
  if (m_slots.content == nullptr) {
    CallResult none;
    none.completed = true;
    return none;
  }
  return verify_inputs(*m_slots.content, call_index);
}

CallResult WorkerSession::verify_inputs(const InputSet& set, int call_index) {
  CallResult res;
  res.completed = true;
  const bool in_slots = m_slots.content == &set && m_slots.buffers.size() == set.inputs.size();
  for (size_t i = 0; i < set.inputs.size(); ++i) {
    const std::string& name = m_task.signature.inputs[i].name;
    const auto bytes = in_slots ? std::as_const(*m_slots.buffers[i]).data() : set.inputs[i]->data();
    if (fingerprint(bytes) == set.input_fingerprints[i]) {
      ++res.passed;
    } else {
      res.failures.push_back({set.case_->name, call_index, "input_unchanged:" + name, FailureReason::input_modified,
                              fmt::format("input '{}' changed during the call", name)});
    }
  }
  return res;
}

}  // namespace kwb
