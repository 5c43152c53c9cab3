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
// What this cannot see: an implementation that reaches a driver without going through these names (its own
// dlopen of the loader, the ICD dispatch table). docs/threat-model.md says what still holds then.
#pragma once

#include "backend/opencl_api.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace kwb::opencl {

struct Command {
  std::string name;          // kernel function name, or "copy", "fill", "write", "read"
  cl_command_queue queue = nullptr;
  cl_event event = nullptr;  // retained here; nullptr when not traced
};

struct InterceptState {
  std::mutex mutex;
  cl_command_queue call_queue = nullptr;   // the queue kwb hands to the implementation
  // Between prepare_call and the moment kwb_run returns (finish_call disarms first thing, so an enqueue from a
  // thread while kwb waits for the device already counts as between calls). Atomic: the implementation's threads
  // read them.
  std::atomic<bool> armed{false};
  std::atomic<bool> calls_started{false};  // the first call has begun: kwb_setup is over
  bool trace = false;
  std::vector<cl_command_queue> created;   // queues the implementation made (retained)
  // Recorded since the last collect_call, which takes them (so a late record is reported with the next call, never
  // lost): all commands when tracing, the off-queue ones otherwise.
  std::vector<Command> commands;
  uint64_t off_queue = 0;
  // Commands the implementation enqueued while no call was running (after kwb_run returned: a thread it left
  // behind, say). Reported with the next call.
  uint64_t between_calls = 0;
};

InterceptState& intercept_state();

}  // namespace kwb::opencl
