// GEMM, baseline opencl implementation: C = A B with the textbook kernel, one work-item per output element,
// c[i, j] = sum_p a[i, p] * b[p, j] accumulated in one float, p innermost, exactly as the definition reads.
//
// It is the "before" the tiled reference (opencl/tiled.cpp) is measured against. Every work-item reads a whole
// row of A and a whole column of B from global memory: nothing is shared between the work-items of a work-group,
// so A and B are each read n and m times over, and the column walk strides n floats per step. Each c[i, j] is the
// same sequential sum as the cpu baseline's, so the recursive-summation bound the tolerance is derived from
// applies unchanged.
#include <CL/cl.h>
#include <kwb/kernel.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

KWB_CANDIDATE_ABI

namespace {

// A 2-D range: dimension 0 runs over the columns j (adjacent work-items read adjacent b[p, j] and write adjacent
// c[i, j]), dimension 1 over the rows i. The global size is rounded up to whole work-groups, so work-items past the
// edge return at once.
constexpr const char* k_source = R"CLC(
__kernel void gemm_naive(__global const float* restrict a, __global const float* restrict b,
                         __global float* restrict c, const uint m, const uint k, const uint n) {
  const uint j = get_global_id(0);
  const uint i = get_global_id(1);
  if (i >= m || j >= n) return;
  float sum = 0.0f;
  for (uint p = 0; p < k; ++p) sum += a[(size_t)i * k + p] * b[(size_t)p * n + j];
  c[(size_t)i * n + j] = sum;
}
)CLC";

// 16 x 16 work-items per work-group (256, within any OpenCL device's limit); smaller when the device says so.
constexpr size_t k_side = 16;

// What kwb_setup prepares for every call.
struct State {
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  size_t side = 1;  // the work-group is side x side work-items
};
State g_state;

// The OpenCL C source built for `device`; on failure the build log goes to stderr and the result is null.
cl_program build(cl_context context, cl_device_id device, const char* source) {
  cl_int err = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context, 1, &source, nullptr, &err);
  if (err != CL_SUCCESS) {
    std::fprintf(stderr, "gemm: clCreateProgramWithSource failed (%d)\n", err);
    return nullptr;
  }
  err = clBuildProgram(program, 1, &device, nullptr, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::vector<char> log(size + 1, '\0');
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    std::fprintf(stderr, "gemm: clBuildProgram failed (%d):\n%s\n", err, log.data());
    clReleaseProgram(program);
    return nullptr;
  }
  return program;
}

// The largest power of two <= k_side whose square the kernel and the device allow as a work-group.
std::optional<size_t> side_for(cl_kernel kernel, cl_device_id device) {
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
  size_t side = k_side;
  while (side > 1 && (side * side > kernel_limit || side > item_sizes[0] || side > item_sizes[1])) side /= 2;
  return side;
}

// The call's tensors, checked against the task signature: a [m, k] and b [k, n] in, c [m, n] out, all f32,
// compact row-major, OpenCL buffers. Anything else is refused rather than guessed at.
struct Gemm {
  cl_mem a;
  cl_mem b;
  cl_mem c;
  int64_t m;
  int64_t k;
  int64_t n;
};

// A cl_mem cannot be offset from the host, so a nonzero byte_offset is refused too (kwb passes 0).
bool is_compact_opencl_f32(const DLTensor& t, int32_t ndim) {
  if (t.device.device_type != kDLOpenCL || t.ndim != ndim || t.byte_offset != 0) return false;
  if (t.dtype.code != kDLFloat || t.dtype.bits != 32 || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0 || t.shape[d] > UINT32_MAX / 2) return false;  // the kernel takes m, k, n as uint
  }
  if (t.strides == nullptr) return true;  // DLPack: NULL strides mean compact row-major
  int64_t expected = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;  // a size-1 axis may have any stride
    expected *= t.shape[d];
  }
  return true;
}

std::optional<Gemm> unpack(const kwb_call& call) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& a = call.inputs[0];
  const DLTensor& b = call.inputs[1];
  const DLTensor& c = call.outputs[0];
  if (!is_compact_opencl_f32(a, 2) || !is_compact_opencl_f32(b, 2) || !is_compact_opencl_f32(c, 2)) {
    return std::nullopt;
  }
  if (b.shape[0] != a.shape[1] || c.shape[0] != a.shape[0] || c.shape[1] != b.shape[1]) return std::nullopt;
  return Gemm{static_cast<cl_mem>(a.data), static_cast<cl_mem>(b.data), static_cast<cl_mem>(c.data), a.shape[0],
              a.shape[1], b.shape[1]};
}

size_t round_up(int64_t items, size_t multiple) {
  return (static_cast<size_t>(items) + multiple - 1) / multiple * multiple;
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
  g_state.kernel = clCreateKernel(g_state.program, "gemm_naive", &err);
  if (err != CL_SUCCESS) return 3;
  const std::optional<size_t> side = side_for(g_state.kernel, device);
  if (!side) return 3;
  g_state.side = *side;
  return 0;
}

// Returns 1 when the call does not match the task signature, 3 when OpenCL refuses an argument or the launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Gemm> p = unpack(*call);
  if (!p) return 1;
  if (p->m == 0 || p->n == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const cl_uint m = static_cast<cl_uint>(p->m), k = static_cast<cl_uint>(p->k), n = static_cast<cl_uint>(p->n);
  cl_kernel kernel = g_state.kernel;
  cl_int err = clSetKernelArg(kernel, 0, sizeof(cl_mem), &p->a);
  err |= clSetKernelArg(kernel, 1, sizeof(cl_mem), &p->b);
  err |= clSetKernelArg(kernel, 2, sizeof(cl_mem), &p->c);
  err |= clSetKernelArg(kernel, 3, sizeof m, &m);
  err |= clSetKernelArg(kernel, 4, sizeof k, &k);
  err |= clSetKernelArg(kernel, 5, sizeof n, &n);
  if (err != CL_SUCCESS) return 3;
  const size_t local[2] = {g_state.side, g_state.side};
  const size_t global[2] = {round_up(p->n, g_state.side), round_up(p->m, g_state.side)};
  // No clFinish: kwb waits for the queue to drain inside the timed region.
  return clEnqueueNDRangeKernel(queue, kernel, 2, nullptr, global, local, 0, nullptr, nullptr) == CL_SUCCESS ? 0 : 3;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  if (g_state.kernel != nullptr) clReleaseKernel(g_state.kernel);
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  g_state = State{};
}
