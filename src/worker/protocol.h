// The parent <-> worker protocol, for both ends: the descriptors a worker starts with, the control page that carries
// the timed handshake, and the messages on the socket (docs/worker-protocol.md).
//
// Every timed call is timed by the parent, never by the worker. The worker shares one page with the parent (fd 4,
// a memfd) whose state word moves through the phases below; the parent takes both timestamps and reads the worker's
// CPU clock at the edges of each phase, so nothing that decides a verdict is computed or stored where candidate code
// can write (docs/threat-model.md):
//
//   parent                                             worker
//   send run {call, tensors, scalars}          ->      builds the call, then state = armed(seq); sleeps (futex)
//   sees armed: writes inputs, poison, flushes
//   cpu_a = worker CPU clock; state = wake(seq) ->     wakes; (device: uploads, prepare) state = ready(seq); spins
//   sees ready: cpu_b; t0; state = go(seq)      ->     kwb_run (+ the backend's sync); rc; state = done(seq);
//                                                      sleeps (futex)
//   sees done: t1; cpu_1; fingerprints outputs; cpu_2; state = collect(seq)
//                                               ->     (device: downloads, checks, trace) sends ran {...}
//
// cpu_b - cpu_a and cpu_2 - cpu_1 are CPU the worker used outside the timed window while it had nothing to do but
// wake or sleep: more than a few microseconds is work the timer did not see (`work_outside_timer`).
#pragma once

#include "util/dtype.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kwb::protocol {

// The worker's descriptors: the socket, the control page; everything above is closed at start.
inline constexpr int k_channel_fd = 3;
inline constexpr int k_control_fd = 4;
inline constexpr int k_first_unused_fd = 5;

// Device backends only, between done and collect: read_back (the parent, once it has timed done: read the outputs
// back now) and downloaded (the worker: they are in the host buffers, which the parent captures then).
enum class Phase : uint32_t {
  idle = 0,
  armed = 1,
  wake = 2,
  ready = 3,
  go = 4,
  done = 5,
  collect = 6,
  downloaded = 7,
  read_back = 8
};

// The state word: the call's sequence number (modulo 2^28) and its phase, so that a stale phase of an earlier call
// never matches.
constexpr uint32_t state_word(uint64_t seq, Phase phase) {
  return static_cast<uint32_t>((seq & 0x0FFFFFFFu) << 4) | static_cast<uint32_t>(phase);
}

struct ControlBlock {
  alignas(64) std::atomic<uint32_t> state{0};
  alignas(64) std::atomic<int32_t> rc{0};
};
static_assert(sizeof(ControlBlock) <= 4096);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
inline constexpr size_t k_control_bytes = 4096;

// Shared futexes (the page is a memfd mapped by two processes, so never FUTEX_PRIVATE_FLAG).
inline void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, nullptr, nullptr, 0);
}
inline void futex_wake(std::atomic<uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// ---- messages --------------------------------------------------------------------------------------------------
// Message types, parent -> worker.
inline constexpr const char* k_probe = "probe";
inline constexpr const char* k_load = "load";
inline constexpr const char* k_map = "map";
inline constexpr const char* k_unmap = "unmap";
inline constexpr const char* k_run = "run";
inline constexpr const char* k_exit = "exit";
// worker -> parent.
inline constexpr const char* k_probed = "probed";
inline constexpr const char* k_loaded = "loaded";
inline constexpr const char* k_mapped = "mapped";
inline constexpr const char* k_unmapped = "unmapped";
inline constexpr const char* k_ran = "ran";
inline constexpr const char* k_bye = "bye";
inline constexpr const char* k_error = "error";
inline constexpr const char* k_fault = "fault";
// An error's reason is a failure reason's name (util/failure_reason.h), or one of these two, which are not the
// implementation's doing: the backend cannot start on this machine (no driver, no device), or the user's device
// selection names nothing there.
inline constexpr const char* k_backend_unavailable = "backend_unavailable";
inline constexpr const char* k_backend_usage = "backend_usage";

// Reading a message from the other end without trusting its shape: a field of another type reads as absent, never as
// an exception (an answer forged by the candidate must be the candidate's protocol failure, not kwb's error).
inline std::string text_field(const nlohmann::json& m, const char* key) {
  const auto it = m.find(key);
  return it != m.end() && it->is_string() ? it->get<std::string>() : std::string();
}
inline std::optional<uint64_t> unsigned_field(const nlohmann::json& m, const char* key) {
  const auto it = m.find(key);
  if (it == m.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<uint64_t>();
}

// One tensor of a run request.
struct TensorArg {
  std::string name;
  int buffer = -1;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
};

struct RunMessage {
  uint64_t call = 0;
  std::vector<TensorArg> inputs;
  std::vector<TensorArg> outputs;
  std::vector<std::pair<std::string, double>> scalars;
  uint32_t stack_offset = 0;  // layout randomization: the stack moves down this many bytes before kwb_run
};

// The largest stack offset a run message may ask for (stats/layout.h draws at most 4080).
inline constexpr uint32_t k_max_stack_offset = 1u << 16;

inline nlohmann::json to_json(const RunMessage& r) {
  auto tensors = [](const std::vector<TensorArg>& list) {
    nlohmann::json arr = nlohmann::json::array();
    for (const TensorArg& t : list) {
      arr.push_back({{"name", t.name}, {"buffer", t.buffer}, {"dtype", to_string(t.dtype)}, {"shape", t.shape}});
    }
    return arr;
  };
  nlohmann::json scalars = nlohmann::json::array();
  for (const auto& [name, value] : r.scalars) scalars.push_back({name, value});
  return {{"type", k_run},
          {"call", r.call},
          {"inputs", tensors(r.inputs)},
          {"outputs", tensors(r.outputs)},
          {"scalars", scalars},
          {"stack_offset", r.stack_offset}};
}

// Throws std::exception (nlohmann's type errors, or std::runtime_error) on anything malformed.
inline RunMessage run_message_from_json(const nlohmann::json& m) {
  RunMessage r;
  r.call = m.at("call").get<uint64_t>();
  auto tensors = [](const nlohmann::json& list) {
    std::vector<TensorArg> out;
    for (const auto& t : list) {
      TensorArg a;
      a.name = t.at("name").get<std::string>();
      a.buffer = t.at("buffer").get<int>();
      const std::string dtype = t.at("dtype").get<std::string>();
      const std::optional<DType> parsed = parse_dtype(dtype);
      if (!parsed) throw std::runtime_error("run: unknown dtype " + dtype);
      a.dtype = *parsed;
      a.shape = t.at("shape").get<std::vector<int64_t>>();
      out.push_back(std::move(a));
    }
    return out;
  };
  r.inputs = tensors(m.at("inputs"));
  r.outputs = tensors(m.at("outputs"));
  for (const auto& s : m.at("scalars")) r.scalars.emplace_back(s.at(0).get<std::string>(), s.at(1).get<double>());
  r.stack_offset = m.value("stack_offset", 0u);
  if (r.stack_offset > k_max_stack_offset) throw std::runtime_error("run: stack_offset too large");
  return r;
}

}  // namespace kwb::protocol
