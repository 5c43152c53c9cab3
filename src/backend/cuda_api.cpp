// Loading the CUDA runtime and CUPTI with dlopen, resolving their entry points into typed tables, and sealing the
// runtime's table (cuda_api.h).
#include "backend/cuda_api.h"

#ifdef KWB_CUDA_BACKEND
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <climits>
#include <new>

namespace kwb::cuda {

namespace {

// The soname of this major version: an implementation built by kwb's nvcc (-cudart=shared) needs exactly this file.
std::string soname(const char* stem) { return fmt::format("{}.so.{}", stem, CUDART_VERSION / 1000); }

// dlopen's handle for `name`, first in `dir` (the toolkit kwb was built against), then wherever the dynamic loader
// finds it (LD_LIBRARY_PATH, ld.so.cache). The implementation's own DT_NEEDED entry for the same soname is then
// matched to this copy, so kwb and the implementation share one runtime: one context, one set of streams.
// RTLD_GLOBAL: objects loaded later resolve the library's symbols to this copy as well.
void* open_library(const std::string& dir, const std::string& name, std::string& tried) {
  for (const std::string& path : {dir.empty() ? std::string() : dir + "/" + name, name}) {
    if (path.empty()) continue;
    if (void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) return h;
    const char* why = ::dlerror();
    tried += fmt::format("{}dlopen({}): {}", tried.empty() ? "" : "; ", path, why != nullptr ? why : "failed");
  }
  return nullptr;
}

// The directory the loader actually took the library from (for the sandbox's read list).
std::string origin_of(void* handle) {
  char dir[PATH_MAX] = {};
  return ::dlinfo(handle, RTLD_DI_ORIGIN, dir) == 0 ? std::string(dir) : std::string();
}

template <typename Fn>
void resolve(void* handle, const char* symbol, const std::string& library, Fn& out) {
  out = reinterpret_cast<Fn>(::dlsym(handle, symbol));
  if (out == nullptr) {
    throw Error(ExitCode::unavailable,
                fmt::format("{} has no {}: it is older than the CUDA {} this kwb was built with (install that "
                            "toolkit's runtime, or rebuild kwb against the installed one)",
                            library, symbol, k_cuda_version));
  }
}

#define KWB_RESOLVE_FUNCTION(fn) resolve(handle, #fn, library, api.fn);

CudaRuntime load_cuda_runtime() {
  const std::string library = soname("libcudart");
  std::string tried;
  void* handle = open_library(KWB_CUDA_LIBRARY_DIR, library, tried);
  if (handle == nullptr) {
    throw Error(ExitCode::unavailable,
                fmt::format("the CUDA {} runtime ({}) cannot be loaded: {} (install the CUDA toolkit or its runtime "
                            "library, or add the directory that holds {} to LD_LIBRARY_PATH)",
                            k_cuda_version, library, tried, library));
  }
  CudaRuntime api;
  api.directory = origin_of(handle);
  KWB_CUDART_FUNCTIONS(KWB_RESOLVE_FUNCTION)
  return api;
}

Cupti load_cupti() {
  const std::string library = soname("libcupti");
  std::string tried;
  void* handle = open_library(KWB_CUPTI_LIBRARY_DIR, library, tried);
  if (handle == nullptr) {
    throw Error(ExitCode::unavailable,
                fmt::format("kernel tracing needs CUPTI ({}), which cannot be loaded: {} (install the toolkit's CUPTI "
                            "component, or add its directory, e.g. <cuda>/extras/CUPTI/lib64, to LD_LIBRARY_PATH)",
                            library, tried));
  }
  Cupti api;
  api.directory = origin_of(handle);
  KWB_CUPTI_FUNCTIONS(KWB_RESOLVE_FUNCTION)
  // The record layouts read below are this header's; another CUPTI release may hand out other record versions.
  uint32_t version = 0;
  if (api.cuptiGetVersion(&version) != CUPTI_SUCCESS || version / 100 != CUPTI_API_VERSION / 100) {
    throw Error(ExitCode::unavailable,
                fmt::format("{} is CUPTI API version {}, but kwb was built against {} and reads that version's "
                            "activity records (load the CUPTI of the toolkit kwb was built with)",
                            api.directory + "/" + library, version, CUPTI_API_VERSION));
  }
  return api;
}

#undef KWB_RESOLVE_FUNCTION

// The table the worker's synchronization and events go through lives on pages of its own, read-only and sealed
// once filled (before any implementation is loaded), and is reached by its fixed address: an implementation in the
// same process cannot swap cudaDeviceSynchronize or cudaEventElapsedTime for functions of its own by overwriting it
// (an exploit a review demonstrated against the OpenCL table). Loaded on first use; a failed load (which throws
// before anything is constructed) is tried again next time.
struct alignas(4096) SealedRuntime {
  alignas(CudaRuntime) unsigned char bytes[sizeof(CudaRuntime)];
};
SealedRuntime g_sealed_runtime;

#ifndef SYS_mseal
#define SYS_mseal 462
#endif

}  // namespace

const CudaRuntime& cuda_runtime() {
  static const bool loaded = [] {
    new (g_sealed_runtime.bytes) CudaRuntime(load_cuda_runtime());
    ::mprotect(&g_sealed_runtime, sizeof g_sealed_runtime, PROT_READ);
    (void)::syscall(SYS_mseal, &g_sealed_runtime, sizeof g_sealed_runtime, 0);  // Linux 6.10+
    return true;
  }();
  (void)loaded;
  return *std::launder(reinterpret_cast<const CudaRuntime*>(g_sealed_runtime.bytes));
}

const Cupti& cupti_library() {
  static const Cupti api = load_cupti();
  return api;
}

[[noreturn]] void throw_cuda_error(const CudaRuntime& api, cudaError_t rc, const char* call, const char* file,
                                   int line) {
  throw InternalError(fmt::format("{} failed: {} ({}) ({}:{})", call, api.cudaGetErrorName(rc),
                                  api.cudaGetErrorString(rc), file, line));
}

[[noreturn]] void throw_cupti_error(const Cupti& api, CUptiResult rc, const char* call, const char* file, int line) {
  const char* text = nullptr;
  if (api.cuptiGetResultString(rc, &text) != CUPTI_SUCCESS || text == nullptr) text = "unknown CUPTI error";
  throw InternalError(fmt::format("{} failed: {} ({}) ({}:{})", call, static_cast<int>(rc), text, file, line));
}

}  // namespace kwb::cuda

#endif
