// CUPTI's activity buffers and the records read from them (cuda_trace.h).
#include "backend/cuda_trace.h"

#ifdef KWB_CUDA_BACKEND
#include <cxxabi.h>

#include <cstdlib>
#include <iterator>

namespace kwb::cuda {

TraceSink& trace_sink() {
  static TraceSink sink;
  return sink;
}

void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  TraceSink& s = trace_sink();
  std::lock_guard lock(s.mutex);
  *max_records = 0;  // as many as fit
  if (s.free_buffers.empty()) {
    // Declined: CUPTI drops records until a buffer comes back, and the call's list is then incomplete.
    *buffer = nullptr;
    *size = 0;
    ++s.lost;
    return;
  }
  *buffer = s.free_buffers.back();
  *size = TraceSink::k_buffer_bytes;
  s.free_buffers.pop_back();
}

void CUPTIAPI on_buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid) {
  const Cupti& api = cupti_library();
  TraceSink& s = trace_sink();
  std::vector<TracedCommand> parsed;
  uint64_t lost = 0;
  try {
    CUpti_Activity* record = nullptr;
    for (;;) {
      const CUptiResult rc = api.cuptiActivityGetNextRecord(buffer, valid, &record);
      if (rc == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // the end of the valid bytes
      if (rc != CUPTI_SUCCESS) {
        ++lost;
        break;
      }
      TracedCommand c;
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
          c = {k->name != nullptr ? k->name : "?", true, k->deviceId, k->streamId, k->start, k->end};
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
          c = {"memcpy", false, m->deviceId, m->streamId, m->start, m->end};
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
          c = {"memset", false, m->deviceId, m->streamId, m->start, m->end};
          break;
        }
        default:
          continue;  // not a kind enabled here
      }
      parsed.push_back(std::move(c));
    }
  } catch (const std::bad_alloc&) {
    ++lost;  // an exception must not unwind through CUPTI's C frames
  }
  size_t dropped = 0;
  if (api.cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) != CUPTI_SUCCESS) ++lost;
  std::lock_guard lock(s.mutex);
  s.free_buffers.push_back(buffer);
  s.lost += lost + dropped;
  try {
    s.commands.insert(s.commands.end(), std::make_move_iterator(parsed.begin()), std::make_move_iterator(parsed.end()));
  } catch (const std::bad_alloc&) {
    s.lost += parsed.size();
  }
}

std::string kernel_name(const std::string& mangled) {
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
  if (status != 0 || demangled == nullptr) return mangled;
  std::string name = demangled.get();
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);
  if (!name.empty() && name.back() == ')') {
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      if (name[i] == ')') {
        ++depth;
      } else if (name[i] == '(' && --depth == 0) {
        name.erase(i);
        break;
      }
    }
  }
  return name;
}

}  // namespace kwb::cuda

#endif
