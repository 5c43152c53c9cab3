// Top-k, reference optimized opencl implementation: a selection, not a sort. One kernel, one work-group per row:
//
//   topk_select  1. radix select: the key of the row's k-th ranked entry, T, found 8 bits at a time from the top in
//                   four sweeps of the row, each a 256-bin histogram in local memory (atomic increments) of the
//                   entries whose key matches the bits found so far; with it, how many entries equal to T the
//                   answer keeps (take_eq >= 1; all entries above T are kept, k - take_eq of them).
//                2. gather: one more sweep in tiles of one entry per work-item. An entry above T takes the next free
//                   slot (a local atomic counter; their order does not matter yet). Entries equal to T are numbered
//                   in index order by a prefix sum over the tile, and the first take_eq of them are kept, the
//                   lowest-indexed ones, as the tie rule says; once they are found the prefix sums stop.
//                3. rank: each of the k survivors counts the survivors that rank before it (larger key, or the same
//                   key and a smaller index) and writes itself to that position of the outputs.
//
// Compared with the sorting baseline it launches once instead of up to 155 times, reads each row five times and
// writes only the k outputs, keeps no scratch buffer (the survivors, the histogram and the prefix sums are in local
// memory), and does O(n + k^2 / work-items) work per work-item instead of a full sort's O(n log^2 n) in total.
//
// Keys: each float's bits mapped to an unsigned integer that orders as the float does (negative values' bits
// inverted, positive values' sign bit set; -0 first made +0, so that -0 and +0 tie as the task's order says). The
// comparisons are then integer ones, which no flush-to-zero mode can change: subnormals order as they should. The
// values written are x's own bits, copied, never recomputed. The task's inputs hold no NaN.
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

// The local size is a power of two (the prefix sum doubles its distance at each step). hist holds 256 counters,
// scan one per work-item, sel_key and sel_idx k each; x and values are read and written as their bits (uint).
constexpr const char* k_source = R"CLC(
uint order_key(const uint bits) {
  const uint b = (bits << 1) == 0u ? 0u : bits;  // -0 ranks as +0: a tie
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__kernel void topk_select(__global const uint* restrict x, __global uint* restrict values,
                          __global long* restrict indices, const uint n, const uint k, __local uint* hist,
                          __local uint* scan, __local uint* sel_key, __local uint* sel_idx) {
  __local uint state[3];  // the key bits found so far, how many entries of that prefix are still wanted, slots taken
  const uint lid = get_local_id(0);
  const uint lsize = get_local_size(0);
  const size_t base = get_group_id(0) * (size_t)n;
  const size_t out_base = get_group_id(0) * (size_t)k;

  // 1. Radix select, 8 bits at a time from the top. Invariant: at least state[1] entries match the prefix.
  if (lid == 0) {
    state[0] = 0u;
    state[1] = k;
    state[2] = 0u;
  }
  uint mask = 0u;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (uint b = lid; b < 256u; b += lsize) hist[b] = 0u;
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint prefix = state[0];
    for (uint c = lid; c < n; c += lsize) {
      const uint key = order_key(x[base + c]);
      if ((key & mask) == prefix) atomic_inc(&hist[(key >> shift) & 255u]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
      uint wanted = state[1];
      uint digit = 255u;
      while (hist[digit] < wanted) {
        wanted -= hist[digit];
        --digit;
      }
      state[0] = prefix | (digit << shift);
      state[1] = wanted;
    }
    mask |= 255u << shift;
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const uint threshold = state[0];
  const uint take_eq = state[1];
  const uint n_gt = k - take_eq;

  // 2. Gather the survivors: above T in slots [0, n_gt), any order; the first take_eq equal to T in [n_gt, k), in
  //    index order. eq_seen is the same in every work-item, so the branch around the prefix sum is uniform.
  uint eq_seen = 0u;
  for (uint t0 = 0; t0 < n; t0 += lsize) {
    const uint c = t0 + lid;
    const uint key = c < n ? order_key(x[base + c]) : 0u;
    if (c < n && key > threshold) {
      const uint slot = atomic_inc(&state[2]);
      sel_key[slot] = key;
      sel_idx[slot] = c;
    }
    if (eq_seen < take_eq) {
      const uint is_eq = c < n && key == threshold ? 1u : 0u;
      scan[lid] = is_eq;
      barrier(CLK_LOCAL_MEM_FENCE);
      for (uint off = 1; off < lsize; off *= 2) {
        const uint add = lid >= off ? scan[lid - off] : 0u;
        barrier(CLK_LOCAL_MEM_FENCE);
        scan[lid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
      }
      const uint eq_rank = eq_seen + scan[lid] - is_eq;
      if (is_eq != 0u && eq_rank < take_eq) {
        sel_key[n_gt + eq_rank] = key;
        sel_idx[n_gt + eq_rank] = c;
      }
      eq_seen += scan[lsize - 1];
      barrier(CLK_LOCAL_MEM_FENCE);  // every work-item has read scan before the next tile rewrites it
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);

  // 3. Each survivor's position: the number of survivors that rank before it in the task's order.
  for (uint s = lid; s < k; s += lsize) {
    const uint key = sel_key[s];
    const uint idx = sel_idx[s];
    uint rank = 0u;
    for (uint f = 0; f < k; ++f) rank += sel_key[f] > key || (sel_key[f] == key && sel_idx[f] < idx) ? 1u : 0u;
    const uint pos = rank;
    values[out_base + pos] = x[base + idx];
    indices[out_base + pos] = (long)idx;
  }
}
)CLC";

// Work-items per row: 256 gives a 32000-entry row 125 entries per work-item and sweep.
constexpr size_t k_max_local = 256;

// What kwb_setup prepares for every call.
struct State {
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  size_t max_local = 1;    // largest power of two <= k_max_local that the kernel may use on this device
  cl_ulong local_mem = 0;  // the device's local memory, bytes
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

// The smallest power of two that covers a row, capped at the device limit: short rows (1000 x 11, 512 x 8) get
// small work-groups instead of 256 work-items of which most idle.
size_t local_size_for(int64_t cols, size_t max_local) {
  size_t local = 1;
  while (local < max_local && static_cast<int64_t>(local) < cols) local *= 2;
  return local;
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

// Returns 1 when the backend is not OpenCL, 2 when the program does not build (the log is on stderr), 3 when the
// kernel cannot be created or queried.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
  const auto context = static_cast<cl_context>(ctx->device_context);
  const auto device = static_cast<cl_device_id>(ctx->device);
  g_state.program = build(context, device, k_source);
  if (g_state.program == nullptr) return 2;
  cl_int err = CL_SUCCESS;
  g_state.kernel = clCreateKernel(g_state.program, "topk_select", &err);
  if (err != CL_SUCCESS) return 3;
  const std::optional<size_t> max_local = max_local_size(g_state.kernel, device);
  if (!max_local) return 3;
  g_state.max_local = *max_local;
  if (clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof g_state.local_mem, &g_state.local_mem, nullptr) !=
      CL_SUCCESS) {
    return 3;
  }
  return 0;
}

// Returns 1 when the call does not match the task signature (or k is outside 1..n, or the k survivors do not fit in
// local memory), 3 when OpenCL refuses an argument or the launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<TopK> p = unpack(*call);
  if (!p) return 1;
  if (p->rows == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const cl_uint n = static_cast<cl_uint>(p->n);
  const cl_uint k_u = static_cast<cl_uint>(p->k);
  const size_t local = local_size_for(p->n, g_state.max_local);
  const size_t global = static_cast<size_t>(p->rows) * local;
  const size_t survivor_bytes = static_cast<size_t>(p->k) * sizeof(cl_uint);
  if ((256 + local + 3) * sizeof(cl_uint) + 2 * survivor_bytes > g_state.local_mem) return 1;
  cl_kernel k = g_state.kernel;
  cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &p->x);
  err |= clSetKernelArg(k, 1, sizeof(cl_mem), &p->values);
  err |= clSetKernelArg(k, 2, sizeof(cl_mem), &p->indices);
  err |= clSetKernelArg(k, 3, sizeof n, &n);
  err |= clSetKernelArg(k, 4, sizeof k_u, &k_u);
  err |= clSetKernelArg(k, 5, 256 * sizeof(cl_uint), nullptr);
  err |= clSetKernelArg(k, 6, local * sizeof(cl_uint), nullptr);
  err |= clSetKernelArg(k, 7, survivor_bytes, nullptr);
  err |= clSetKernelArg(k, 8, survivor_bytes, nullptr);
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
