// The OpenCL entry points the worker itself uses. They are first resolved from the ICD loader (libOpenCL.so.1) with
// dlopen/dlsym, which is enough to find a platform and make the context and queue; then, before any implementation
// is loaded, replaced by the driver's own functions taken from its ICD dispatch table (adopt_driver_table), and the
// table that holds them is sealed. Three reasons: a worker without OpenCL on its machine must still start (and say
// "opencl is unavailable" instead of failing to load); the worker exports wrappers under the same names for the
// implementation to bind to and points the driver's dispatch table at them (opencl_intercept.cpp), so its own
// calls must reach the real functions, not the wrappers; and the loader calls through that dispatch table, which
// the driver keeps in writable memory, so no call of kwb's may go through it once candidate code runs.
#pragma once

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
// clCreateCommandQueue and clEnqueueTask are deprecated since 2.0, and implementations still call them: the worker
// wraps them too.
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <CL/cl_icd.h>

#include <string>

namespace kwb::opencl {

struct Api {
  decltype(&::clGetPlatformIDs) GetPlatformIDs;
  decltype(&::clGetPlatformInfo) GetPlatformInfo;
  decltype(&::clGetDeviceIDs) GetDeviceIDs;
  decltype(&::clGetDeviceInfo) GetDeviceInfo;
  decltype(&::clCreateContext) CreateContext;
  decltype(&::clReleaseContext) ReleaseContext;
  decltype(&::clCreateCommandQueue) CreateCommandQueue;
  decltype(&::clCreateCommandQueueWithProperties) CreateCommandQueueWithProperties;
  decltype(&::clRetainCommandQueue) RetainCommandQueue;
  decltype(&::clReleaseCommandQueue) ReleaseCommandQueue;
  decltype(&::clCreateBuffer) CreateBuffer;
  decltype(&::clCreateSubBuffer) CreateSubBuffer;
  decltype(&::clReleaseMemObject) ReleaseMemObject;
  decltype(&::clEnqueueWriteBuffer) EnqueueWriteBuffer;
  decltype(&::clEnqueueReadBuffer) EnqueueReadBuffer;
  decltype(&::clEnqueueCopyBuffer) EnqueueCopyBuffer;
  decltype(&::clEnqueueFillBuffer) EnqueueFillBuffer;
  decltype(&::clEnqueueNDRangeKernel) EnqueueNDRangeKernel;
  decltype(&::clEnqueueTask) EnqueueTask;
  decltype(&::clEnqueueMarkerWithWaitList) EnqueueMarkerWithWaitList;
  decltype(&::clFinish) Finish;
  decltype(&::clGetEventProfilingInfo) GetEventProfilingInfo;
  decltype(&::clRetainEvent) RetainEvent;
  decltype(&::clReleaseEvent) ReleaseEvent;
  decltype(&::clGetKernelInfo) GetKernelInfo;
};

// The functions, opened once from the loader; nullptr when there is no loader or it lacks an entry point, with `why`
// set. After adopt_driver_table, the driver's.
const Api* api(std::string* why = nullptr);

// Makes every entry of api() the driver's own function from `driver` (the dispatch table every object of the chosen
// platform points to), then seals the page that holds them: read-only, and mseal'ed where the kernel has it. Call it
// once, after the context and queue exist and before any implementation is loaded.
void adopt_driver_table(const cl_icd_dispatch& driver);

// "CL_OUT_OF_RESOURCES (-5)".
std::string error_name(cl_int code);

}  // namespace kwb::opencl
