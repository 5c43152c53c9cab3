// The trusted-timing handshake on this machine (docs/timing.md, "The clock"): the same control page and phases as
// kwb-worker and WorkerProcess (src/worker/protocol.h), between two processes placed on different CPUs as kwb
// places them, with an empty call. Prints, per call: the time the parent measures from go to done (what the
// handshake adds to every sample of both arms), and the worker's CPU, read through a perf task-clock counter as
// kwb reads it, before go (beyond the parent's own reaction) and after done (the bounds of work_outside_timer).
#include "worker/protocol.h"

#include <linux/perf_event.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using kwb::protocol::Phase;
using kwb::protocol::state_word;

namespace {

long long now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1'000'000'000LL + t.tv_nsec;
}

void print(const char* what, std::vector<long long> v) {
  std::sort(v.begin(), v.end());
  auto q = [&](double f) { return v[static_cast<size_t>(f * static_cast<double>(v.size() - 1))]; };
  std::printf("%-34s p50 %7lld  p90 %7lld  p99 %7lld  max %8lld ns\n", what, q(0.5), q(0.9), q(0.99), v.back());
}

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 20000;
  auto* page = static_cast<kwb::protocol::ControlBlock*>(
      ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (page) kwb::protocol::ControlBlock();
  std::atomic<uint32_t>& state = page->state;
  cpu_set_t all;
  CPU_ZERO(&all);
  ::sched_getaffinity(0, sizeof all, &all);
  int parent_cpu = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &all)) parent_cpu = c;
  }
  const pid_t child = ::fork();
  if (child == 0) {  // the worker's side, as in kwb-worker's run_call
    for (uint64_t seq = 1;; ++seq) {
      const uint32_t armed = state_word(seq, Phase::armed);
      state.store(armed);
      kwb::protocol::futex_wake(state);
      while (state.load() == armed) kwb::protocol::futex_wait(state, armed);
      if (state.load() == 0xFFFFFFFFu) ::_exit(0);
      state.store(state_word(seq, Phase::ready));
      while (state.load() != state_word(seq, Phase::go)) kwb::protocol::cpu_relax();
      page->rc.store(0);
      const uint32_t done = state_word(seq, Phase::done);
      state.store(done);
      kwb::protocol::futex_wake(state);
      while (state.load() == done) kwb::protocol::futex_wait(state, done);
    }
  }
  if (CPU_COUNT(&all) >= 2) {
    cpu_set_t mine, theirs = all;
    CPU_ZERO(&mine);
    CPU_SET(parent_cpu, &mine);
    CPU_CLR(parent_cpu, &theirs);
    ::sched_setaffinity(0, sizeof mine, &mine);
    ::sched_setaffinity(child, sizeof theirs, &theirs);
  }
  perf_event_attr a{};
  a.type = PERF_TYPE_SOFTWARE;
  a.size = sizeof a;
  a.config = PERF_COUNT_SW_TASK_CLOCK;
  a.inherit = 1;
  const int fd = static_cast<int>(::syscall(SYS_perf_event_open, &a, child, -1, -1, 0));
  if (fd < 0) std::perror("perf_event_open (CPU figures will read 0)");
  auto cpu = [&]() -> long long {
    uint64_t v = 0;
    return fd >= 0 && ::read(fd, &v, sizeof v) == sizeof v ? static_cast<long long>(v) : 0;
  };
  std::vector<long long> ns, pre, post, reaction;
  for (uint64_t seq = 1; seq <= static_cast<uint64_t>(calls); ++seq) {
    while (state.load() != state_word(seq, Phase::armed)) kwb::protocol::cpu_relax();
    ::usleep(20);  // the worker goes to sleep, as while kwb writes the inputs
    const long long cpu_a = cpu();
    state.store(state_word(seq, Phase::wake));
    kwb::protocol::futex_wake(state);
    while (state.load() != state_word(seq, Phase::ready)) kwb::protocol::cpu_relax();
    const long long seen = now_ns();
    const long long cpu_b = cpu();
    const long long t0 = now_ns();
    state.store(state_word(seq, Phase::go));
    while (state.load() != state_word(seq, Phase::done)) kwb::protocol::cpu_relax();
    const long long t1 = now_ns();
    const long long cpu_1 = cpu();
    ::usleep(20);  // the capture of the outputs
    const long long cpu_2 = cpu();
    state.store(state_word(seq, Phase::collect));
    kwb::protocol::futex_wake(state);
    ns.push_back(t1 - t0);
    reaction.push_back(t0 - seen);
    pre.push_back(std::max(0LL, cpu_b - cpu_a - (t0 - seen)));
    post.push_back(cpu_2 - cpu_1);
  }
  while (state.load() != state_word(static_cast<uint64_t>(calls) + 1, Phase::armed)) kwb::protocol::cpu_relax();
  state.store(0xFFFFFFFFu);
  kwb::protocol::futex_wake(state);
  ::waitpid(child, nullptr, 0);
  std::printf("%d empty calls; parent on CPU %d, worker on the others\n", calls, parent_cpu);
  print("time go -> done (empty call)", ns);
  print("parent reaction ready -> go", reaction);
  print("worker CPU before go (beyond it)", pre);
  print("worker CPU after done", post);
}
