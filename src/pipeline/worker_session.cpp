#include "pipeline/worker_session.h"

#include "oracle/tolerance.h"
#include "util/error.h"
#include "util/paths.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace kwb {

WorkerSession::WorkerSession(const Task& task, const Artifact& artifact, const SessionOptions& options)
    : m_task(task), m_artifact(artifact), m_options(options), m_rng(mix_seed(options.poison_seed, 0x5E55)) {}

WorkerSession::~WorkerSession() = default;

LoadOutcome WorkerSession::start() {
  m_worker = std::make_unique<WorkerProcess>(
      m_options.worker_executable.empty() ? worker_executable() : m_options.worker_executable, m_options.timeout,
      m_options.wrapper);
  m_input_ids.clear();
  m_outputs = {};
  m_outputs_case.clear();
  m_previous_expected.clear();
  return m_worker->load(m_artifact.path, m_options.backend, m_task.threads, m_task.name);
}

void WorkerSession::shutdown() {
  if (m_worker) m_worker->shutdown();
}

bool WorkerSession::attach(const InputSet& set) {
  if (m_input_ids.contains(&set)) return true;
  std::vector<int> ids;
  for (const SharedBuffer& b : set.inputs) {
    int id = next_id();
    if (!m_worker->map(id, b)) return false;
    ids.push_back(id);
  }
  m_input_ids[&set] = std::move(ids);
  return true;
}

void WorkerSession::detach(const InputSet& set) {
  auto it = m_input_ids.find(&set);
  if (it == m_input_ids.end()) return;
  if (alive()) m_worker->unmap(it->second);
  m_input_ids.erase(it);
}

bool WorkerSession::ensure_outputs(const InputSet& set) {
  if (m_outputs_case == set.case_->name && !m_outputs.buffers.empty()) return true;
  if (!m_outputs.ids.empty() && alive()) m_worker->unmap(m_outputs.ids);
  m_outputs = {};
  for (size_t i = 0; i < m_task.signature.outputs.size(); ++i) {
    const TensorSpec& spec = m_task.signature.outputs[i];
    auto buf = std::make_unique<SharedBuffer>(fmt::format("kwb-out-{}", spec.name),
                                              set.output_shapes[i].elements() * dtype_size(spec.dtype));
    int id = next_id();
    if (!m_worker->map(id, *buf)) return false;
    m_outputs.ids.push_back(id);
    m_outputs.buffers.push_back(std::move(buf));
  }
  m_outputs_case = set.case_->name;
  return true;
}

namespace {

// A quiet NaN with a random payload: an unwritten element is unmistakable, differs on every call (so nothing
// can learn it), and cannot pass a tolerance test by accident.
uint64_t make_poison(Rng& rng, DType dtype) {
  for (;;) {
    uint64_t r = rng.next();
    uint64_t p = dtype == DType::f32 ? (0x7FC00000ull | (r & 0x003FFFFFull)) : (0x7FF8000000000000ull | (r >> 13));
    bool canonical = dtype == DType::f32 ? p == 0x7FC00000ull : p == 0x7FF8000000000000ull;
    if (!canonical) return p;
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

CallResult WorkerSession::call(const InputSet& set, int call_index, CallMode mode) {
  const bool check_mode = mode == CallMode::check;
  CallResult res;
  const std::string& case_name = set.case_->name;
  auto fail = [&](std::string assertion, std::string reason, std::string detail) {
    res.failures.push_back({case_name, call_index, std::move(assertion), std::move(reason), std::move(detail)});
  };
  auto died = [&]() {
    const WorkerDeath& d = *m_worker->death();
    fail("completed", d.reason, d.detail);
    return res;
  };
  if (!alive()) throw InternalError("WorkerSession::call on a dead worker");
  if (!attach(set) || !ensure_outputs(set)) return died();

  const size_t n_out = m_task.signature.outputs.size();
  std::vector<uint64_t> poison(n_out), canary_seed(n_out);
  for (size_t i = 0; i < n_out; ++i) {
    const DType dt = m_task.signature.outputs[i].dtype;
    poison[i] = make_poison(m_rng, dt);
    canary_seed[i] = m_rng.next();
    m_outputs.buffers[i]->fill_pattern(poison[i], dtype_size(dt));
    m_outputs.buffers[i]->write_canaries(canary_seed[i]);
  }

  RunRequest req;
  const std::vector<int>& in_ids = m_input_ids.at(&set);
  for (size_t i = 0; i < set.inputs.size(); ++i) {
    const TensorSpec& s = m_task.signature.inputs[i];
    req.inputs.push_back({s.name, in_ids[i], to_string(s.dtype), set.input_shapes[i].dims});
  }
  for (size_t i = 0; i < n_out; ++i) {
    const TensorSpec& s = m_task.signature.outputs[i];
    req.outputs.push_back({s.name, m_outputs.ids[i], to_string(s.dtype), set.output_shapes[i].dims});
  }
  const std::vector<double> scalars = resolve_scalars(m_task.signature, *set.case_);
  for (size_t i = 0; i < scalars.size(); ++i) req.scalars.emplace_back(m_task.signature.scalars[i].name, scalars[i]);

  RunOutcome out = m_worker->run(req);
  if (!out.answered) return died();
  res.completed = true;
  res.ns = out.ns;
  res.profile = out.profile;
  ++res.passed;  // completed

  auto check = [&](bool ok, std::string assertion, std::string reason, std::string detail) {
    if (ok) {
      ++res.passed;
    } else {
      fail(std::move(assertion), std::move(reason), std::move(detail));
    }
  };
  check(out.rc == 0, "returned_zero", "run_failed", fmt::format("kwb_run returned {}", out.rc));
  check(out.descriptors_intact, "descriptors_intact", "shape_mismatch",
        "the implementation changed a tensor descriptor (data pointer, shape, dtype or strides)");
  if (check_mode) {
    CallResult inputs = verify_inputs(set, call_index);
    res.passed += inputs.passed;
    res.failures.insert(res.failures.end(), inputs.failures.begin(), inputs.failures.end());
  }
  for (size_t i = 0; i < n_out; ++i) {
    const TensorSpec& spec = m_task.signature.outputs[i];
    const SharedBuffer& buf = *m_outputs.buffers[i];
    auto damaged = buf.damaged_canary(canary_seed[i]);
    check(!damaged, "no_write_outside:" + spec.name, "out_of_bounds_write",
          damaged ? fmt::format("bytes {} {} the data of output '{}' were overwritten",
                                *damaged < buf.layout().data_offset ? buf.layout().data_offset - *damaged
                                                                    : *damaged - buf.layout().data_offset -
                                                                          buf.layout().nbytes + 1,
                                *damaged < buf.layout().data_offset ? "before" : "after", spec.name)
                  : "");
    OutputComparison cmp = compare_output(buf.data(), spec.dtype, set.expected[i], m_task.tolerance, poison[i]);
    res.max_rel_error = std::max(res.max_rel_error, cmp.max_rel_error);
    check(cmp.poison_left == 0, "all_written:" + spec.name, "output_not_written",
          fmt::format("{} of {} elements of '{}' were never written", cmp.poison_left, cmp.elements, spec.name));
    check(cmp.nonfinite_mismatches == 0, "nonfinite_agree:" + spec.name, "nan_mismatch",
          cmp.first_nonfinite_mismatch
              ? fmt::format("{} elements of '{}' disagree with the oracle on NaN/Inf; {}", cmp.nonfinite_mismatches,
                            spec.name, describe(*cmp.first_nonfinite_mismatch, set.output_shapes[i].dims))
              : "");
    std::string reason = "numeric_mismatch";
    std::string detail;
    if (cmp.value_mismatches > 0) {
      detail = fmt::format("{} of {} elements of '{}' outside atol {:g} + rtol {:g} * |expected|; {}",
                           cmp.value_mismatches, cmp.elements, spec.name, m_task.tolerance.atol,
                           m_task.tolerance.rtol, describe(*cmp.first_value_mismatch, set.output_shapes[i].dims));
      // Replay: most of the output is what the previous call's inputs should have produced (within tolerance),
      // not what this call's should. A constant previous result (all zeros, say) cannot tell replay from a wrong
      // constant, so it is reported as the wrong value it is.
      if (check_mode && i < m_previous_expected.size()) {
        const auto& prev_expected = m_previous_expected[i];
        const auto now = buf.data();
        const size_t width = dtype_size(spec.dtype);
        const size_t overlap = std::min(prev_expected.size(), now.size() / width);
        size_t replayed = 0;
        bool varied = false;
        for (size_t k = 0; k < overlap; ++k) {
          double got;
          if (spec.dtype == DType::f32) {
            float f;
            std::memcpy(&f, &now[k * width], 4);
            got = f;
          } else {
            std::memcpy(&got, &now[k * width], 8);
          }
          replayed += within_tolerance(got, prev_expected[k], m_task.tolerance);
          varied = varied || prev_expected[k] != prev_expected[0];
        }
        if (varied && replayed * 2 > overlap) {
          reason = "stale_output";
          detail = fmt::format("{} of {} elements of '{}' reproduce the previous call's result (which had other "
                               "inputs): the implementation replays old results; {}",
                               replayed, overlap, spec.name, detail);
        }
      }
    }
    check(cmp.value_mismatches == 0, "within_tolerance:" + spec.name, reason, detail);
  }
  if (check_mode) m_previous_expected = set.expected;
  return res;
}

CallResult WorkerSession::verify_inputs(const InputSet& set, int call_index) {
  CallResult res;
  res.completed = true;
  for (size_t i = 0; i < set.inputs.size(); ++i) {
    const std::string& name = m_task.signature.inputs[i].name;
    if (fingerprint(set.inputs[i].data()) == set.input_fingerprints[i]) {
      ++res.passed;
    } else {
      res.failures.push_back({set.case_->name, call_index, "input_unchanged:" + name, "input_modified",
                              fmt::format("input '{}' changed during the call", name)});
    }
  }
  return res;
}

}  // namespace kwb
