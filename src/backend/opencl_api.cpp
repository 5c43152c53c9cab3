#include "backend/opencl_api.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>

namespace kwb::opencl {

namespace {

struct Loaded {
  Api api{};
  bool ok = false;
  std::string why;
};

template <typename Fn>
bool resolve(void* handle, const char* name, Fn& out, std::string& why) {
  out = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (out == nullptr && why.empty()) why = std::string("libOpenCL.so.1 has no ") + name;
  return out != nullptr;
}

Loaded load() {
  Loaded l;
  // RTLD_LOCAL: the loader's symbols must not enter the global scope ahead of... nothing, in fact: the worker
  // executable comes first in that scope anyway, so the implementation binds to the worker's wrappers either way.
  // Lookups through this handle search the loader and its dependencies only, never the executable: they reach
  // the real functions.
  void* h = ::dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    l.why = std::string("no OpenCL ICD loader: ") + ::dlerror() +
            " (install ocl-icd-libopencl1 and a driver, e.g. pocl-opencl-icd; scripts/setup.sh does)";
    return l;
  }
  Api& a = l.api;
  std::string& w = l.why;
  bool ok =
      resolve(h, "clGetPlatformIDs", a.GetPlatformIDs, w) & resolve(h, "clGetPlatformInfo", a.GetPlatformInfo, w) &
      resolve(h, "clGetDeviceIDs", a.GetDeviceIDs, w) & resolve(h, "clGetDeviceInfo", a.GetDeviceInfo, w) &
      resolve(h, "clCreateContext", a.CreateContext, w) & resolve(h, "clReleaseContext", a.ReleaseContext, w) &
      resolve(h, "clCreateCommandQueue", a.CreateCommandQueue, w) &
      resolve(h, "clCreateCommandQueueWithProperties", a.CreateCommandQueueWithProperties, w) &
      resolve(h, "clRetainCommandQueue", a.RetainCommandQueue, w) &
      resolve(h, "clReleaseCommandQueue", a.ReleaseCommandQueue, w) & resolve(h, "clCreateBuffer", a.CreateBuffer, w) &
      resolve(h, "clCreateSubBuffer", a.CreateSubBuffer, w) & resolve(h, "clReleaseMemObject", a.ReleaseMemObject, w) &
      resolve(h, "clEnqueueWriteBuffer", a.EnqueueWriteBuffer, w) &
      resolve(h, "clEnqueueReadBuffer", a.EnqueueReadBuffer, w) &
      resolve(h, "clEnqueueCopyBuffer", a.EnqueueCopyBuffer, w) &
      resolve(h, "clEnqueueFillBuffer", a.EnqueueFillBuffer, w) &
      resolve(h, "clEnqueueNDRangeKernel", a.EnqueueNDRangeKernel, w) & resolve(h, "clEnqueueTask", a.EnqueueTask, w) &
      resolve(h, "clEnqueueMarkerWithWaitList", a.EnqueueMarkerWithWaitList, w) & resolve(h, "clFinish", a.Finish, w) &
      resolve(h, "clGetEventProfilingInfo", a.GetEventProfilingInfo, w) &
      resolve(h, "clRetainEvent", a.RetainEvent, w) & resolve(h, "clReleaseEvent", a.ReleaseEvent, w) &
      resolve(h, "clGetKernelInfo", a.GetKernelInfo, w);
  l.ok = ok;
  return l;
}

// The table the worker's synchronization and timing go through lives on a page of its own, read-only and sealed
// once it holds the driver's functions (before any implementation is loaded): an implementation in the same process
// cannot swap clFinish or the profiling query for functions of its own by overwriting it. Its address is a link-time
// constant, so no writable pointer leads to it either.
struct alignas(4096) SealedApi {
  Api api;
};
SealedApi g_sealed;

#ifndef SYS_mseal
#define SYS_mseal 462
#endif

void seal_table() {
  ::mprotect(&g_sealed, sizeof g_sealed, PROT_READ);
  // Linux 6.10+; elsewhere the page stays read-only but could be made writable again (docs/threat-model.md).
  (void)::syscall(SYS_mseal, &g_sealed, sizeof g_sealed, 0);
}

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded r = load();
    if (r.ok) g_sealed.api = r.api;
    return r;
  }();
  return l;
}

// The entry of `driver` for `field`, as the Api member's type (cl_icd.h declares some entries as void* when the
// headers target an older OpenCL version; the functions are the same).
template <typename Fn, typename Entry>
void take(Fn& field, Entry entry) {
  if (entry != nullptr) field = reinterpret_cast<Fn>(reinterpret_cast<void*>(entry));
}

}  // namespace

const Api* api(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok && why != nullptr) *why = l.why;
  return l.ok ? &g_sealed.api : nullptr;
}

void adopt_driver_table(const cl_icd_dispatch& d) {
  Api& a = g_sealed.api;
  take(a.GetPlatformIDs, d.clGetPlatformIDs);
  take(a.GetPlatformInfo, d.clGetPlatformInfo);
  take(a.GetDeviceIDs, d.clGetDeviceIDs);
  take(a.GetDeviceInfo, d.clGetDeviceInfo);
  take(a.CreateContext, d.clCreateContext);
  take(a.ReleaseContext, d.clReleaseContext);
  take(a.CreateCommandQueue, d.clCreateCommandQueue);
  take(a.CreateCommandQueueWithProperties, d.clCreateCommandQueueWithProperties);
  take(a.RetainCommandQueue, d.clRetainCommandQueue);
  take(a.ReleaseCommandQueue, d.clReleaseCommandQueue);
  take(a.CreateBuffer, d.clCreateBuffer);
  take(a.CreateSubBuffer, d.clCreateSubBuffer);
  take(a.ReleaseMemObject, d.clReleaseMemObject);
  take(a.EnqueueWriteBuffer, d.clEnqueueWriteBuffer);
  take(a.EnqueueReadBuffer, d.clEnqueueReadBuffer);
  take(a.EnqueueCopyBuffer, d.clEnqueueCopyBuffer);
  take(a.EnqueueFillBuffer, d.clEnqueueFillBuffer);
  take(a.EnqueueNDRangeKernel, d.clEnqueueNDRangeKernel);
  take(a.EnqueueTask, d.clEnqueueTask);
  take(a.EnqueueMarkerWithWaitList, d.clEnqueueMarkerWithWaitList);
  take(a.Finish, d.clFinish);
  take(a.GetEventProfilingInfo, d.clGetEventProfilingInfo);
  take(a.RetainEvent, d.clRetainEvent);
  take(a.ReleaseEvent, d.clReleaseEvent);
  take(a.GetKernelInfo, d.clGetKernelInfo);
  seal_table();
}

std::string error_name(cl_int code) {
  const char* name = "unknown OpenCL error";
  switch (code) {
    case CL_DEVICE_NOT_FOUND:
      name = "CL_DEVICE_NOT_FOUND";
      break;
    case CL_DEVICE_NOT_AVAILABLE:
      name = "CL_DEVICE_NOT_AVAILABLE";
      break;
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
      name = "CL_MEM_OBJECT_ALLOCATION_FAILURE";
      break;
    case CL_OUT_OF_RESOURCES:
      name = "CL_OUT_OF_RESOURCES";
      break;
    case CL_OUT_OF_HOST_MEMORY:
      name = "CL_OUT_OF_HOST_MEMORY";
      break;
    case CL_PROFILING_INFO_NOT_AVAILABLE:
      name = "CL_PROFILING_INFO_NOT_AVAILABLE";
      break;
    case CL_INVALID_VALUE:
      name = "CL_INVALID_VALUE";
      break;
    case CL_INVALID_PLATFORM:
      name = "CL_INVALID_PLATFORM";
      break;
    case CL_INVALID_DEVICE:
      name = "CL_INVALID_DEVICE";
      break;
    case CL_INVALID_CONTEXT:
      name = "CL_INVALID_CONTEXT";
      break;
    case CL_INVALID_COMMAND_QUEUE:
      name = "CL_INVALID_COMMAND_QUEUE";
      break;
    case CL_INVALID_MEM_OBJECT:
      name = "CL_INVALID_MEM_OBJECT";
      break;
    case CL_INVALID_EVENT:
      name = "CL_INVALID_EVENT";
      break;
    case CL_INVALID_OPERATION:
      name = "CL_INVALID_OPERATION";
      break;
    case CL_INVALID_BUFFER_SIZE:
      name = "CL_INVALID_BUFFER_SIZE";
      break;
    case -1001:
      name = "CL_PLATFORM_NOT_FOUND_KHR";
      break;
    default:
      break;
  }
  return std::string(name) + " (" + std::to_string(code) + ")";
}

}  // namespace kwb::opencl
