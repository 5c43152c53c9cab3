#include "oracle/oracle.h"

#include "task/data.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/parallel.h"
#include "util/paths.h"
#include "util/sha256.h"
#include "worker/shared_buffer.h"
#include "worker/worker_process.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include <unistd.h>

namespace kwb {

namespace fs = std::filesystem;

namespace {

// Compiled into the oracle's object before its source (builder.h, build_oracle): the worker calls kwb_run, which
// hands the call to the author's kwb_oracle as include/kwb/oracle.h describes. Valid C and C++ (a C++ driver compiles
// it as C++). A failure's message goes to stderr, which the parent reads back from the worker's output.
constexpr const char* k_adapter_source =
    R"ADAPTER(/* kwb oracle adapter: kwb_run -> kwb_oracle (include/kwb/oracle.h) */
#include "kwb/kernel.h"
#include "kwb/oracle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

KWB_CANDIDATE_ABI

static int kwb_adapter_fill(const DLTensor* from, const char* const* names, int32_t n, kwb_oracle_tensor* to) {
  for (int32_t i = 0; i < n; ++i) {
    int64_t elements = 1;
    for (int32_t d = 0; d < from[i].ndim; ++d) elements *= from[i].shape[d];
    if (from[i].dtype.code != kDLFloat || from[i].dtype.bits != 64) return -1;
    to[i].name = names[i];
    to[i].ndim = from[i].ndim;
    to[i].shape = from[i].shape;
    to[i].elements = elements;
    to[i].data = (double*)from[i].data;
  }
  return 0;
}

int kwb_run(const kwb_call* call) {
  static char message[4096];
  const int32_t tensors = call->num_inputs + call->num_outputs;
  kwb_oracle_tensor* all = (kwb_oracle_tensor*)calloc((size_t)tensors + 1, sizeof(kwb_oracle_tensor));
  const char** names = (const char**)calloc((size_t)call->num_scalars + 1, sizeof(const char*));
  double* values = (double*)calloc((size_t)call->num_scalars + 1, sizeof(double));
  kwb_oracle_args args;
  int rc;
  if (all == NULL || names == NULL || values == NULL) {
    fputs("kwb-oracle-error: the adapter could not allocate its argument arrays\n", stderr);
    return -1;
  }
  if (kwb_adapter_fill(call->inputs, call->input_names, call->num_inputs, all) != 0 ||
      kwb_adapter_fill(call->outputs, call->output_names, call->num_outputs, all + call->num_inputs) != 0) {
    fputs("kwb-oracle-error: kwb passed a tensor that is not f64\n", stderr);
    return -1;
  }
  for (int32_t i = 0; i < call->num_scalars; ++i) {
    names[i] = call->scalars[i].name;
    values[i] = call->scalars[i].value;
  }
  memset(&args, 0, sizeof args);
  memset(message, 0, sizeof message);
  args.version = KWB_ORACLE_VERSION;
  args.num_inputs = call->num_inputs;
  args.inputs = all;
  args.num_outputs = call->num_outputs;
  args.outputs = all + call->num_inputs;
  args.num_scalars = call->num_scalars;
  args.scalar_names = names;
  args.scalars = values;
  args.error = message;
  args.error_capacity = sizeof message;
  rc = kwb_oracle(&args);
  if (rc != 0) {
    message[sizeof message - 1] = '\0';
    fprintf(stderr, "kwb-oracle-error: kwb_oracle returned %d: %s\n", rc,
            message[0] != '\0' ? message : "(no message in args->error)");
    fflush(stderr);
  }
  free(all);
  free(names);
  free(values);
  return rc;
}
)ADAPTER";

constexpr const char* k_error_tag = "kwb-oracle-error: ";

std::string relative_name(const Task& task) { return task.oracle.lexically_relative(task.dir).string(); }

// The task's largest case, in elements of every input and output.
uint64_t largest_case_elements(const Task& task) {
  uint64_t largest = 0;
  for (const Case& c : task.cases) {
    uint64_t n = 0;
    for (const auto* list : {&task.signature.inputs, &task.signature.outputs}) {
      for (const TensorSpec& s : *list) n += resolve_shape(s, c).elements();
    }
    largest = std::max(largest, n);
  }
  return largest;
}

// One oracle's worker: started at the first call that misses the cache, kept for the next ones, ended after any
// failure (which stops the verb anyway).
class OracleRunner {
public:
  explicit OracleRunner(const Task& task) : m_task(task), m_artifact(build(task)) {}
  // Another worker of the same built oracle (oracle_outputs of many calls runs several at once).
  OracleRunner(const Task& task, const Artifact& artifact) : m_task(task), m_artifact(artifact) {}

  const Artifact& artifact() const { return m_artifact; }

  // Starts the worker now (on the calling thread) if it is not running.
  void ensure_started() {
    if (!m_worker) start();
  }

  std::vector<std::vector<double>> run(const OracleCall& call) {
    if (!m_worker) start();
    std::vector<std::shared_ptr<SharedBuffer>> buffers;
    std::vector<int> ids;
    std::vector<bool> kept;  // by buffer: a converted input that stays mapped in the worker for the next call
    RunRequest request;
    m_converted.resize(call.inputs.size());
    for (size_t i = 0; i < call.inputs.size(); ++i) {
      const TensorSpec& spec = m_task.signature.inputs[i];
      const size_t n = call.input_shapes[i].elements();
      const std::shared_ptr<const void> owner = i < call.input_owners.size() ? call.input_owners[i] : nullptr;
      Converted& cached = m_converted[i];
      const std::shared_ptr<const void> cached_owner = cached.owner.lock();
      if (owner == nullptr || cached_owner != owner || cached.doubles->layout().nbytes != n * sizeof(double)) {
        auto buf = std::make_shared<SharedBuffer>(fmt::format("kwb-oracle-in-{}", spec.name), n * sizeof(double));
        // The mapping is page-aligned memory with no declared type: doubles may be written into it directly.
        load_elements(spec.dtype, call.inputs[i].data(), n, reinterpret_cast<double*>(buf->data().data()));
        buf->seal();
        if (cached.id >= 0 && !m_worker->unmap({cached.id})) fail(*call.case_, describe(m_worker->death()));
        const int id = next_id();
        // Kept, and left mapped in the worker, for the next call only while its owner lives; a call without one
        // lets the last copy go.
        cached = owner != nullptr ? Converted{owner, buf, id} : Converted{};
        request.inputs.push_back({spec.name, id, DType::f64, call.input_shapes[i].dims});
        buffers.push_back(std::move(buf));
        kept.push_back(owner != nullptr);
      } else {
        request.inputs.push_back({spec.name, cached.id, DType::f64, call.input_shapes[i].dims});
        buffers.push_back(nullptr);  // mapped already
        kept.push_back(true);
      }
    }
    for (size_t i = 0; i < call.output_shapes.size(); ++i) {
      const TensorSpec& spec = m_task.signature.outputs[i];
      auto buf = std::make_shared<SharedBuffer>(fmt::format("kwb-oracle-out-{}", spec.name),
                                                call.output_shapes[i].elements() * sizeof(double));
      buf->fill_pattern(std::bit_cast<uint64_t>(std::numeric_limits<double>::quiet_NaN()), sizeof(double));
      request.outputs.push_back({spec.name, next_id(), DType::f64, call.output_shapes[i].dims});
      buffers.push_back(std::move(buf));
      kept.push_back(false);
    }
    std::vector<int> all_ids;
    for (const auto* list : {&request.inputs, &request.outputs}) {
      for (const TensorArg& t : *list) all_ids.push_back(t.buffer);
    }
    for (size_t b = 0; b < buffers.size(); ++b) {
      if (buffers[b] != nullptr && !m_worker->map(all_ids[b], *buffers[b])) {
        fail(*call.case_, describe(m_worker->death()));
      }
      if (!kept[b]) ids.push_back(all_ids[b]);  // unmapped after the call
    }
    const std::vector<std::string> names = scalar_names();
    for (size_t s = 0; s < call.scalars.size(); ++s) request.scalars.emplace_back(names.at(s), call.scalars[s]);
    const RunOutcome out = m_worker->run(request);
    if (!out.answered) fail(*call.case_, describe(out.death));
    if (out.rc != 0) fail(*call.case_, error_message(out.rc));
    if (!m_worker->unmap(ids)) fail(*call.case_, describe(m_worker->death()));
    std::vector<std::vector<double>> outputs;
    for (size_t i = 0; i < call.output_shapes.size(); ++i) {
      const auto bytes = std::as_const(*buffers[call.inputs.size() + i]).data();
      std::vector<double> values(bytes.size() / sizeof(double));
      std::memcpy(values.data(), bytes.data(), values.size() * sizeof(double));
      outputs.push_back(std::move(values));
    }
    return outputs;
  }

private:
  static Artifact build(const Task& task) {
    Artifact art = build_oracle(task.oracle, k_adapter_source);
    if (!art.ok) {
      throw OracleError(
          fmt::format("{}: the task's oracle (field 'oracle' of {}) does not build; fix it so that it "
                      "compiles against include/kwb/oracle.h:\n{}",
                      task.oracle.string(), task.manifest.string(), art.log));
    }
    return art;
  }

  void start() {
    const uint64_t elements = largest_case_elements(m_task);
    m_converted.clear();
    m_worker = std::make_unique<WorkerProcess>(worker_executable(), oracle_timeout(elements));
    WorkerLimits limits;
    // The worker, the f64 copies of the largest case's tensors several times over (the oracle's own temporaries,
    // in long double, say), and nothing more: an oracle that allocates without bound fails with resource_limit.
    limits.address_space_bytes = (uint64_t{2} << 30) + 6 * elements * sizeof(double);
    limits.cpu_seconds = 3600;
    DeviceOptions options;
    options.untimed = true;  // kwb sleeps while the oracle computes
    const LoadOutcome load = m_worker->load(m_artifact.path, BackendKind::cpu, 1, m_task.name, limits, options);
    if (!load.ok) {
      m_worker.reset();
      throw OracleError(fmt::format("{}: the task's oracle could not be loaded ({}: {})", m_task.oracle.string(),
                                    load.reason, load.detail));
    }
  }

  int next_id() { return m_next_id++; }

  std::vector<std::string> scalar_names() const {
    std::vector<std::string> names;
    for (const ScalarSpec& s : m_task.signature.scalars) names.push_back(s.name);
    return names;
  }

  std::string describe(const std::optional<WorkerDeath>& death) const {
    if (!death) return "its worker stopped answering";
    std::string what = fmt::format("{}: {}", death->reason, death->detail);
    if (const std::string tail = m_worker->output_tail(1000); !tail.empty()) {
      what += fmt::format("; its last output:\n{}", tail);
    }
    return what;
  }

  // The adapter's line on stderr, or the tail of the output when the oracle wrote none.
  std::string error_message(int rc) const {
    const std::string tail = m_worker->output_tail(8000);
    const size_t at = tail.rfind(k_error_tag);
    if (at != std::string::npos) {
      const size_t begin = at + std::strlen(k_error_tag);
      return tail.substr(begin, tail.find('\n', begin) - begin);
    }
    return fmt::format("kwb_oracle returned {}{}", rc, tail.empty() ? "" : "; its last output:\n" + tail);
  }

  [[noreturn]] void fail(const Case& c, const std::string& what) {
    m_worker.reset();
    m_converted.clear();  // their ids were the dead worker's
    throw OracleError(fmt::format("{}: the task's oracle failed on case '{}' ({}): {}", m_task.oracle.string(), c.name,
                                  m_task.manifest.string(), what));
  }

  const Task m_task;  // a copy: the runner outlives the verb's Task
  Artifact m_artifact;
  std::unique_ptr<WorkerProcess> m_worker;
  // Per input: the doubles of the last call's input when it came with an owner (OracleCall::input_owners).
  struct Converted {
    std::weak_ptr<const void> owner;
    std::shared_ptr<SharedBuffer> doubles;
    int id = -1;  // its buffer id in the worker, mapped there until replaced
  };
  std::vector<Converted> m_converted;
  int m_next_id = 1;
};

// The runners of one oracle source and task manifest, for the life of the process: the first builds the oracle,
// the others (made by runners_for) share its artifact, each with a worker of its own.
std::vector<std::unique_ptr<OracleRunner>>& runner_pool(const Task& task) {
  static std::map<std::string, std::vector<std::unique_ptr<OracleRunner>>> pools;
  std::vector<std::unique_ptr<OracleRunner>>& pool = pools[task.oracle.string() + '\n' + task.manifest_sha256];
  if (pool.empty()) pool.push_back(std::make_unique<OracleRunner>(task));
  return pool;
}

OracleRunner& runner_for(const Task& task) { return *runner_pool(task).front(); }

std::vector<OracleRunner*> runners_for(const Task& task, size_t count) {
  std::vector<std::unique_ptr<OracleRunner>>& pool = runner_pool(task);
  while (pool.size() < count) pool.push_back(std::make_unique<OracleRunner>(task, pool.front()->artifact()));
  std::vector<OracleRunner*> out;
  for (size_t i = 0; i < count; ++i) out.push_back(pool[i].get());
  return out;
}

fs::path cache_file(const std::string& key) { return cache_dir() / "oracle" / (key + ".f64"); }

// A cached entry: the SHA-256 of the payload (64 hex digits), then the payload, every output's doubles in order.
// nullopt when absent, of the wrong size or damaged: the oracle then runs again and the entry is rewritten.
std::optional<std::vector<std::vector<double>>> read_cached(const fs::path& file, const OracleCall& call) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::nullopt;
  const std::string text = read_file(file);
  size_t total = 0;
  for (const TensorShape& s : call.output_shapes) total += s.elements();
  if (text.size() != 64 + total * sizeof(double)) return std::nullopt;
  const std::string_view payload = std::string_view(text).substr(64);
  if (sha256_hex(payload) != text.substr(0, 64)) return std::nullopt;
  std::vector<std::vector<double>> outputs;
  size_t at = 0;
  for (const TensorShape& s : call.output_shapes) {
    std::vector<double> values(s.elements());
    std::memcpy(values.data(), payload.data() + at, values.size() * sizeof(double));
    at += values.size() * sizeof(double);
    outputs.push_back(std::move(values));
  }
  return outputs;
}

// Entries larger than this are never written: a DRAM-sized case (rmsnorm's 8192 x 4096 is 256 MiB of doubles per
// input set) would fill a disk within a few runs, and such a case's oracle costs well under a second to run again.
constexpr uintmax_t k_max_cached_entry_bytes = uintmax_t{4} << 20;
// The whole oracle cache is kept under this; past it, the least recently written entries go first.
constexpr uintmax_t k_max_cache_bytes = uintmax_t{256} << 20;

// Removes the oldest entries of the oracle cache folder until it holds at most three quarters of
// k_max_cache_bytes, once it holds more than k_max_cache_bytes.
void prune_cache(const fs::path& folder) {
  std::error_code ec;
  struct Entry {
    fs::file_time_type written;
    uintmax_t size;
    fs::path path;
  };
  std::vector<Entry> entries;
  uintmax_t total = 0;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const uintmax_t size = e.file_size(ec);
    entries.push_back({e.last_write_time(ec), size, e.path()});
    total += size;
  }
  if (total <= k_max_cache_bytes) return;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.written < b.written; });
  for (const Entry& e : entries) {
    if (total <= k_max_cache_bytes / 4 * 3) break;
    if (fs::remove(e.path, ec)) total -= e.size;
  }
}

void write_cached(const fs::path& file, const std::vector<std::vector<double>>& outputs) {
  uintmax_t bytes = 0;
  for (const std::vector<double>& o : outputs) bytes += o.size() * sizeof(double);
  if (bytes > k_max_cached_entry_bytes) return;
  std::string payload;
  for (const std::vector<double>& o : outputs) {
    payload.append(reinterpret_cast<const char*>(o.data()), o.size() * sizeof(double));
  }
  fs::create_directories(file.parent_path());
  write_file_atomic(file, sha256_hex(payload) + payload);
  // The folder is measured (a stat of every entry) at this process's first write into it, and again once it has
  // written an eighth of the bound since: measuring at every write cost ~5,000 system calls a call with a full
  // folder. Several processes writing at once overshoot the bound by at most an eighth each before one prunes.
  static std::mutex mutex;
  static std::map<fs::path, uintmax_t> written_since_measured;
  const std::lock_guard lock(mutex);
  auto [it, first] = written_since_measured.try_emplace(file.parent_path(), 0);
  it->second += 64 + bytes;
  if (first || it->second > k_max_cache_bytes / 8) {
    prune_cache(file.parent_path());
    it->second = 0;
  }
}

}  // namespace

std::chrono::milliseconds oracle_timeout(uint64_t elements) {
  return std::chrono::milliseconds(10'000 + elements / 1000);
}

const Artifact& oracle_artifact(const Task& task) { return runner_for(task).artifact(); }

nlohmann::json oracle_record(const Task& task) {
  const Artifact& art = oracle_artifact(task);
  return {{"source", relative_name(task)},
          {"source_sha256", art.identity.source_sha256},
          {"identity", to_json(art.identity)}};
}

std::string oracle_cache_key(const Artifact& oracle, const Task& task, const OracleCall& call) {
  Sha256 h;
  auto part = [&](std::string_view text) {
    h.update(text);
    h.update(std::string_view("\0", 1));
  };
  part("kwb.oracle-outputs.1");
  part(oracle.identity.key);
  part(oracle.identity.artifact_sha256);
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    part(to_string(task.signature.inputs[i].dtype));
    part(fmt::format("{}", fmt::join(call.input_shapes[i].dims, "x")));
    part(sha256_hex(call.inputs[i]));
  }
  for (double s : call.scalars) part(fmt::format("{:016x}", std::bit_cast<uint64_t>(s)));
  for (const TensorShape& s : call.output_shapes) part(fmt::format("{}", fmt::join(s.dims, "x")));
  return h.hex_digest();
}

namespace {

// An integer or boolean output of the oracle must hold values of its dtype: integers within its range (bool: 0 or
// 1). Anything else (a fraction, a NaN, an out-of-range count) is the oracle's bug, and no candidate could match it.
void require_dtype_values(const Task& task, const OracleCall& call, const std::vector<std::vector<double>>& outputs) {
  for (size_t o = 0; o < outputs.size() && o < task.signature.outputs.size(); ++o) {
    const TensorSpec& spec = task.signature.outputs[o];
    const DTypeInfo& t = dtype_info(spec.dtype);
    if (t.kind == DTypeKind::floating) continue;
    for (size_t i = 0; i < outputs[o].size(); ++i) {
      const double v = outputs[o][i];
      if (std::nearbyint(v) == v && v >= t.lowest && v <= t.highest) continue;
      throw OracleError(fmt::format(
          "{}: the oracle wrote {} at element {} of output '{}' (case '{}'), which is {} "
          "({} from {} to {}); an integer or boolean output takes values of its dtype",
          task.oracle.string(), v, i, spec.name, call.case_ != nullptr ? call.case_->name : "?",
          std::isnan(v) ? "NaN, not a value of " + std::string(t.name) : "not a value of " + std::string(t.name),
          t.kind == DTypeKind::boolean ? "0 or 1: integers" : "integers", t.lowest, t.highest));
    }
  }
}

}  // namespace

namespace {

// How many oracle workers make a batch of calls at once: one per CPU kwb may use, at most eight, and no more than a
// quarter of the machine's memory holds (each worker keeps a call's tensors as doubles, twice over for its own
// temporaries).
constexpr size_t k_max_oracle_workers = 8;

size_t oracle_workers_for(const OracleCall& call, size_t calls) {
  uint64_t doubles = 0;  // what one worker holds of a call: every input and output as doubles
  for (const TensorShape& s : call.input_shapes) doubles += s.elements();
  for (const TensorShape& s : call.output_shapes) doubles += s.elements();
  const uint64_t per_worker = std::max<uint64_t>(doubles * sizeof(double) * 2, uint64_t{1} << 20);
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const uint64_t memory = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
  const size_t by_memory = std::max<size_t>(1, static_cast<size_t>(memory / 4 / per_worker));
  return std::min({calls, static_cast<size_t>(cpus_kwb_may_use()), k_max_oracle_workers, by_memory});
}

}  // namespace

std::vector<std::vector<std::vector<double>>> oracle_outputs(const Task& task, std::span<const OracleCall> calls) {
  std::vector<std::vector<std::vector<double>>> results(calls.size());
  std::vector<size_t> missing;  // the calls the cache does not answer, in order
  std::vector<fs::path> files(calls.size());
  OracleRunner& first = runner_for(task);
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].cacheable) {
      files[i] = cache_file(oracle_cache_key(first.artifact(), task, calls[i]));
      if (auto cached = read_cached(files[i], calls[i])) {
        results[i] = std::move(*cached);
        continue;
      }
    }
    missing.push_back(i);
  }
  const size_t workers = missing.empty() ? 0 : oracle_workers_for(calls[missing.front()], missing.size());
  if (workers <= 1) {
    for (size_t i : missing) results[i] = first.run(calls[i]);
  } else {
    // Workers are started here, on this thread; each thread then only talks to its own worker over its own channel.
    // A failure stops every thread from taking another call, and the failure of the earliest call is the one
    // reported, as a sequential run would have reported it.
    const std::vector<OracleRunner*> runners = runners_for(task, workers);
    for (OracleRunner* r : runners) r->ensure_started();
    for_each_index(missing.size(), runners.size(),
                   [&](size_t t, size_t k) { results[missing[k]] = runners[t]->run(calls[missing[k]]); });
  }
  for (size_t i : missing) {
    require_dtype_values(task, calls[i], results[i]);
    if (calls[i].cacheable) write_cached(files[i], results[i]);
  }
  return results;
}

std::vector<std::vector<double>> oracle_outputs(const Task& task, const OracleCall& call) {
  return std::move(oracle_outputs(task, std::span<const OracleCall>(&call, 1)).front());
}

}  // namespace kwb
