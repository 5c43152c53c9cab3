// SwiGLU on bfloat16, baseline opencl implementation: y = silu(gate) * up with silu(g) = g / (1 + exp(-g)), the
// same eight passes as cpu/baseline.cpp, each its own kernel launch, the way an eager framework with float32 as its
// compute type runs it on a device:
//
//   1. sg_widen     gf = float(gate)                    (n-element float scratch buffer)
//   2. sg_widen     uf = float(up)                      (n-element float scratch buffer)
//   3. sg_negate    t  = -gf                            (n-element float scratch buffer)
//   4. sg_exp       e  = exp(t)                         (n-element float scratch buffer; OpenCL's exp, no fast math)
//   5. sg_sigmoid   s  = 1 / (1 + e)                    (n-element float scratch buffer)
//   6. sg_mul       a  = gf * s            (silu)       (n-element float scratch buffer)
//   7. sg_mul       yf = a * uf                         (n-element float scratch buffer)
//   8. sg_narrow    y  = bf16(yf)                       (into the output, rounded to nearest even)
//
// Deliberately unfused: eight launches on the call's queue, each a full sweep over its operands, so a profiler sees
// eight kernels and seven float temporaries written and read back. The scratch buffers are created on the first
// call of a size and kept (grown, never shrunk) for later calls, as a framework's caching allocator would. All
// arithmetic is float32, and silu(gate) is not rounded to bfloat16 between the passes (that is the
// bf16_intermediate control). It is the "before" that the fused reference (opencl/fused.cpp) is measured against.
//
// bfloat16 travels as ushort: widening is a shift into the upper half of a float's bits, narrowing rounds to nearest
// even in integer operations (a NaN stays a quiet NaN), exactly as the cpu implementations do. Large |gate| needs no
// special case: for g < -88.72 e = exp(-g) = +inf, s = 0 and silu = g * 0 = -0; gate = -inf gives -inf * 0 = NaN,
// as the oracle's IEEE evaluation does.
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

// Every kernel takes the element count n: the global size is rounded up to a whole number of work-groups, so the
// last group has work-items past the end.
constexpr const char* k_source = R"CLC(
__kernel void sg_widen(__global const ushort* restrict x, __global float* restrict xf, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) xf[i] = as_float((uint)x[i] << 16);
}

__kernel void sg_negate(__global const float* restrict x, __global float* restrict t, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) t[i] = -x[i];
}

__kernel void sg_exp(__global const float* restrict t, __global float* restrict e, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) e[i] = exp(t[i]);
}

__kernel void sg_sigmoid(__global const float* restrict e, __global float* restrict s, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) s[i] = 1.0f / (1.0f + e[i]);
}

__kernel void sg_mul(__global const float* restrict a, __global const float* restrict b, __global float* restrict c,
                     const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) c[i] = a[i] * b[i];
}

// float32 to bfloat16, rounded to nearest, ties to even; NaN stays NaN (quiet), where the rounding add could carry a
// NaN's payload into infinity.
__kernel void sg_narrow(__global const float* restrict yf, __global ushort* restrict y, const ulong n) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  const float f = yf[i];
  const uint bits = as_uint(f);
  y[i] = f != f ? (ushort)((bits >> 16) | 0x0040u) : (ushort)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
)CLC";

enum Kernel { k_widen, k_negate, k_exp, k_sigmoid, k_mul, k_narrow, k_kernels };
constexpr const char* k_names[k_kernels] = {"sg_widen", "sg_negate", "sg_exp", "sg_sigmoid", "sg_mul", "sg_narrow"};

// The float temporaries, in the order the passes produce them.
enum Temp { t_gf, t_uf, t_neg, t_exp, t_sig, t_silu, t_yf, k_temps };

constexpr size_t k_max_local = 256;

// What kwb_setup prepares, plus the scratch buffers the calls grow.
struct State {
  cl_context context = nullptr;
  cl_program program = nullptr;
  cl_kernel kernels[k_kernels] = {};
  size_t max_local[k_kernels] = {};  // per kernel: largest power of two <= k_max_local it may use on this device
  cl_mem temps[k_temps] = {};
  size_t temp_bytes = 0;  // every temporary has this capacity
};
State g_state;

// The OpenCL C source built for `device`; on failure the build log goes to stderr and the result is null.
cl_program build(cl_context context, cl_device_id device, const char* source) {
  cl_int err = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context, 1, &source, nullptr, &err);
  if (err != CL_SUCCESS) {
    std::fprintf(stderr, "swiglu: clCreateProgramWithSource failed (%d)\n", err);
    return nullptr;
  }
  err = clBuildProgram(program, 1, &device, nullptr, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::vector<char> log(size + 1, '\0');
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    std::fprintf(stderr, "swiglu: clBuildProgram failed (%d):\n%s\n", err, log.data());
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

// Every temporary holding at least `bytes`: kept when they are big enough, replaced otherwise. False when OpenCL
// refuses.
bool ensure_scratch(size_t bytes) {
  if (g_state.temps[0] != nullptr && g_state.temp_bytes >= bytes) return true;
  for (cl_mem& buffer : g_state.temps) {
    if (buffer != nullptr) clReleaseMemObject(buffer);  // commands still using it keep it alive until they finish
    buffer = nullptr;
  }
  g_state.temp_bytes = 0;
  for (cl_mem& buffer : g_state.temps) {
    cl_int err = CL_SUCCESS;
    buffer = clCreateBuffer(g_state.context, CL_MEM_READ_WRITE, bytes, nullptr, &err);
    if (err != CL_SUCCESS) {
      buffer = nullptr;
      return false;
    }
  }
  g_state.temp_bytes = bytes;
  return true;
}

// Sets `kernel`'s buffer arguments and the trailing element count, then enqueues it over n work-items (rounded up
// to whole work-groups). The arguments are captured at the enqueue, so the same kernel can be enqueued again with
// other buffers.
bool launch(cl_command_queue queue, Kernel kernel, std::initializer_list<cl_mem> buffers, cl_ulong n) {
  cl_kernel k = g_state.kernels[kernel];
  cl_uint index = 0;
  cl_int err = CL_SUCCESS;
  for (const cl_mem& buffer : buffers) err |= clSetKernelArg(k, index++, sizeof(cl_mem), &buffer);
  err |= clSetKernelArg(k, index, sizeof n, &n);
  if (err != CL_SUCCESS) return false;
  const size_t local = g_state.max_local[kernel];
  const size_t global = (static_cast<size_t>(n) + local - 1) / local * local;
  return clEnqueueNDRangeKernel(queue, k, 1, nullptr, &global, &local, 0, nullptr, nullptr) == CL_SUCCESS;
}

// The call's tensors, found by name and checked against the task signature: gate and up in, y out, all
// [tokens, ffn] bfloat16 (DLPack's kDLBfloat, 16 bits), compact row-major, OpenCL buffers. The operator is
// element-wise, so only the element count matters once the shapes agree. Anything else is refused.
struct SwiGLU {
  cl_mem gate;
  cl_mem up;
  cl_mem y;
  int64_t n;
};

// A cl_mem cannot be offset from the host, so a nonzero byte_offset is refused too (kwb passes 0).
bool is_compact_opencl_bf16(const DLTensor& t, int32_t ndim) {
  if (t.device.device_type != kDLOpenCL || t.ndim != ndim || t.byte_offset != 0) return false;
  if (t.dtype.code != kDLBfloat || t.dtype.bits != 16 || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0) return false;
  }
  if (t.strides == nullptr) return true;  // DLPack: NULL strides mean compact row-major
  int64_t expected = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;  // a size-1 axis may have any stride
    expected *= t.shape[d];
  }
  return true;
}

bool same_shape(const DLTensor& a, const DLTensor& b) {
  if (a.ndim != b.ndim) return false;
  for (int32_t d = 0; d < a.ndim; ++d) {
    if (a.shape[d] != b.shape[d]) return false;
  }
  return true;
}

const DLTensor* find(const DLTensor* tensors, const char* const* names, int32_t count, std::string_view name) {
  for (int32_t i = 0; i < count; ++i) {
    if (names[i] != nullptr && name == names[i]) return &tensors[i];
  }
  return nullptr;
}

std::optional<SwiGLU> unpack(const kwb_call& call) {
  const DLTensor* gate = find(call.inputs, call.input_names, call.num_inputs, "gate");
  const DLTensor* up = find(call.inputs, call.input_names, call.num_inputs, "up");
  const DLTensor* y = find(call.outputs, call.output_names, call.num_outputs, "y");
  if (gate == nullptr || up == nullptr || y == nullptr) return std::nullopt;
  if (!is_compact_opencl_bf16(*gate, 2) || !is_compact_opencl_bf16(*up, 2) || !is_compact_opencl_bf16(*y, 2)) {
    return std::nullopt;
  }
  if (!same_shape(*gate, *up) || !same_shape(*gate, *y)) return std::nullopt;
  return SwiGLU{static_cast<cl_mem>(gate->data), static_cast<cl_mem>(up->data), static_cast<cl_mem>(y->data),
                gate->shape[0] * gate->shape[1]};
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
  const std::optional<SwiGLU> p = unpack(*call);
  if (!p) return 1;
  if (p->n == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const cl_ulong n = static_cast<cl_ulong>(p->n);
  if (!ensure_scratch(static_cast<size_t>(n) * sizeof(float))) return 2;
  const cl_mem* t = g_state.temps;

  // The queue is in order, so each pass sees the previous one's writes. No clFinish: kwb waits for the queue to
  // drain inside the timed region.
  const bool ok = launch(queue, k_widen, {p->gate, t[t_gf]}, n) &&        //
                  launch(queue, k_widen, {p->up, t[t_uf]}, n) &&          //
                  launch(queue, k_negate, {t[t_gf], t[t_neg]}, n) &&      //
                  launch(queue, k_exp, {t[t_neg], t[t_exp]}, n) &&        //
                  launch(queue, k_sigmoid, {t[t_exp], t[t_sig]}, n) &&    //
                  launch(queue, k_mul, {t[t_gf], t[t_sig], t[t_silu]}, n) &&  //
                  launch(queue, k_mul, {t[t_silu], t[t_uf], t[t_yf]}, n) &&   //
                  launch(queue, k_narrow, {t[t_yf], p->y}, n);
  return ok ? 0 : 3;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  for (cl_kernel kernel : g_state.kernels) {
    if (kernel != nullptr) clReleaseKernel(kernel);
  }
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  for (cl_mem buffer : g_state.temps) {
    if (buffer != nullptr) clReleaseMemObject(buffer);
  }
  g_state = State{};
}
