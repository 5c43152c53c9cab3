// Adversarial candidate. Class: tampering with the worker's memory (its table of OpenCL functions).
// Cheat: an honest fused RMSNorm whose kwb_setup scans the worker executable's writable segments for the OpenCL
// driver's clFinish and clGetEventProfilingInfo (read from the driver's dispatch table, which every cl_* object
// points to: the functions the worker's own table holds) and overwrites them with a clFinish that waits for nothing and a profiling
// query that reports no timestamps. The worker's timer then stops before the kernel has run, the blocking read-back
// still gets the right output, and the call has no device time to contradict it. Found by review: it passed compare
// against the fused kernel at +99.85% on dram before the table was sealed.
// Defense: the worker keeps the table on a page of its own, read-only and sealed (mseal) before the implementation
// is loaded, and reaches it by its fixed address; the write faults. A call without device time also fails
// timing_plausible.
// Expected reason: crashed (the SIGSEGV of the write into the sealed page), kwb check, opencl backend.
#include <CL/cl.h>
#include <CL/cl_icd.h>
#include <link.h>
#include <kwb/kernel.h>

#include "rmsnorm_opencl_common.h"

#include <cstddef>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// Stand-ins for the worker's: a clFinish that waits for nothing, and a profiling query that says "no timestamps".
cl_int CL_API_CALL fake_finish(cl_command_queue) { return CL_SUCCESS; }
cl_int CL_API_CALL fake_profiling_info(cl_event, cl_profiling_info, size_t, void*, size_t*) {
  return CL_PROFILING_INFO_NOT_AVAILABLE;
}

// Every writable word of the worker executable that holds the driver's clFinish or clGetEventProfilingInfo is
// replaced by the stand-in: the worker's table of real OpenCL functions, wherever it is.
int patch_worker(dl_phdr_info* info, size_t, void* data) {
  if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') return 0;  // the main program only
  void** targets = static_cast<void**>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_W) == 0) continue;
    auto* words = reinterpret_cast<void**>(info->dlpi_addr + ph.p_vaddr);
    for (size_t k = 0; k < ph.p_memsz / sizeof(void*); ++k) {
      if (words[k] == targets[0]) words[k] = reinterpret_cast<void*>(&fake_finish);
      if (words[k] == targets[1]) words[k] = reinterpret_cast<void*>(&fake_profiling_info);
    }
  }
  return 1;
}

void patch(cl_context context) {
  const cl_icd_dispatch* table = *reinterpret_cast<const cl_icd_dispatch* const*>(context);
  void* targets[2] = {reinterpret_cast<void*>(table->clFinish), reinterpret_cast<void*>(table->clGetEventProfilingInfo)};
  dl_iterate_phdr(patch_worker, targets);
}

}  // namespace

namespace {

using namespace corpus_cl;

// What kwb_setup prepares for every call.
struct State {
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  size_t max_local = 1;  // largest power of two <= k_max_local that the kernel may use on this device
};
State g_state;

}  // namespace

// Returns 1 when the backend is not OpenCL, 2 when the program does not build (the log is on stderr), 3 when the
// kernel cannot be created or queried.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
  const auto context = static_cast<cl_context>(ctx->device_context);
  const auto device = static_cast<cl_device_id>(ctx->device);
  g_state.program = build(context, device, k_fused_source);
  if (g_state.program == nullptr) return 2;
  cl_int err = CL_SUCCESS;
  g_state.kernel = clCreateKernel(g_state.program, "rmsnorm_fused", &err);
  if (err != CL_SUCCESS) return 3;
  const std::optional<size_t> max_local = max_local_size(g_state.kernel, device);
  if (!max_local) return 3;
  g_state.max_local = *max_local;
  patch(context);
  return 0;
}

// Returns 1 when the call does not match the task signature, 3 when OpenCL refuses an argument or the launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rmsnorm> p = unpack(*call);
  if (!p) return 1;
  if (p->rows == 0 || p->cols == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const cl_uint cols = static_cast<cl_uint>(p->cols);
  const size_t local = local_size_for(p->cols, g_state.max_local);
  const size_t global = static_cast<size_t>(p->rows) * local;
  cl_kernel k = g_state.kernel;
  cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &p->x);
  err |= clSetKernelArg(k, 1, sizeof(cl_mem), &p->weight);
  err |= clSetKernelArg(k, 2, sizeof(cl_mem), &p->y);
  err |= clSetKernelArg(k, 3, sizeof cols, &cols);
  err |= clSetKernelArg(k, 4, sizeof p->eps, &p->eps);
  err |= clSetKernelArg(k, 5, local * sizeof(float), nullptr);
  if (err != CL_SUCCESS) return 3;
  // No clFinish: kwb waits for the queue to drain inside the timed region.
  if (clEnqueueNDRangeKernel(queue, k, 1, nullptr, &global, &local, 0, nullptr, nullptr) != CL_SUCCESS) return 3;
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  if (g_state.kernel != nullptr) clReleaseKernel(g_state.kernel);
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  g_state = State{};
}
