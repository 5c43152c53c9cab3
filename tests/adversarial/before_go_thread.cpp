// Adversarial candidate. Class: work moved before go (a third held-out round: "computing before go"; docs/threat-model.md).
// Cheat: a thread of the candidate's own watches the output for the fresh poison the parent writes before each call.
// The moment it appears (the inputs are in place by then), the thread computes the whole result, while the worker is
// still waking up; kwb_run then finds the output done and returns at once, so the window from go to done holds
// nothing. A takeover of the worker's own control flow moves the same work to the same place; the worker offers no
// indirect call to take there (sealed code and RELRO, no virtual call between wake and ready), threads are what
// remains.
// Defense: the worker's CPU on every thread from just before the inputs are written to go, and after done, is charged
// to the sample (util/cpu_watch.h). The work costs what it costs inside the window, plus the thread's watching.
// Expected: compare against the honest multi-threaded kernel never PASS: its watching between calls is refused
// (work_outside_timer, work_after_return) where it shows, and what it computes before go is charged where it does
// not. Runs on a task with threads > 1 (tests/adversarial/tasks/rmsnorm_threads).
#include <kwb/kernel.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>

#include <algorithm>

KWB_CANDIDATE_ABI

namespace {

struct Call {
  const float* x = nullptr;
  const float* weight = nullptr;
  float* y = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  float eps = 1e-6f;
};

bool unpack(const kwb_call& call, Call& c) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return false;
  const DLTensor& x = call.inputs[0];
  const DLTensor& w = call.inputs[1];
  const DLTensor& y = call.outputs[0];
  if (x.ndim != 2 || w.ndim != 1 || y.ndim != 2 || x.dtype.bits != 32 || y.dtype.bits != 32) return false;
  c.x = static_cast<const float*>(x.data);
  c.weight = static_cast<const float*>(w.data);
  c.y = static_cast<float*>(y.data);
  c.rows = x.shape[0];
  c.cols = x.shape[1];
  c.eps = static_cast<float>(kwb_scalar_or(&call, "eps", 1e-6));
  return true;
}

void rmsnorm(const Call& p) {
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* x = p.x + r * p.cols;
    float* y = p.y + r * p.cols;
    double sum = 0.0;
    for (int64_t c = 0; c < p.cols; ++c) sum += static_cast<double>(x[c]) * x[c];
    const double inv_rms = 1.0 / std::sqrt(sum / static_cast<double>(p.cols) + p.eps);
    for (int64_t c = 0; c < p.cols; ++c) y[c] = static_cast<float>(x[c] * inv_rms * p.weight[c]);
  }
}

bool is_nan(const float* f) {
  uint32_t bits = 0;
  std::memcpy(&bits, f, sizeof bits);
  return (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0;
}

// The call the watcher computes for; published by kwb_run, read by the watcher. A generation counter says whether the
// result in y is for the poison that is there now.
std::atomic<Call*> g_watched{nullptr};
std::atomic<uint64_t> g_computed{0};  // times the watcher filled y ahead of go
Call g_calls[2];
// The parent unmaps a case's buffers when the next case starts, and the run-phase sandbox refuses a candidate's own
// SIGSEGV handler: a plain read of the old y would kill the worker. So the watcher asks the kernel first: a futex
// wait on the word with a zero timeout reads it in the kernel, and fails with EFAULT where it is unmapped or fenced
// (PROT_NONE) instead of faulting. Only a munmap landing between that probe and the read still faults. The system
// call is made directly: the libc wrapper `syscall` is a forbidden import (docs/threat-model.md), an instruction is not.
long futex_wait_now(const uint32_t* word) {
  const timespec none{0, 0};
  long r = 0;
#if defined(__x86_64__)
  register const timespec* timeout asm("r10") = &none;
  asm volatile("syscall"
               : "=a"(r)
               : "0"(static_cast<long>(SYS_futex)), "D"(word), "S"(static_cast<long>(FUTEX_WAIT_PRIVATE)), "d"(0L),
                 "r"(timeout)
               : "rcx", "r11", "memory");
#elif defined(__aarch64__)
  register long x8 asm("x8") = SYS_futex;
  register long x0 asm("x0") = reinterpret_cast<long>(word);
  register long x1 asm("x1") = FUTEX_WAIT_PRIVATE;
  register long x2 asm("x2") = 0;
  register long x3 asm("x3") = reinterpret_cast<long>(&none);
  asm volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
  r = x0;
#else
#error "before_go_thread.cpp: no direct system call for this architecture"
#endif
  return r;  // 0, or minus the error
}

bool readable(const float* f) { return futex_wait_now(reinterpret_cast<const uint32_t*>(f)) != -EFAULT; }

int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

std::atomic<int64_t> g_returned_ns{0};  // when kwb_run last returned
std::atomic<int64_t> g_lead_ns{0};      // how long after that the next call's poison came, last time

// Quiet while the worker is idle (an idle worker that burns CPU is caught): it sleeps until shortly before the next
// call's poison is due, going by how long it took last time, and only then spins for it.
void watch() {
  for (;;) {
    Call* c = g_watched.load(std::memory_order_acquire);
    if (c == nullptr) {
      timespec nap{0, 20'000};
      nanosleep(&nap, nullptr);
      continue;
    }
    const int64_t due = g_returned_ns.load() + g_lead_ns.load() * 7 / 8;
    const int64_t t = now_ns();
    if (t < due - 60'000) {
      timespec nap{0, std::min<long>(200'000, static_cast<long>(due - t - 60'000))};
      nanosleep(&nap, nullptr);
      continue;
    }
    const int64_t n = c->rows * c->cols;
    // Every buffer the computation touches, at both ends: when the next case starts, its buffers may land where some
    // of this call's were, and a read of the inputs that are gone would kill the worker as surely as one of y.
    if (!readable(c->y) || !readable(c->y + n - 1) || !readable(c->x) || !readable(c->x + n - 1) ||
        !readable(c->weight) || !readable(c->weight + c->cols - 1)) {
      g_watched.store(nullptr);  // its buffers are gone; wait for the next call to name new ones
      continue;
    }
    // Fresh poison in the first and last element: the parent has written this call's inputs, then its poison.
    if (!is_nan(c->y) || !is_nan(c->y + n - 1)) {
      if (t > due + 3'000'000) {  // missed it, or the worker waits for longer now: nap, and learn again
        g_lead_ns.store(0);
        timespec nap{0, 20'000};
        nanosleep(&nap, nullptr);
      }
      continue;
    }
    g_lead_ns.store(t - g_returned_ns.load());
    rmsnorm(*c);
    g_computed.fetch_add(1, std::memory_order_release);
    g_watched.store(nullptr, std::memory_order_release);
  }
}

}  // namespace

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  static uint64_t calls = 0;
  static uint64_t seen = 0;
  static bool watcher = false;
  Call c;
  if (!unpack(*call, c)) return 1;
  const int64_t n = c.rows * c.cols;
  // The watcher computed this call's output before go: nothing left to do.
  const uint64_t computed = g_computed.load(std::memory_order_acquire);
  const bool ahead = computed != seen && !is_nan(c.y) && !is_nan(c.y + n - 1);
  seen = computed;
  g_watched.store(nullptr, std::memory_order_release);
  if (!ahead) rmsnorm(c);
  // Name this call's buffers to the watcher for the next call (the same slots, refilled behind the same addresses).
  Call& next = g_calls[++calls % 2];
  next = c;
  g_watched.store(&next, std::memory_order_release);
  g_returned_ns.store(now_ns());
  if (!watcher) {
    watcher = true;
    std::thread(watch).detach();
  }
  return 0;
}
