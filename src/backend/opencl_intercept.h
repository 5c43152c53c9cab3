// What the worker learns from the implementation's own OpenCL calls. The worker executable exports wrappers for
// the calls below under their OpenCL names; the executable comes first in the global symbol scope, so the
// implementation (which links libOpenCL.so.1) binds to them when it is dlopen'ed, and each wrapper does its
// bookkeeping and calls the real function (opencl_api.h).
//
//   clCreateCommandQueue[WithProperties]   every queue the implementation makes is remembered (and retained), so
//                                          the timed call's synchronization finishes them all: work on a private
//                                          queue cannot escape the timer.
//   clEnqueue{NDRangeKernel,Task,CopyBuffer,FillBuffer,WriteBuffer,ReadBuffer}
//                                          during a call: any of them on a queue other than the call's is counted
//                                          (always); with tracing on, every one gets an event and is listed with
//                                          its kernel name and device time (check and profile; never timed calls).
//                                          Between calls (after kwb_run returned, before the next one), any
//                                          of them is counted too: work that escaped the call.
//
// The same wrappers are also written into the driver's ICD dispatch table (install_dispatch_wrappers), which every
// cl_* object begins with a pointer to and which the loader calls through: an implementation that creates a queue
// or enqueues through that table, or through a loader it opened itself, reaches them too. The table stays in the
// driver's writable memory (it shares its page with the driver's other data), so the worker compares it with what
// it left there before and after every call (dispatch_table_changes).
//
// What this cannot see: an implementation that finds the driver's own functions (by scanning the worker's memory
// or parsing the driver's file) and calls them directly. docs/threat-model.md says what still holds then.
#pragma once

#include "backend/opencl_api.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace kwb::opencl {

struct Command {
  std::string name;  // kernel function name, or "copy", "fill", "write", "read"
  cl_command_queue queue = nullptr;
  cl_event event = nullptr;  // retained here; nullptr when not traced
};

struct InterceptState {
  std::mutex mutex;
  cl_command_queue call_queue = nullptr;  // the queue kwb hands to the implementation
  // Between prepare_call and the moment kwb_run returns (finish_call disarms first thing, so an enqueue from a
  // thread while kwb waits for the device already counts as between calls). Atomic: the implementation's threads
  // read them.
  std::atomic<bool> armed{false};
  std::atomic<bool> calls_started{false};  // the first call has begun: kwb_setup is over
  bool trace = false;
  std::vector<cl_command_queue> created;  // queues the implementation made (retained)
  // Recorded since the last collect_call, which takes them (so a late record is reported with the next call, never
  // lost): all commands when tracing, the off-queue ones otherwise.
  std::vector<Command> commands;
  uint64_t off_queue = 0;
  // Commands the implementation enqueued while no call was running (after kwb_run returned: a thread it left
  // behind, say). Reported with the next call.
  uint64_t between_calls = 0;
  // The driver's dispatch table and what install_dispatch_wrappers left in it.
  cl_icd_dispatch* table = nullptr;
  cl_icd_dispatch expected{};
};

InterceptState& intercept_state();

// Points the entries of `driver` (the dispatch table of the chosen platform) that create command queues or enqueue
// the commands above at the wrappers, and remembers the whole table as left. Call once, after adopt_driver_table
// (opencl_api.h) and before any implementation is loaded.
void install_dispatch_wrappers(cl_icd_dispatch& driver);

// "" while the dispatch table is as install_dispatch_wrappers left it. Otherwise which entries were rewritten; the
// table is then put back, so that the rest of the run sees the wrappers again.
std::string dispatch_table_changes();

}  // namespace kwb::opencl
