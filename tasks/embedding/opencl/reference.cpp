// Embedding lookup, reference optimized opencl implementation: one work-item per output element, a 2D launch of
// (dim, n), each widening its f16 with OpenCL C's vload_half (core since OpenCL 1.0, no cl_khr_fp16 needed; F16C
// on PoCL's CPU device, a conversion instruction on a GPU). Adjacent work-items read adjacent elements of a row and
// write adjacent outputs, so the gather is coalesced on a GPU and vectorized by PoCL; only the rows the ids select
// are touched.
//
// An id outside [0, vocab), which no case draws (the oracle refuses one), gives a row of NaN rather than a read
// outside the table: the device cannot return an error code, and the host would have to read the ids back.
#include <CL/cl.h>
#include <kwb/kernel.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

KWB_CANDIDATE_ABI

namespace {

// The global size is rounded up to whole work-groups in the first dimension, so the last group of a row has
// work-items past dim; they return at once.
constexpr const char* k_source = R"CLC(
__kernel void embedding_rows(__global const half* restrict table, __global const int* restrict ids,
                             __global float* restrict out, const uint vocab, const uint dim, const uint n) {
  const uint j = get_global_id(0);
  const uint i = get_global_id(1);
  if (j >= dim || i >= n) return;
  const int row = ids[i];
  const size_t dst = (size_t)i * dim + j;
  if (row < 0 || row >= (int)vocab) {
    out[dst] = NAN;
    return;
  }
  out[dst] = vload_half((size_t)row * dim + j, table);
}
)CLC";

// Work-items per group along a row: 64 consecutive elements, within any OpenCL device's limits.
constexpr size_t k_max_local = 64;

// What kwb_setup prepares for every call.
struct State {
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  size_t local = 1;  // largest power of two <= k_max_local that the kernel may use on this device
};
State g_state;

// The OpenCL C source built for `device`; on failure the build log goes to stderr and the result is null.
cl_program build(cl_context context, cl_device_id device, const char* source) {
  cl_int err = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context, 1, &source, nullptr, &err);
  if (err != CL_SUCCESS) {
    std::fprintf(stderr, "embedding: clCreateProgramWithSource failed (%d)\n", err);
    return nullptr;
  }
  err = clBuildProgram(program, 1, &device, nullptr, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::vector<char> log(size + 1, '\0');
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    std::fprintf(stderr, "embedding: clBuildProgram failed (%d):\n%s\n", err, log.data());
    clReleaseProgram(program);
    return nullptr;
  }
  return program;
}

// The largest power of two <= k_max_local within both the kernel's and the device's work-group limits.
std::optional<size_t> max_local_size(cl_kernel kernel, cl_device_id device) {
  size_t kernel_limit = 0;
  if (clGetKernelWorkGroupInfo(kernel, device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kernel_limit, &kernel_limit,
                               nullptr) != CL_SUCCESS) {
    return std::nullopt;
  }
  size_t item_sizes[3] = {};
  if (clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof item_sizes, item_sizes, nullptr) !=
      CL_SUCCESS) {
    return std::nullopt;
  }
  size_t local = k_max_local;
  while (local > 1 && (local > kernel_limit || local > item_sizes[0])) local /= 2;
  return local;
}

// The call's tensors, checked against the task signature: table [vocab, dim] f16 and ids [n] i32 in, out [n, dim]
// f32, compact row-major OpenCL buffers. Anything else is refused rather than guessed at.
struct Lookup {
  cl_mem table;
  cl_mem ids;
  cl_mem out;
  int64_t vocab;
  int64_t dim;
  int64_t n;
};

// A cl_mem cannot be offset from the host, so a nonzero byte_offset is refused too (kwb passes 0).
bool is_compact_opencl(const DLTensor& t, int32_t ndim, uint8_t code, uint8_t bits) {
  if (t.device.device_type != kDLOpenCL || t.ndim != ndim || t.byte_offset != 0) return false;
  if (t.dtype.code != code || t.dtype.bits != bits || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0 || t.shape[d] > INT32_MAX) return false;  // the kernel takes the dims as uint, ids as int
  }
  return t.strides == nullptr;  // DLPack: NULL strides mean compact row-major
}

std::optional<Lookup> unpack(const kwb_call& call) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& table = call.inputs[0];
  const DLTensor& ids = call.inputs[1];
  const DLTensor& out = call.outputs[0];
  if (!is_compact_opencl(table, 2, kDLFloat, 16) || !is_compact_opencl(ids, 1, kDLInt, 32) ||
      !is_compact_opencl(out, 2, kDLFloat, 32)) {
    return std::nullopt;
  }
  if (out.shape[0] != ids.shape[0] || out.shape[1] != table.shape[1]) return std::nullopt;
  return Lookup{static_cast<cl_mem>(table.data), static_cast<cl_mem>(ids.data), static_cast<cl_mem>(out.data),
                table.shape[0], table.shape[1], ids.shape[0]};
}

}  // namespace

// Returns 1 when the backend is not OpenCL, 2 when the program does not build (the log is on stderr), 3 when the
// kernel cannot be created or queried.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
  const auto context = static_cast<cl_context>(ctx->device_context);
  const auto device = static_cast<cl_device_id>(ctx->device);
  g_state.program = build(context, device, k_source);
  if (g_state.program == nullptr) return 2;
  cl_int err = CL_SUCCESS;
  g_state.kernel = clCreateKernel(g_state.program, "embedding_rows", &err);
  if (err != CL_SUCCESS) return 3;
  const std::optional<size_t> local = max_local_size(g_state.kernel, device);
  if (!local) return 3;
  g_state.local = *local;
  return 0;
}

// Returns 1 when the call does not match the task signature, 3 when OpenCL refuses an argument or the launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Lookup> p = unpack(*call);
  if (!p) return 1;
  if (p->n == 0 || p->dim == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const cl_uint vocab = static_cast<cl_uint>(p->vocab), dim = static_cast<cl_uint>(p->dim);
  const cl_uint n = static_cast<cl_uint>(p->n);
  const size_t local[2] = {g_state.local, 1};
  const size_t global[2] = {(static_cast<size_t>(dim) + local[0] - 1) / local[0] * local[0], static_cast<size_t>(n)};
  cl_kernel k = g_state.kernel;
  cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &p->table);
  err |= clSetKernelArg(k, 1, sizeof(cl_mem), &p->ids);
  err |= clSetKernelArg(k, 2, sizeof(cl_mem), &p->out);
  err |= clSetKernelArg(k, 3, sizeof vocab, &vocab);
  err |= clSetKernelArg(k, 4, sizeof dim, &dim);
  err |= clSetKernelArg(k, 5, sizeof n, &n);
  if (err != CL_SUCCESS) return 3;
  // No clFinish: kwb waits for the queue to drain inside the timed region.
  if (clEnqueueNDRangeKernel(queue, k, 2, nullptr, global, local, 0, nullptr, nullptr) != CL_SUCCESS) return 3;
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  if (g_state.kernel != nullptr) clReleaseKernel(g_state.kernel);
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  g_state = State{};
}
