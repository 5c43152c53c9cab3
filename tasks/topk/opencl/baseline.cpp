// Top-k, baseline opencl implementation: what an eager framework's fallback does on a device, a full sort of every
// row followed by a slice, `order = argsort(x, descending, stable); values = x[order[:k]]; indices = order[:k]`:
//
//   1. topk_make_pairs     (key, index) for every element of x, each row padded to a power of two n_pad
//                          (two rows*n_pad scratch buffers)
//   2. topk_bitonic_step   one compare-exchange stage of a bitonic sorting network over each row, launched
//                          log2(n_pad) (log2(n_pad) + 1) / 2 times: value descending, ties by ascending index
//   3. topk_copy_values    values[r, j]  = x[r, index[r, j]], j < k
//   4. topk_copy_indices   indices[r, j] = index[r, j], j < k
//
// Deliberately wasteful: all n elements of a row are sorted (n log^2 n compare-exchanges, most of them deciding the
// order of entries that are then thrown away) where only k are wanted, in 153 launches for a 128256-entry row, and
// the pairs are written and read back at every stage. The scratch buffers are created on the first call of a shape
// and kept (grown, never shrunk), as a framework's caching allocator would. It is the "before" that the selection
// reference (opencl/select.cpp) is measured against.
//
// Keys: each float's bits mapped to an unsigned integer that orders as the float does (negative values' bits
// inverted, positive values' sign bit set; -0 first made +0, so that -0 and +0 tie as the task's order says). The
// comparisons are then integer ones, which no flush-to-zero mode can change: subnormals order as they should.
// Padding entries get key 0, below every real key (-inf's is 0x007fffff), and indices past n, so they sort last.
// The values written are x's own bits, copied, never recomputed.
#include <CL/cl.h>
#include <kwb/kernel.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string_view>
#include <vector>

KWB_CANDIDATE_ABI

namespace {

// Element-wise kernels take the element count: their global size is rounded up to a whole number of work-groups,
// so the last group has work-items past the end. x and values are read and written as their bits (uint).
constexpr const char* k_source = R"CLC(
uint order_key(const uint bits) {
  const uint b = (bits << 1) == 0u ? 0u : bits;  // -0 ranks as +0: a tie
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__kernel void topk_make_pairs(__global const uint* restrict x, __global uint* restrict keys,
                              __global uint* restrict ids, const uint n, const uint n_pad, const ulong total) {
  const size_t i = get_global_id(0);
  if (i >= total) return;
  const size_t r = i / n_pad;
  const uint c = (uint)(i % n_pad);
  keys[i] = c < n ? order_key(x[r * n + c]) : 0u;
  ids[i] = c;
}

// One stage (block size `size`, distance `dist`) of the bitonic network over each row of n_pad pairs. Within a
// block whose bit `size` is clear the pair ends in the task's order (the one ranking first at the lower position),
// otherwise in the reverse order; the last pass (size = n_pad) leaves every row in the task's order.
__kernel void topk_bitonic_step(__global uint* restrict keys, __global uint* restrict ids, const uint n_pad,
                                const uint size, const uint dist, const ulong total) {
  const size_t i = get_global_id(0);
  if (i >= total) return;
  const size_t row = i / n_pad;
  const uint c = (uint)(i % n_pad);
  const uint partner = c ^ dist;
  if (partner <= c) return;
  const size_t a = row * n_pad + c;
  const size_t b = row * n_pad + partner;
  const uint ka = keys[a], kb = keys[b], ia = ids[a], ib = ids[b];
  const bool b_first = kb > ka || (kb == ka && ib < ia);
  const bool want_task_order = (c & size) == 0u;
  if (b_first == want_task_order) {
    keys[a] = kb;
    keys[b] = ka;
    ids[a] = ib;
    ids[b] = ia;
  }
}

__kernel void topk_copy_values(__global const uint* restrict x, __global const uint* restrict ids,
                               __global uint* restrict values, const uint n, const uint n_pad, const uint k,
                               const ulong total) {
  const size_t i = get_global_id(0);
  if (i >= total) return;
  const size_t r = i / k;
  const uint j = (uint)(i % k);
  values[i] = x[r * n + ids[r * n_pad + j]];
}

__kernel void topk_copy_indices(__global const uint* restrict ids, __global long* restrict indices,
                                const uint n_pad, const uint k, const ulong total) {
  const size_t i = get_global_id(0);
  if (i >= total) return;
  const size_t r = i / k;
  const uint j = (uint)(i % k);
  indices[i] = (long)ids[r * n_pad + j];
}
)CLC";

// The four kernels.
enum Step { k_make_pairs, k_bitonic_step, k_copy_values, k_copy_indices, k_steps };
constexpr const char* k_names[k_steps] = {"topk_make_pairs", "topk_bitonic_step", "topk_copy_values",
                                          "topk_copy_indices"};

// The element-wise kernels' work-group size.
constexpr size_t k_max_local = 256;

// What kwb_setup prepares, plus the scratch buffers the calls grow.
struct State {
  cl_context context = nullptr;
  cl_program program = nullptr;
  cl_kernel kernels[k_steps] = {};
  size_t max_local[k_steps] = {};  // per kernel: largest power of two <= k_max_local it may use on this device
  cl_mem keys = nullptr;           // rows*n_pad order keys
  size_t keys_bytes = 0;
  cl_mem ids = nullptr;            // rows*n_pad column indices
  size_t ids_bytes = 0;
};
State g_state;

// The OpenCL C source built for `device`; on failure the build log goes to stderr and the result is null.
cl_program build(cl_context context, cl_device_id device, const char* source) {
  cl_int err = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context, 1, &source, nullptr, &err);
  if (err != CL_SUCCESS) {
    std::fprintf(stderr, "topk: clCreateProgramWithSource failed (%d)\n", err);
    return nullptr;
  }
  err = clBuildProgram(program, 1, &device, nullptr, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::vector<char> log(size + 1, '\0');
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    std::fprintf(stderr, "topk: clBuildProgram failed (%d):\n%s\n", err, log.data());
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

// `buffer` holding at least `bytes`: kept when it is big enough, replaced otherwise. False when OpenCL refuses.
bool ensure_scratch(cl_mem& buffer, size_t& capacity, size_t bytes) {
  if (buffer != nullptr && capacity >= bytes) return true;
  if (buffer != nullptr) clReleaseMemObject(buffer);  // commands still using it keep it alive until they finish
  cl_int err = CL_SUCCESS;
  buffer = clCreateBuffer(g_state.context, CL_MEM_READ_WRITE, bytes, nullptr, &err);
  capacity = err == CL_SUCCESS ? bytes : 0;
  if (err != CL_SUCCESS) buffer = nullptr;
  return err == CL_SUCCESS;
}

// Enqueues `step` over `items` work-items (rounded up to whole work-groups of `local`) on `queue`.
bool launch(cl_command_queue queue, Step step, size_t items, size_t local) {
  const size_t global = (items + local - 1) / local * local;
  return clEnqueueNDRangeKernel(queue, g_state.kernels[step], 1, nullptr, &global, &local, 0, nullptr, nullptr) ==
         CL_SUCCESS;
}

// The call's tensors, found by name and checked against the task signature: x [rows, n] f32 in; values [rows, k]
// f32 and indices [rows, k] i64 out, with 1 <= k <= n; compact row-major OpenCL buffers. Anything else is refused
// rather than guessed at.
struct TopK {
  cl_mem x;
  cl_mem values;
  cl_mem indices;
  int64_t rows;
  int64_t n;
  int64_t k;
};

// A cl_mem cannot be offset from the host, so a nonzero byte_offset is refused too (kwb passes 0).
bool is_compact_opencl(const DLTensor& t, int32_t ndim, uint8_t code, uint8_t bits) {
  if (t.device.device_type != kDLOpenCL || t.ndim != ndim || t.byte_offset != 0) return false;
  if (t.dtype.code != code || t.dtype.bits != bits || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0 || t.shape[d] > INT32_MAX) return false;  // the kernels index a row with a uint
  }
  if (t.strides == nullptr) return true;  // DLPack: NULL strides mean compact row-major
  int64_t expected = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;  // a size-1 axis may have any stride
    expected *= t.shape[d];
  }
  return true;
}

const DLTensor* find(const DLTensor* tensors, const char* const* names, int32_t count, std::string_view name) {
  for (int32_t i = 0; i < count; ++i) {
    if (names[i] != nullptr && name == names[i]) return &tensors[i];
  }
  return nullptr;
}

std::optional<TopK> unpack(const kwb_call& call) {
  const DLTensor* x = find(call.inputs, call.input_names, call.num_inputs, "x");
  const DLTensor* values = find(call.outputs, call.output_names, call.num_outputs, "values");
  const DLTensor* indices = find(call.outputs, call.output_names, call.num_outputs, "indices");
  if (x == nullptr || values == nullptr || indices == nullptr) return std::nullopt;
  if (!is_compact_opencl(*x, 2, kDLFloat, 32) || !is_compact_opencl(*values, 2, kDLFloat, 32) ||
      !is_compact_opencl(*indices, 2, kDLInt, 64)) {
    return std::nullopt;
  }
  const int64_t rows = x->shape[0], n = x->shape[1], k = values->shape[1];
  if (values->shape[0] != rows || indices->shape[0] != rows || indices->shape[1] != k || k < 1 || k > n) {
    return std::nullopt;
  }
  return TopK{static_cast<cl_mem>(x->data), static_cast<cl_mem>(values->data), static_cast<cl_mem>(indices->data),
              rows, n, k};
}

}  // namespace

// Returns 1 when the backend is not OpenCL, 2 when the program does not build (the log is on stderr), 3 when a
// kernel cannot be created or queried.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
  g_state.context = static_cast<cl_context>(ctx->device_context);
  const auto device = static_cast<cl_device_id>(ctx->device);
  g_state.program = build(g_state.context, device, k_source);
  if (g_state.program == nullptr) return 2;
  for (int step = 0; step < k_steps; ++step) {
    cl_int err = CL_SUCCESS;
    g_state.kernels[step] = clCreateKernel(g_state.program, k_names[step], &err);
    if (err != CL_SUCCESS) return 3;
    const std::optional<size_t> max_local = max_local_size(g_state.kernels[step], device);
    if (!max_local) return 3;
    g_state.max_local[step] = *max_local;
  }
  return 0;
}

// Returns 1 when the call does not match the task signature (or k is outside 1..n), 2 when a scratch buffer cannot
// be created, 3 when OpenCL refuses an argument or a launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<TopK> p = unpack(*call);
  if (!p) return 1;
  if (p->rows == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  cl_uint n_pad = 1;
  while (n_pad < static_cast<cl_uint>(p->n)) n_pad *= 2;
  const cl_ulong total = static_cast<cl_ulong>(p->rows) * n_pad;
  const cl_ulong total_out = static_cast<cl_ulong>(p->rows * p->k);
  const cl_uint n_u = static_cast<cl_uint>(p->n);
  const cl_uint k_u = static_cast<cl_uint>(p->k);
  if (!ensure_scratch(g_state.keys, g_state.keys_bytes, total * sizeof(cl_uint)) ||
      !ensure_scratch(g_state.ids, g_state.ids_bytes, total * sizeof(cl_uint))) {
    return 2;
  }
  cl_kernel* k = g_state.kernels;
  cl_mem keys = g_state.keys, ids = g_state.ids;

  cl_int err = clSetKernelArg(k[k_make_pairs], 0, sizeof(cl_mem), &p->x);
  err |= clSetKernelArg(k[k_make_pairs], 1, sizeof(cl_mem), &keys);
  err |= clSetKernelArg(k[k_make_pairs], 2, sizeof(cl_mem), &ids);
  err |= clSetKernelArg(k[k_make_pairs], 3, sizeof n_u, &n_u);
  err |= clSetKernelArg(k[k_make_pairs], 4, sizeof n_pad, &n_pad);
  err |= clSetKernelArg(k[k_make_pairs], 5, sizeof total, &total);

  err |= clSetKernelArg(k[k_bitonic_step], 0, sizeof(cl_mem), &keys);
  err |= clSetKernelArg(k[k_bitonic_step], 1, sizeof(cl_mem), &ids);
  err |= clSetKernelArg(k[k_bitonic_step], 2, sizeof n_pad, &n_pad);
  err |= clSetKernelArg(k[k_bitonic_step], 5, sizeof total, &total);

  err |= clSetKernelArg(k[k_copy_values], 0, sizeof(cl_mem), &p->x);
  err |= clSetKernelArg(k[k_copy_values], 1, sizeof(cl_mem), &ids);
  err |= clSetKernelArg(k[k_copy_values], 2, sizeof(cl_mem), &p->values);
  err |= clSetKernelArg(k[k_copy_values], 3, sizeof n_u, &n_u);
  err |= clSetKernelArg(k[k_copy_values], 4, sizeof n_pad, &n_pad);
  err |= clSetKernelArg(k[k_copy_values], 5, sizeof k_u, &k_u);
  err |= clSetKernelArg(k[k_copy_values], 6, sizeof total_out, &total_out);

  err |= clSetKernelArg(k[k_copy_indices], 0, sizeof(cl_mem), &ids);
  err |= clSetKernelArg(k[k_copy_indices], 1, sizeof(cl_mem), &p->indices);
  err |= clSetKernelArg(k[k_copy_indices], 2, sizeof n_pad, &n_pad);
  err |= clSetKernelArg(k[k_copy_indices], 3, sizeof k_u, &k_u);
  err |= clSetKernelArg(k[k_copy_indices], 4, sizeof total_out, &total_out);
  if (err != CL_SUCCESS) return 3;

  // The queue is in order, so each step sees the previous one's writes. clSetKernelArg copies its value when it is
  // called, so the stages' (size, dist) can change between enqueues. No clFinish: kwb waits for the queue to drain
  // inside the timed region.
  if (!launch(queue, k_make_pairs, total, g_state.max_local[k_make_pairs])) return 3;
  for (cl_uint size = 2; size <= n_pad; size *= 2) {
    for (cl_uint dist = size / 2; dist > 0; dist /= 2) {
      err = clSetKernelArg(k[k_bitonic_step], 3, sizeof size, &size);
      err |= clSetKernelArg(k[k_bitonic_step], 4, sizeof dist, &dist);
      if (err != CL_SUCCESS || !launch(queue, k_bitonic_step, total, g_state.max_local[k_bitonic_step])) return 3;
    }
  }
  const bool ok = launch(queue, k_copy_values, total_out, g_state.max_local[k_copy_values]) &&
                  launch(queue, k_copy_indices, total_out, g_state.max_local[k_copy_indices]);
  return ok ? 0 : 3;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  for (cl_kernel kernel : g_state.kernels) {
    if (kernel != nullptr) clReleaseKernel(kernel);
  }
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  if (g_state.keys != nullptr) clReleaseMemObject(g_state.keys);
  if (g_state.ids != nullptr) clReleaseMemObject(g_state.ids);
  g_state = State{};
}
