// GEMM, reference optimized opencl implementation: C = A B tiled in local memory, each work-item computing four
// outputs.
//
//   gemm_tiled  a work-group of 32 x 8 work-items owns a 32 x 32 tile of C. For each depth step of 32 it copies a
//               32 x 32 tile of A and one of B into local memory (each work-item four elements of each, adjacent
//               work-items reading adjacent addresses), waits at a barrier, and then each work-item adds 32 products
//               to each of its four accumulators (rows ty, ty + 8, ty + 16, ty + 24 of the tile, column tx), reading
//               one B value from local memory for four multiply-adds.
//
// Compared with the naive baseline each element of A and B is read from global memory once per work-group instead
// of once per work-item: 32 times fewer global reads, and the column walk over B becomes a row copy. Elements
// outside A or B (the edge tiles of 67 x 129 x 45, or a k no tile divides) are loaded as 0, whose products add
// exactly 0, and only in-range outputs are stored. Each c[i, j] is still one float accumulator summed over p in
// order (a zero product changes no sum), so the recursive-summation bound the tolerance is derived from applies
// unchanged.
#include <CL/cl.h>
#include <kwb/kernel.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

KWB_CANDIDATE_ABI

namespace {

// Dimension 0 of the range runs over the tile's columns (tx, 32 work-items), dimension 1 over its row groups
// (ty, 8 work-items); one work-group per 32 x 32 tile of C.
constexpr const char* k_source = R"CLC(
#define TS 32
#define ROWS_PER_ITEM 4
#define TY (TS / ROWS_PER_ITEM)

__kernel __attribute__((reqd_work_group_size(TS, TY, 1)))
void gemm_tiled(__global const float* restrict a, __global const float* restrict b, __global float* restrict c,
                const uint m, const uint k, const uint n) {
  __local float a_tile[TS][TS];
  __local float b_tile[TS][TS];
  const uint tx = get_local_id(0);
  const uint ty = get_local_id(1);
  const uint row0 = get_group_id(1) * TS;
  const uint col = get_group_id(0) * TS + tx;

  float acc[ROWS_PER_ITEM];
  for (uint r = 0; r < ROWS_PER_ITEM; ++r) acc[r] = 0.0f;

  for (uint p0 = 0; p0 < k; p0 += TS) {
    for (uint r = 0; r < ROWS_PER_ITEM; ++r) {
      const uint lr = ty + r * TY;
      const uint a_row = row0 + lr, a_col = p0 + tx;
      a_tile[lr][tx] = (a_row < m && a_col < k) ? a[(size_t)a_row * k + a_col] : 0.0f;
      const uint b_row = p0 + lr;
      b_tile[lr][tx] = (b_row < k && col < n) ? b[(size_t)b_row * n + col] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint q = 0; q < TS; ++q) {
      const float bv = b_tile[q][tx];
      for (uint r = 0; r < ROWS_PER_ITEM; ++r) acc[r] += a_tile[ty + r * TY][q] * bv;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  for (uint r = 0; r < ROWS_PER_ITEM; ++r) {
    const uint c_row = row0 + ty + r * TY;
    if (c_row < m && col < n) c[(size_t)c_row * n + col] = acc[r];
  }
}
)CLC";

// The kernel's fixed geometry (TS and TY above).
constexpr size_t k_tile = 32;
constexpr size_t k_items_y = 8;

// What kwb_setup prepares for every call.
struct State {
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
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

// Whether the kernel and the device allow a 32 x 8 work-group (256 work-items: any GPU, and PoCL's CPU device).
bool geometry_fits(cl_kernel kernel, cl_device_id device) {
  size_t kernel_limit = 0;
  if (clGetKernelWorkGroupInfo(kernel, device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kernel_limit, &kernel_limit,
                               nullptr) != CL_SUCCESS) {
    return false;
  }
  size_t item_sizes[3] = {};
  if (clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof item_sizes, item_sizes, nullptr) !=
      CL_SUCCESS) {
    return false;
  }
  return k_tile * k_items_y <= kernel_limit && k_tile <= item_sizes[0] && k_items_y <= item_sizes[1];
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
    // The kernel takes m, k, n as uint and adds up to a tile to them without overflow.
    if (t.shape[d] < 0 || t.shape[d] > UINT32_MAX / 2) return false;
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

}  // namespace

// Returns 1 when the backend is not OpenCL, 2 when the program does not build (the log is on stderr), 3 when the
// kernel cannot be created or the device does not allow its work-group.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
  const auto context = static_cast<cl_context>(ctx->device_context);
  const auto device = static_cast<cl_device_id>(ctx->device);
  g_state.program = build(context, device, k_source);
  if (g_state.program == nullptr) return 2;
  cl_int err = CL_SUCCESS;
  g_state.kernel = clCreateKernel(g_state.program, "gemm_tiled", &err);
  if (err != CL_SUCCESS) return 3;
  return geometry_fits(g_state.kernel, device) ? 0 : 3;
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
  const size_t tiles_x = (static_cast<size_t>(p->n) + k_tile - 1) / k_tile;
  const size_t tiles_y = (static_cast<size_t>(p->m) + k_tile - 1) / k_tile;
  const size_t local[2] = {k_tile, k_items_y};
  const size_t global[2] = {tiles_x * k_tile, tiles_y * k_items_y};
  // No clFinish: kwb waits for the queue to drain inside the timed region.
  if (clEnqueueNDRangeKernel(queue, kernel, 2, nullptr, global, local, 0, nullptr, nullptr) != CL_SUCCESS) return 3;
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  if (g_state.kernel != nullptr) clReleaseKernel(g_state.kernel);
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  g_state = State{};
}
