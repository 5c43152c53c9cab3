#include "cli/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace kwb::cli {

namespace {
bool g_line_open = false;
}

void end_progress_line() {
  if (g_line_open) std::fputs("\n", stderr);
  g_line_open = false;
}

ProgressSink make_progress_sink(const std::string& prefix) {
  const bool tty = ::isatty(2) != 0;
  return [tty, prefix, last = -1.0](const Progress& p) mutable {
    std::string est = p.estimate_pct ? fmt::format("  estimate {:+.2f}% [{:+.2f}%, {:+.2f}%]", *p.estimate_pct,
                                                   *p.ci_low_pct, *p.ci_high_pct)
                                     : "";
    const double eta = std::max(0.0, p.budget - p.elapsed);
    std::string line = fmt::format("{}{}: block {}  {:.1f} s elapsed, at most {:.0f} s left{}", prefix, p.workload,
                                   p.blocks, p.elapsed, eta, est);
    if (tty) {
      if (p.elapsed - last < 0.2 && !p.estimate_pct) return;
      last = p.elapsed;
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
      g_line_open = true;
    } else if (p.estimate_pct) {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  };
}

TimingLock::WaitNotice make_lock_notice(const std::string& prefix) {
  return [prefix](const TimingLockWait& w) {
    end_progress_line();
    const std::string queue =
        w.waiters_ahead > 0
            ? fmt::format("; {} more in the queue before this one (first come, first served)", w.waiters_ahead)
            : "";
    std::fprintf(stderr,
                 "%swaiting for the timing lock %s (one timing stage at a time on this machine): held by %s%s; "
                 "%.0f s so far\n",
                 prefix.c_str(), timing_lock_path().c_str(), w.holder.c_str(), queue.c_str(), w.waited_s);
  };
}

LockWaited make_lock_waited(const std::string& prefix) {
  return [prefix](const TimingLockRecord& hold, double budget_ahead_s) {
    end_progress_line();
    std::fprintf(stderr,
                 "%swaited %.0f s for the timing lock (held by %s); timing budget ahead: at most %.0f s, from "
                 "now\n",
                 prefix.c_str(), hold.waited_s, hold.waited_for.c_str(), budget_ahead_s);
  };
}

}  // namespace kwb::cli
