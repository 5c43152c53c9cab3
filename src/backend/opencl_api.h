// The OpenCL entry points the worker itself uses, resolved from the ICD loader (libOpenCL.so.1) with dlopen/dlsym.
// Two reasons not to link the loader: a worker without OpenCL on its machine must still start (and say "opencl is
// unavailable" instead of failing to load), and the worker exports wrappers under the same names for the
// implementation to bind to (opencl_intercept.cpp); its own calls must reach the real functions, not the wrappers.
#pragma once

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
// clCreateCommandQueue and clEnqueueTask are deprecated since 2.0, and implementations still call them: the worker
// wraps them too.
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>

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

// The loader's functions, opened once; nullptr when there is no loader or it lacks an entry point, with `why` set.
const Api* api(std::string* why = nullptr);

// "CL_OUT_OF_RESOURCES (-5)".
std::string error_name(cl_int code);

}  // namespace kwb::opencl
