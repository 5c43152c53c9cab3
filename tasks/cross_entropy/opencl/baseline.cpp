// Cross-entropy loss, baseline opencl implementation: the composition an eager framework runs on a device for
// `F.nll_loss(F.log_softmax(x, -1), t)` (what torch.nn.functional.cross_entropy is), six kernels, the same six
// passes as cpu/baseline.cpp:
//
//   1. ce_row_max      m = max(x, last axis)       (rows scratch buffer; one work-group per row, tree in local memory)
//   2. ce_sub_max      t = x - m, m broadcast      (rows*vocab scratch buffer)
//   3. ce_exp          e = exp(t)                  (rows*vocab scratch buffer)
//   4. ce_row_sum      s = sum(e, last axis)       (rows scratch buffer; one work-group per row, tree in local memory)
//   5. ce_log_softmax  lp = t - log(s), broadcast  (rows*vocab scratch buffer: the whole log-probability matrix)
//   6. ce_nll          loss[r] = -lp[r, target[r]] (into the output)
//
// Deliberately unfused: six launches on the call's queue, each a full sweep over its operand, so a profiler sees
// six kernels and three rows*vocab temporaries written and read back, of the last of which one element per row is
// used. The scratch buffers are created on the first call of a shape and kept (grown, never shrunk) for later
// calls, as a framework's caching allocator would. It is the "before" that the fused reference
// (opencl/reference.cpp) is measured against. Non-finite logits come out as the oracle defines them by plain IEEE
// arithmetic (a masked target: +inf; a +inf logit or a row of -inf only: NaN); a target outside the row, which no
// case draws, gives NaN rather than a read outside the buffer.
#include <CL/cl.h>
#include <kwb/kernel.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

KWB_CANDIDATE_ABI

namespace {

// Element-wise kernels take the element count n: their global size is rounded up to a whole number of work-groups,
// so the last group has work-items past the end. The two row reductions use a power-of-two local size, partial
// holding one float per work-item; a work-item past the row's end contributes the operation's identity.
constexpr const char* k_source = R"CLC(
__kernel void ce_row_max(__global const float* restrict x, __global float* restrict m, const uint vocab,
                         __local float* partial) {
  const uint lid = get_local_id(0);
  const uint lsize = get_local_size(0);
  const size_t row = get_group_id(0);
  const size_t base = row * vocab;

  float v = -INFINITY;
  for (uint c = lid; c < vocab; c += lsize) v = x[base + c] > v ? x[base + c] : v;
  partial[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint active = lsize / 2; active > 0; active /= 2) {
    if (lid < active && partial[lid + active] > partial[lid]) partial[lid] = partial[lid + active];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) m[row] = partial[0];
}

__kernel void ce_sub_max(__global const float* restrict x, __global const float* restrict m,
                         __global float* restrict t, const uint vocab, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) t[i] = x[i] - m[i / vocab];
}

__kernel void ce_exp(__global const float* restrict t, __global float* restrict e, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) e[i] = exp(t[i]);
}

__kernel void ce_row_sum(__global const float* restrict e, __global float* restrict s, const uint vocab,
                         __local float* partial) {
  const uint lid = get_local_id(0);
  const uint lsize = get_local_size(0);
  const size_t row = get_group_id(0);
  const size_t base = row * vocab;

  float sum = 0.0f;
  for (uint c = lid; c < vocab; c += lsize) sum += e[base + c];
  partial[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint active = lsize / 2; active > 0; active /= 2) {
    if (lid < active) partial[lid] += partial[lid + active];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) s[row] = partial[0];
}

__kernel void ce_log_softmax(__global const float* restrict t, __global const float* restrict s,
                             __global float* restrict lp, const uint vocab, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) lp[i] = t[i] - log(s[i / vocab]);
}

__kernel void ce_nll(__global const float* restrict lp, __global const long* restrict targets,
                     __global float* restrict loss, const uint vocab, const ulong rows) {
  const size_t r = get_global_id(0);
  if (r >= rows) return;
  const long target = targets[r];
  loss[r] = target < 0 || target >= (long)vocab ? NAN : -lp[r * vocab + target];
}
)CLC";

// The six kernels, in launch order.
enum Step { k_row_max, k_sub_max, k_exp, k_row_sum, k_log_softmax, k_nll, k_steps };
constexpr const char* k_names[k_steps] = {"ce_row_max", "ce_sub_max",     "ce_exp",
                                          "ce_row_sum", "ce_log_softmax", "ce_nll"};

// The reductions' width: wide enough for a 4096-logit row to give each work-item 16 logits, narrow enough for any
// OpenCL device. The element-wise kernels use the same size.
constexpr size_t k_max_local = 256;

// A scratch buffer, kept between calls and grown when a call needs more.
struct Scratch {
  cl_mem buffer = nullptr;
  size_t bytes = 0;
};

// What kwb_setup prepares, plus the scratch buffers the calls grow.
struct State {
  cl_context context = nullptr;
  cl_program program = nullptr;
  cl_kernel kernels[k_steps] = {};
  size_t max_local[k_steps] = {};  // per kernel: largest power of two <= k_max_local it may use on this device
  Scratch m;                       // per row: the maximum
  Scratch t;                       // x - m, rows*vocab floats
  Scratch e;                       // exp(t), rows*vocab floats
  Scratch s;                       // per row: the sum of e
  Scratch lp;                      // t - log(s), rows*vocab floats
};
State g_state;

// The OpenCL C source built for `device`; on failure the build log goes to stderr and the result is null.
cl_program build(cl_context context, cl_device_id device, const char* source) {
  cl_int err = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context, 1, &source, nullptr, &err);
  if (err != CL_SUCCESS) {
    std::fprintf(stderr, "cross_entropy: clCreateProgramWithSource failed (%d)\n", err);
    return nullptr;
  }
  err = clBuildProgram(program, 1, &device, nullptr, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::vector<char> log(size + 1, '\0');
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    std::fprintf(stderr, "cross_entropy: clBuildProgram failed (%d):\n%s\n", err, log.data());
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

// The smallest power of two that covers a row, capped at the device limit.
size_t local_size_for(int64_t vocab, size_t max_local) {
  size_t local = 1;
  while (local < max_local && static_cast<int64_t>(local) < vocab) local *= 2;
  return local;
}

// `scratch` holding at least `bytes`: kept when it is big enough, replaced otherwise. False when OpenCL refuses.
bool ensure_scratch(Scratch& scratch, size_t bytes) {
  if (scratch.buffer != nullptr && scratch.bytes >= bytes) return true;
  if (scratch.buffer != nullptr) clReleaseMemObject(scratch.buffer);  // commands using it keep it alive
  cl_int err = CL_SUCCESS;
  scratch.buffer = clCreateBuffer(g_state.context, CL_MEM_READ_WRITE, bytes, nullptr, &err);
  scratch.bytes = err == CL_SUCCESS ? bytes : 0;
  if (err != CL_SUCCESS) scratch.buffer = nullptr;
  return err == CL_SUCCESS;
}

// Enqueues `step` over `items` work-items (rounded up to whole work-groups of `local`) on `queue`.
bool launch(cl_command_queue queue, Step step, size_t items, size_t local) {
  const size_t global = (items + local - 1) / local * local;
  return clEnqueueNDRangeKernel(queue, g_state.kernels[step], 1, nullptr, &global, &local, 0, nullptr, nullptr) ==
         CL_SUCCESS;
}

// The call's tensors, checked against the task signature: logits [rows, vocab] f32 and targets [rows] i64 in,
// loss [rows] f32 out, compact row-major OpenCL buffers. Anything else is refused rather than guessed at.
struct CrossEntropy {
  cl_mem logits;
  cl_mem targets;
  cl_mem loss;
  int64_t rows;
  int64_t vocab;
};

// A cl_mem cannot be offset from the host, so a nonzero byte_offset is refused too (kwb passes 0).
bool is_compact_opencl(const DLTensor& t, int32_t ndim, uint8_t code, uint8_t bits) {
  if (t.device.device_type != kDLOpenCL || t.ndim != ndim || t.byte_offset != 0) return false;
  if (t.dtype.code != code || t.dtype.bits != bits || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0 || t.shape[d] > UINT32_MAX) return false;  // the kernels take vocab as uint
  }
  return t.strides == nullptr;  // DLPack: NULL strides mean compact row-major
}

std::optional<CrossEntropy> unpack(const kwb_call& call) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& logits = call.inputs[0];
  const DLTensor& targets = call.inputs[1];
  const DLTensor& loss = call.outputs[0];
  if (!is_compact_opencl(logits, 2, kDLFloat, 32) || !is_compact_opencl(targets, 1, kDLInt, 64) ||
      !is_compact_opencl(loss, 1, kDLFloat, 32)) {
    return std::nullopt;
  }
  if (targets.shape[0] != logits.shape[0] || loss.shape[0] != logits.shape[0]) return std::nullopt;
  return CrossEntropy{static_cast<cl_mem>(logits.data), static_cast<cl_mem>(targets.data),
                      static_cast<cl_mem>(loss.data), logits.shape[0], logits.shape[1]};
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

// Returns 1 when the call does not match the task signature (or a row is empty), 2 when a scratch buffer cannot be
// created, 3 when OpenCL refuses an argument or a launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<CrossEntropy> p = unpack(*call);
  if (!p || (p->rows > 0 && p->vocab < 1)) return 1;
  if (p->rows == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const size_t rows = static_cast<size_t>(p->rows);
  const cl_ulong rows_u = static_cast<cl_ulong>(p->rows);
  const cl_ulong n = static_cast<cl_ulong>(p->rows * p->vocab);
  const cl_uint vocab_u = static_cast<cl_uint>(p->vocab);
  if (!ensure_scratch(g_state.m, rows * sizeof(float)) || !ensure_scratch(g_state.t, n * sizeof(float)) ||
      !ensure_scratch(g_state.e, n * sizeof(float)) || !ensure_scratch(g_state.s, rows * sizeof(float)) ||
      !ensure_scratch(g_state.lp, n * sizeof(float))) {
    return 2;
  }
  const size_t max_local = local_size_for(p->vocab, g_state.max_local[k_row_max]);
  const size_t sum_local = local_size_for(p->vocab, g_state.max_local[k_row_sum]);
  cl_kernel* k = g_state.kernels;

  cl_int err = clSetKernelArg(k[k_row_max], 0, sizeof(cl_mem), &p->logits);
  err |= clSetKernelArg(k[k_row_max], 1, sizeof(cl_mem), &g_state.m.buffer);
  err |= clSetKernelArg(k[k_row_max], 2, sizeof vocab_u, &vocab_u);
  err |= clSetKernelArg(k[k_row_max], 3, max_local * sizeof(float), nullptr);

  err |= clSetKernelArg(k[k_sub_max], 0, sizeof(cl_mem), &p->logits);
  err |= clSetKernelArg(k[k_sub_max], 1, sizeof(cl_mem), &g_state.m.buffer);
  err |= clSetKernelArg(k[k_sub_max], 2, sizeof(cl_mem), &g_state.t.buffer);
  err |= clSetKernelArg(k[k_sub_max], 3, sizeof vocab_u, &vocab_u);
  err |= clSetKernelArg(k[k_sub_max], 4, sizeof n, &n);

  err |= clSetKernelArg(k[k_exp], 0, sizeof(cl_mem), &g_state.t.buffer);
  err |= clSetKernelArg(k[k_exp], 1, sizeof(cl_mem), &g_state.e.buffer);
  err |= clSetKernelArg(k[k_exp], 2, sizeof n, &n);

  err |= clSetKernelArg(k[k_row_sum], 0, sizeof(cl_mem), &g_state.e.buffer);
  err |= clSetKernelArg(k[k_row_sum], 1, sizeof(cl_mem), &g_state.s.buffer);
  err |= clSetKernelArg(k[k_row_sum], 2, sizeof vocab_u, &vocab_u);
  err |= clSetKernelArg(k[k_row_sum], 3, sum_local * sizeof(float), nullptr);

  err |= clSetKernelArg(k[k_log_softmax], 0, sizeof(cl_mem), &g_state.t.buffer);
  err |= clSetKernelArg(k[k_log_softmax], 1, sizeof(cl_mem), &g_state.s.buffer);
  err |= clSetKernelArg(k[k_log_softmax], 2, sizeof(cl_mem), &g_state.lp.buffer);
  err |= clSetKernelArg(k[k_log_softmax], 3, sizeof vocab_u, &vocab_u);
  err |= clSetKernelArg(k[k_log_softmax], 4, sizeof n, &n);

  err |= clSetKernelArg(k[k_nll], 0, sizeof(cl_mem), &g_state.lp.buffer);
  err |= clSetKernelArg(k[k_nll], 1, sizeof(cl_mem), &p->targets);
  err |= clSetKernelArg(k[k_nll], 2, sizeof(cl_mem), &p->loss);
  err |= clSetKernelArg(k[k_nll], 3, sizeof vocab_u, &vocab_u);
  err |= clSetKernelArg(k[k_nll], 4, sizeof rows_u, &rows_u);
  if (err != CL_SUCCESS) return 3;

  // The queue is in order, so each step sees the previous one's writes. No clFinish: kwb waits for the queue to
  // drain inside the timed region.
  const bool ok = launch(queue, k_row_max, rows * max_local, max_local) &&
                  launch(queue, k_sub_max, n, g_state.max_local[k_sub_max]) &&
                  launch(queue, k_exp, n, g_state.max_local[k_exp]) &&
                  launch(queue, k_row_sum, rows * sum_local, sum_local) &&
                  launch(queue, k_log_softmax, n, g_state.max_local[k_log_softmax]) &&
                  launch(queue, k_nll, rows, g_state.max_local[k_nll]);
  return ok ? 0 : 3;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  for (cl_kernel kernel : g_state.kernels) {
    if (kernel != nullptr) clReleaseKernel(kernel);
  }
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  for (const Scratch* scratch : {&g_state.m, &g_state.t, &g_state.e, &g_state.s, &g_state.lp}) {
    if (scratch->buffer != nullptr) clReleaseMemObject(scratch->buffer);
  }
  g_state = State{};
}
