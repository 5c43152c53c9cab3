// Progress lines on stderr for long runs: rewritten in place on a terminal, one line per look otherwise.
#pragma once

#include "pipeline/compare.h"

namespace kwb::cli {

ProgressSink make_progress_sink(const std::string& prefix);
// "waiting for the timing lock ...": one line when a timing stage must wait for another kwb, and a reminder every
// so often while it waits (util/timing_lock.h).
TimingLock::WaitNotice make_lock_notice(const std::string& prefix);
// "waited 125 s for the timing lock (held by ...); timing budget ahead: at most 60 s, from now": once a timing stage
// holds the lock after waiting, so that the budget printed before the wait is not read as including it.
LockWaited make_lock_waited(const std::string& prefix);
void end_progress_line();

}  // namespace kwb::cli
