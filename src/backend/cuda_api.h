// The CUDA runtime and CUPTI as the cuda backend (cuda_backend.cpp) reaches them. Neither is linked: both are
// opened with dlopen when a worker asks for this backend (CUPTI only when tracing), so kwb-worker starts on machines
// without CUDA and says "unavailable" there. Every call goes through a table of function pointers typed from the
// toolkit's own prototypes (cuda_api.cpp) and through one checked macro (KWB_CUDA, KWB_CUPTI).
#pragma once

#ifdef KWB_HAVE_CUDA
// Third-party headers: their warnings are not this file's, and the GPU machine's compiler may differ from the one
// this was checked with.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wshadow"
#include <cuda_runtime_api.h>
#include <cupti.h>
#pragma GCC diagnostic pop

// The activity records read below (CUpti_ActivityKernel10, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4) and the
// runtime's exported names are those of CUDA 13. An older toolkit builds the backend as unavailable instead.
#if CUDART_VERSION >= 13000 && CUPTI_API_VERSION >= 130000
#define KWB_CUDA_BACKEND 1
#endif
#endif

#ifdef KWB_CUDA_BACKEND
#include "util/error.h"

#include <fmt/format.h>

#include <string>
#include <utility>

// The per-thread default stream renames runtime functions (cudaMemcpyAsync -> cudaMemcpyAsync_ptsz); the symbols
// resolved by their plain names (cuda_api.cpp) would then not match the prototypes.
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "the cuda backend resolves the legacy-stream entry points: build it without CUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

// CMake passes the directories of the toolkit kwb was built against; without them only the dynamic loader's search
// path is tried.
#ifndef KWB_CUDA_LIBRARY_DIR
#define KWB_CUDA_LIBRARY_DIR ""
#endif
#ifndef KWB_CUPTI_LIBRARY_DIR
#define KWB_CUPTI_LIBRARY_DIR ""
#endif

namespace kwb::cuda {

// "13.0" from 13000, the encoding of cudaRuntimeGetVersion and cudaDriverGetVersion.
inline std::string cuda_version_text(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }

inline const std::string k_cuda_version = cuda_version_text(CUDART_VERSION);

// clang-format off
#define KWB_CUDART_FUNCTIONS(X)                                                                                  \
  X(cudaGetErrorName) X(cudaGetErrorString) X(cudaGetDeviceCount) X(cudaRuntimeGetVersion)                       \
  X(cudaDriverGetVersion) X(cudaGetDeviceProperties) X(cudaDeviceGetAttribute) X(cudaSetDevice)                  \
  X(cudaDeviceSynchronize) X(cudaStreamCreateWithFlags) X(cudaStreamDestroy) X(cudaStreamSynchronize)            \
  X(cudaEventCreate) X(cudaEventDestroy) X(cudaEventRecord) X(cudaEventElapsedTime) X(cudaMalloc) X(cudaFree)    \
  X(cudaMemcpyAsync) X(cudaMemsetAsync)
// clang-format on

// clang-format off
#define KWB_CUPTI_FUNCTIONS(X)                                                                                   \
  X(cuptiGetResultString) X(cuptiGetVersion) X(cuptiActivityRegisterCallbacks) X(cuptiActivityEnable)           \
  X(cuptiActivityDisable) X(cuptiActivityFlushAll) X(cuptiActivityGetNextRecord)                                 \
  X(cuptiActivityGetNumDroppedRecords) X(cuptiGetStreamIdEx) X(cuptiGetDeviceId)
// clang-format on

// NOLINTNEXTLINE(bugprone-macro-parentheses): fn is a name declared here, not an expression to parenthesize
#define KWB_DECLARE_FUNCTION(fn) decltype(&::fn) fn = nullptr;

// The runtime entry points kwb uses, resolved once per process; the library is never closed (its exit handlers
// and the implementation's would run against an unmapped object).
struct CudaRuntime {
  std::string directory;
  KWB_CUDART_FUNCTIONS(KWB_DECLARE_FUNCTION)
};

// The runtime's table, loaded on first use (Error(unavailable) when it cannot be; a failed load is tried again next
// time). It lives on pages of its own, sealed once filled and reached by its fixed address (cuda_api.cpp).
const CudaRuntime& cuda_runtime();

struct Cupti {
  std::string directory;
  KWB_CUPTI_FUNCTIONS(KWB_DECLARE_FUNCTION)
};

// CUPTI, loaded on first use and checked to be the API version whose activity records cuda_trace.cpp reads.
const Cupti& cupti_library();

#undef KWB_DECLARE_FUNCTION

// ---- checked calls ------------------------------------------------------------------------------------------------

[[noreturn]] void throw_cuda_error(const CudaRuntime& api, cudaError_t rc, const char* call, const char* file,
                                   int line);
[[noreturn]] void throw_cupti_error(const Cupti& api, CUptiResult rc, const char* call, const char* file, int line);

// Every runtime call of the backend: `KWB_CUDA(cuda().cudaMalloc(&p, n))`. Inside CudaBackend, whose cuda() is the
// sealed runtime table (its cudaGetErrorString names the failure).
#define KWB_CUDA(call)                                                   \
  do {                                                                   \
    const cudaError_t kwb_cuda_rc_ = (call);                             \
    if (kwb_cuda_rc_ != cudaSuccess) {                                   \
      throw_cuda_error(cuda(), kwb_cuda_rc_, #call, __FILE__, __LINE__); \
    }                                                                    \
  } while (0)

// The same for CUPTI, whose table is the process-wide cupti_library().
#define KWB_CUPTI(call)                                                             \
  do {                                                                              \
    const CUptiResult kwb_cupti_rc_ = (call);                                       \
    if (kwb_cupti_rc_ != CUPTI_SUCCESS) {                                           \
      throw_cupti_error(cupti_library(), kwb_cupti_rc_, #call, __FILE__, __LINE__); \
    }                                                                               \
  } while (0)

// ---- resources ----------------------------------------------------------------------------------------------------

// Owns one runtime object (device memory, an event, a stream) and releases it with the runtime's own function.
// Copy deleted: two owners would free it twice. Release errors are ignored (destructors never throw; a context
// that a faulting kernel broke refuses every call, and the process is about to end).
template <typename Handle>
class Owned {
public:
  using Release = cudaError_t (*)(Handle);
  Owned() = default;
  Owned(Handle handle, Release release) : m_handle(handle), m_release(release) {}
  Owned(Owned&& other) noexcept : m_handle(std::exchange(other.m_handle, Handle{})), m_release(other.m_release) {}
  Owned& operator=(Owned&& other) noexcept {
    if (this != &other) {
      reset();
      m_handle = std::exchange(other.m_handle, Handle{});
      m_release = other.m_release;
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { reset(); }

  Handle get() const { return m_handle; }

private:
  void reset() noexcept {
    if (m_handle != Handle{}) (void)m_release(m_handle);
    m_handle = Handle{};
  }

  Handle m_handle{};
  Release m_release = nullptr;
};

}  // namespace kwb::cuda

#endif
