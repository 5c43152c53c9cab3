// The cuda backend's kernel trace: CUPTI's activity records of every kernel, copy and fill, collected in buffers
// that CUPTI fills and hands back to plain C callbacks (cuda_trace.cpp), and the kernels' readable names.
#pragma once

#include "backend/cuda_api.h"

#ifdef KWB_CUDA_BACKEND
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kwb::cuda {

// One command CUPTI saw, copied out of its buffer so the buffer can go back to CUPTI at once.
struct TracedCommand {
  std::string name;  // mangled kernel name, or "memcpy" / "memset"
  bool kernel = false;
  uint32_t device = 0;
  uint32_t stream = 0;
  uint64_t start = 0;
  uint64_t end = 0;
};

// CUPTI hands its record buffers to plain C callbacks that take no user pointer, so what they fill lives here, for
// the whole process (CUPTI may still hold a buffer after a backend is gone). The callbacks run on the thread that
// flushes and on CUPTI's own thread, hence the mutex; it is never held across a CUPTI call, because a flush calls
// back into on_buffer_completed on the flushing thread.
//
// The buffers are allocated once, up front, and recycled: CUPTI asks for a fresh one at the first record after each
// flush, i.e. inside the next kwb_run, where an allocation of kwb's own would be counted against the implementation
// by the profile worker's allocation counter.
struct TraceSink {
  static constexpr size_t k_buffer_bytes = size_t{1} << 20;  // ~5000 kernel records
  // CUPTI may hold more than one buffer at a time; running out loses records, and the call's trace then says
  // that it is incomplete.
  static constexpr size_t k_buffers = 16;

  std::mutex mutex;
  std::vector<std::unique_ptr<uint64_t[]>> storage;  // uint64_t: CUPTI wants 8-byte aligned buffers
  std::vector<uint8_t*> free_buffers;
  std::vector<TracedCommand> commands;
  uint64_t lost = 0;        // records CUPTI dropped or this file could not read, since the last discard
  bool registered = false;  // the callbacks, once per process
};

TraceSink& trace_sink();

// CUPTI's buffer callbacks (cuptiActivityRegisterCallbacks): a buffer from the sink's free list; the records of a
// completed buffer parsed into the sink's commands, and the buffer back on the free list.
void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
void CUPTIAPI on_buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid);

// The record kinds of a call: kernels on any stream (CONCURRENT_KERNEL does not serialize them, unlike KERNEL),
// copies and fills.
inline constexpr CUpti_ActivityKind k_traced_kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                                        CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};

// "_Z13rmsnorm_fusedPKfS0_Pflfb" -> "rmsnorm_fused": demangled and without the parameter list, so that the names
// in the evidence read like the source. A template kernel's demangled name starts with its return type, always
// void for a kernel, which goes too ("void scale<4>(float*)" -> "scale<4>"). Names that are not mangled C++
// (extern "C" kernels) stay as they are.
std::string kernel_name(const std::string& mangled);

}  // namespace kwb::cuda

#endif
