// RoPE (interleaved pairs), baseline opencl implementation: the eager-framework formulation of cpu/baseline.cpp
// (GPT-J's apply_rotary_pos_emb), one kernel per tensor operation, on the call's queue:
//
//   1. rope_inv_freq            inv_freq = 1 / pow(base, 2i / head_dim)      [head_dim / 2]
//   2. rope_angles              angles = pos (outer) inv_freq                [n_tokens, head_dim / 2]
//   3. rope_repeat_interleave   emb = (t0, t0, t1, t1, ...)                  [n_tokens, head_dim]
//   4. rope_cos                 cos_t = cos(emb)                             [n_tokens, head_dim]: every angle twice
//   5. rope_sin                 sin_t = sin(emb)                             [n_tokens, head_dim]
//   then for q, and again for k:
//   6. rope_rotate_every_two    rot = (-x1, x0, -x3, x2, ...)                [like x]
//   7. rope_mul_table           x_cos = x * cos_t, broadcast over heads      [like x]
//   8. rope_mul_table           rot_sin = rot * sin_t                        [like x]
//   9. rope_add                 out = x_cos + rot_sin                        (into the output)
//
// Deliberately unfused: eight kernels in thirteen launches, each a full sweep over its operand, so a profiler sees
// every temporary written and read back, and cos/sin evaluated on the duplicated table. The scratch buffers are
// created on the first call of a shape and kept (grown, never shrunk) for later calls, as a framework's caching
// allocator would; the q temporaries are reused for k (the queue is in order). It is the "before" that the fused
// reference (opencl/fused.cpp) is measured against. The arithmetic of each output is that of the definition:
// fl(fl(x0 c) + fl(-x1 s)), with the float32 angle (float)pos * inv_freq and OpenCL's full-precision cos and sin.
#include <CL/cl.h>
#include <kwb/kernel.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

KWB_CANDIDATE_ABI

namespace {

// Every kernel takes its element count n: the global size is rounded up to a whole number of work-groups, so the
// last group has work-items past the end.
constexpr const char* k_source = R"CLC(
__kernel void rope_inv_freq(__global float* restrict inv_freq, const uint half_dim, const uint head_dim,
                            const float base) {
  const uint i = get_global_id(0);
  if (i < half_dim) inv_freq[i] = 1.0f / pow(base, (float)(2 * i) / (float)head_dim);
}

__kernel void rope_angles(__global const int* restrict pos, __global const float* restrict inv_freq,
                          __global float* restrict angles, const uint half_dim, const ulong n) {
  const size_t j = get_global_id(0);
  if (j < n) angles[j] = (float)pos[j / half_dim] * inv_freq[j % half_dim];
}

__kernel void rope_repeat_interleave(__global const float* restrict angles, __global float* restrict emb,
                                     const ulong n) {
  const size_t j = get_global_id(0);
  if (j < n) emb[j] = angles[j / 2];
}

__kernel void rope_cos(__global const float* restrict emb, __global float* restrict out, const ulong n) {
  const size_t j = get_global_id(0);
  if (j < n) out[j] = cos(emb[j]);
}

__kernel void rope_sin(__global const float* restrict emb, __global float* restrict out, const ulong n) {
  const size_t j = get_global_id(0);
  if (j < n) out[j] = sin(emb[j]);
}

__kernel void rope_rotate_every_two(__global const float* restrict x, __global float* restrict rot, const ulong n) {
  const size_t j = get_global_id(0);
  if (j < n) rot[j] = (j % 2 == 0) ? -x[j + 1] : x[j - 1];
}

// y[t, h, c] = x[t, h, c] * table[t, c]: the per-token table broadcast over the heads.
__kernel void rope_mul_table(__global const float* restrict x, __global const float* restrict table,
                             __global float* restrict y, const uint heads, const uint head_dim, const ulong n) {
  const size_t j = get_global_id(0);
  if (j < n) y[j] = x[j] * table[j / ((size_t)heads * head_dim) * head_dim + j % head_dim];
}

__kernel void rope_add(__global const float* restrict a, __global const float* restrict b, __global float* restrict y,
                       const ulong n) {
  const size_t j = get_global_id(0);
  if (j < n) y[j] = a[j] + b[j];
}
)CLC";

enum Kernel {
  k_inv_freq,
  k_angles,
  k_repeat,
  k_cos,
  k_sin,
  k_rotate,
  k_mul_table,
  k_add,
  k_kernels,
};
constexpr const char* k_names[k_kernels] = {"rope_inv_freq", "rope_angles",           "rope_repeat_interleave",
                                            "rope_cos",      "rope_sin",              "rope_rotate_every_two",
                                            "rope_mul_table", "rope_add"};

constexpr size_t k_max_local = 256;

struct Scratch {
  cl_mem buffer = nullptr;
  size_t bytes = 0;
};

// What kwb_setup prepares, plus the scratch buffers the calls grow.
struct State {
  cl_context context = nullptr;
  cl_program program = nullptr;
  cl_kernel kernels[k_kernels] = {};
  size_t max_local[k_kernels] = {};  // per kernel: largest power of two <= k_max_local it may use on this device
  Scratch inv_freq;                  // [head_dim / 2]
  Scratch angles;                    // [n_tokens, head_dim / 2]
  Scratch emb, cos_t, sin_t;         // [n_tokens, head_dim] each
  Scratch rot, x_cos, rot_sin;       // [n_tokens, max(n_heads, n_kv_heads), head_dim] each, for q then for k
};
State g_state;

// The OpenCL C source built for `device`; on failure the build log goes to stderr and the result is null.
cl_program build(cl_context context, cl_device_id device, const char* source) {
  cl_int err = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context, 1, &source, nullptr, &err);
  if (err != CL_SUCCESS) {
    std::fprintf(stderr, "rope: clCreateProgramWithSource failed (%d)\n", err);
    return nullptr;
  }
  err = clBuildProgram(program, 1, &device, nullptr, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::vector<char> log(size + 1, '\0');
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    std::fprintf(stderr, "rope: clBuildProgram failed (%d):\n%s\n", err, log.data());
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

// The call's tensors, found by name and checked against the task signature: q [n_tokens, n_heads, head_dim] and
// k [n_tokens, n_kv_heads, head_dim] f32, pos [n_tokens] i32 in; q_out, k_out shaped like q and k out; compact
// row-major, OpenCL buffers. Anything else is refused rather than guessed at.
struct Rope {
  cl_mem q;
  cl_mem k;
  cl_mem pos;
  cl_mem q_out;
  cl_mem k_out;
  int64_t n_tokens, n_heads, n_kv_heads, head_dim;
  float base;
};

// A cl_mem cannot be offset from the host, so a nonzero byte_offset is refused too (kwb passes 0).
bool is_compact_opencl(const DLTensor& t, int32_t ndim, uint8_t code) {
  if (t.device.device_type != kDLOpenCL || t.ndim != ndim || t.byte_offset != 0) return false;
  if (t.dtype.code != code || t.dtype.bits != 32 || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0 || t.shape[d] > UINT32_MAX) return false;  // the kernels take the extents as uint
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

bool same_shape(const DLTensor& a, const DLTensor& b) {
  return a.shape[0] == b.shape[0] && a.shape[1] == b.shape[1] && a.shape[2] == b.shape[2];
}

std::optional<Rope> unpack(const kwb_call& call) {
  const DLTensor* q = find(call.inputs, call.input_names, call.num_inputs, "q");
  const DLTensor* k = find(call.inputs, call.input_names, call.num_inputs, "k");
  const DLTensor* pos = find(call.inputs, call.input_names, call.num_inputs, "pos");
  const DLTensor* q_out = find(call.outputs, call.output_names, call.num_outputs, "q_out");
  const DLTensor* k_out = find(call.outputs, call.output_names, call.num_outputs, "k_out");
  if (q == nullptr || k == nullptr || pos == nullptr || q_out == nullptr || k_out == nullptr) return std::nullopt;
  if (!is_compact_opencl(*q, 3, kDLFloat) || !is_compact_opencl(*k, 3, kDLFloat) ||
      !is_compact_opencl(*pos, 1, kDLInt) || !is_compact_opencl(*q_out, 3, kDLFloat) ||
      !is_compact_opencl(*k_out, 3, kDLFloat)) {
    return std::nullopt;
  }
  if (!same_shape(*q, *q_out) || !same_shape(*k, *k_out) || k->shape[0] != q->shape[0] ||
      pos->shape[0] != q->shape[0] || k->shape[2] != q->shape[2] || q->shape[2] % 2 != 0) {
    return std::nullopt;
  }
  const float base = static_cast<float>(kwb_scalar_or(&call, "base", 10000.0));
  return Rope{static_cast<cl_mem>(q->data),     static_cast<cl_mem>(k->data),     static_cast<cl_mem>(pos->data),
              static_cast<cl_mem>(q_out->data), static_cast<cl_mem>(k_out->data), q->shape[0],
              q->shape[1],                      k->shape[1],                      q->shape[2],
              base};
}

// `scratch` holding at least `bytes`: kept when it is big enough, replaced otherwise. False when OpenCL refuses.
bool ensure_scratch(Scratch& scratch, size_t bytes) {
  if (bytes == 0) bytes = 1;  // OpenCL refuses an empty buffer
  if (scratch.buffer != nullptr && scratch.bytes >= bytes) return true;
  if (scratch.buffer != nullptr) clReleaseMemObject(scratch.buffer);  // commands using it keep it alive until done
  cl_int err = CL_SUCCESS;
  scratch.buffer = clCreateBuffer(g_state.context, CL_MEM_READ_WRITE, bytes, nullptr, &err);
  scratch.bytes = err == CL_SUCCESS ? bytes : 0;
  if (err != CL_SUCCESS) scratch.buffer = nullptr;
  return err == CL_SUCCESS;
}

// Sets `kernel`'s arguments (cl_mem, integer and float values, in order) and enqueues it over `items` work-items,
// rounded up to whole work-groups. An empty sweep is skipped (OpenCL refuses an empty launch).
struct Arg {
  size_t size;
  const void* value;
};
bool launch(cl_command_queue queue, Kernel kernel, size_t items, std::initializer_list<Arg> args) {
  cl_kernel k = g_state.kernels[kernel];
  cl_uint index = 0;
  for (const Arg& arg : args) {
    if (clSetKernelArg(k, index++, arg.size, arg.value) != CL_SUCCESS) return false;
  }
  if (items == 0) return true;
  const size_t local = g_state.max_local[kernel];
  const size_t global = (items + local - 1) / local * local;
  return clEnqueueNDRangeKernel(queue, k, 1, nullptr, &global, &local, 0, nullptr, nullptr) == CL_SUCCESS;
}

template <typename T>
Arg arg(const T& value) {
  return Arg{sizeof(T), &value};
}

// out = x * cos_t + rot(x) * sin_t for one of q, k (`heads` heads per token): four launches.
bool apply(cl_command_queue queue, const cl_mem& x, const cl_mem& out, cl_ulong n_tokens, cl_uint heads,
           cl_uint head_dim) {
  const cl_ulong n = n_tokens * heads * head_dim;
  return launch(queue, k_rotate, n, {arg(x), arg(g_state.rot.buffer), arg(n)}) &&
         launch(queue, k_mul_table, n,
                {arg(x), arg(g_state.cos_t.buffer), arg(g_state.x_cos.buffer), arg(heads), arg(head_dim), arg(n)}) &&
         launch(queue, k_mul_table, n,
                {arg(g_state.rot.buffer), arg(g_state.sin_t.buffer), arg(g_state.rot_sin.buffer), arg(heads),
                 arg(head_dim), arg(n)}) &&
         launch(queue, k_add, n, {arg(g_state.x_cos.buffer), arg(g_state.rot_sin.buffer), arg(out), arg(n)});
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
  for (int kernel = 0; kernel < k_kernels; ++kernel) {
    cl_int err = CL_SUCCESS;
    g_state.kernels[kernel] = clCreateKernel(g_state.program, k_names[kernel], &err);
    if (err != CL_SUCCESS) return 3;
    const std::optional<size_t> max_local = max_local_size(g_state.kernels[kernel], device);
    if (!max_local) return 3;
    g_state.max_local[kernel] = *max_local;
  }
  return 0;
}

// Returns 1 when the call does not match the task signature, 2 when a scratch buffer cannot be created, 3 when
// OpenCL refuses an argument or a launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rope> p = unpack(*call);
  if (!p) return 1;
  if (p->n_tokens == 0 || p->head_dim == 0) return 0;  // nothing to write
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const cl_uint half_dim = static_cast<cl_uint>(p->head_dim / 2);
  const cl_uint head_dim = static_cast<cl_uint>(p->head_dim);
  const cl_ulong n_tokens = static_cast<cl_ulong>(p->n_tokens);
  const cl_ulong n_angles = n_tokens * half_dim;
  const cl_ulong n_table = n_tokens * head_dim;
  const cl_ulong max_heads = static_cast<cl_ulong>(p->n_heads > p->n_kv_heads ? p->n_heads : p->n_kv_heads);
  const size_t per_tensor = n_table * max_heads * sizeof(float);
  if (!ensure_scratch(g_state.inv_freq, half_dim * sizeof(float)) ||
      !ensure_scratch(g_state.angles, n_angles * sizeof(float)) ||
      !ensure_scratch(g_state.emb, n_table * sizeof(float)) ||
      !ensure_scratch(g_state.cos_t, n_table * sizeof(float)) ||
      !ensure_scratch(g_state.sin_t, n_table * sizeof(float)) || !ensure_scratch(g_state.rot, per_tensor) ||
      !ensure_scratch(g_state.x_cos, per_tensor) || !ensure_scratch(g_state.rot_sin, per_tensor)) {
    return 2;
  }

  // The queue is in order, so each step sees the previous one's writes. No clFinish: kwb waits for the queue to
  // drain inside the timed region.
  const bool ok =
      launch(queue, k_inv_freq, half_dim, {arg(g_state.inv_freq.buffer), arg(half_dim), arg(head_dim), arg(p->base)}) &&
      launch(queue, k_angles, n_angles,
             {arg(p->pos), arg(g_state.inv_freq.buffer), arg(g_state.angles.buffer), arg(half_dim), arg(n_angles)}) &&
      launch(queue, k_repeat, n_table, {arg(g_state.angles.buffer), arg(g_state.emb.buffer), arg(n_table)}) &&
      launch(queue, k_cos, n_table, {arg(g_state.emb.buffer), arg(g_state.cos_t.buffer), arg(n_table)}) &&
      launch(queue, k_sin, n_table, {arg(g_state.emb.buffer), arg(g_state.sin_t.buffer), arg(n_table)}) &&
      apply(queue, p->q, p->q_out, n_tokens, static_cast<cl_uint>(p->n_heads), head_dim) &&
      apply(queue, p->k, p->k_out, n_tokens, static_cast<cl_uint>(p->n_kv_heads), head_dim);
  return ok ? 0 : 3;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  for (cl_kernel kernel : g_state.kernels) {
    if (kernel != nullptr) clReleaseKernel(kernel);
  }
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  for (Scratch* scratch : {&g_state.inv_freq, &g_state.angles, &g_state.emb, &g_state.cos_t, &g_state.sin_t,
                           &g_state.rot, &g_state.x_cos, &g_state.rot_sin}) {
    if (scratch->buffer != nullptr) clReleaseMemObject(scratch->buffer);
  }
  g_state = State{};
}
