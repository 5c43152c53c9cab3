// Adversarial candidate. Class: slowing the other arm down (a comparison times both arms' calls in turns, with both
// workers alive: docs/timing.md, "The protocol").
// Cheat: computes honestly, and keeps a thread of its own that streams 32 MiB of memory for 300 us after each of its
// timed calls returns, when the other arm's turn comes three times in four: on a machine with CPUs to spare it would
// run beside the other arm's calls and slow them, and this arm would read faster. 300 us a call stays under the
// median bound on CPU while idle (1 ms).
// Defense: one worker runs at a time. Before the other arm's turn the parent stops this worker's whole process group
// with SIGSTOP and waits for the stop (WorkerProcess::freeze), so the thread's burst runs only when its own worker is
// thawed again, where it slows this arm's own calls. On a 2-vCPU machine the workers share one CPU and the woken
// worker preempts the thread anyway: without the freeze the thief measured 7.5x slower on decode, not faster.
// Expected: compare against the honest multi-threaded kernel never PASS, and never reads much faster. Runs on a task
// with threads > 1 (tests/adversarial/tasks/rmsnorm_threads).
#include "rmsnorm_common.h"

#include <atomic>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <thread>

KWB_CANDIDATE_ABI

namespace {

// The worker's calls in a block: 2 warm-ups, then turns of a re-warm call and a timed call. After a timed call the
// other arm's turn comes next three times in four (a coin flip orders each pair of turns).
constexpr uint64_t k_warmups = 2;
std::atomic<uint64_t> g_calls{0};
std::atomic<int64_t> g_timed_return_ns{0};

int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

void sleep_ns(int64_t ns) {
  timespec t{0, static_cast<long>(ns)};
  ::nanosleep(&t, nullptr);
}

// For 300 us after each timed call returns, takes the CPU and the memory bus: under the median bound on CPU while
// idle.
[[noreturn]] void thief() {
  constexpr size_t k_words = (size_t{32} << 20) / 8;
  std::unique_ptr<uint64_t[]> buffer(new uint64_t[k_words]());
  volatile uint64_t sink = 0;
  int64_t seen = 0;
  for (;;) {
    const int64_t returned = g_timed_return_ns.load(std::memory_order_acquire);
    if (returned == seen) {
      sleep_ns(20'000);
      continue;
    }
    seen = returned;
    size_t i = 0;
    while (now_ns() < returned + 300'000) {
      for (size_t j = 0; j < 1024; ++j, i = (i + 8) % k_words) buffer[i] += 1;
      sink = sink + buffer[i];
    }
  }
}

}  // namespace

extern "C" int kwb_run(const kwb_call* call) {
  static std::once_flag started;
  std::call_once(started, [] { std::thread(thief).detach(); });
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  corpus::rmsnorm(*p, p->y);
  const uint64_t index = g_calls.fetch_add(1);
  if (index >= k_warmups && (index - k_warmups) % 2 == 1) g_timed_return_ns.store(now_ns(), std::memory_order_release);
  return 0;
}
