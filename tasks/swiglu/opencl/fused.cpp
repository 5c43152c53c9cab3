// SwiGLU on bfloat16, reference optimized opencl implementation: one kernel, one work-item per element, nothing else.
//
//   swiglu_fused  y[i] = bf16(silu(float(gate[i])) * float(up[i])),   silu(g) = g / (1 + exp(-g))
//
// Compared with the eight-launch baseline it launches once instead of eight times, reads each input once and writes
// the output once, and never writes or re-reads a temporary (the baseline sweeps seven n-element float scratch
// buffers). All arithmetic is float32 and silu(gate) is not rounded to bfloat16 before the multiply; only y is
// rounded, to nearest even. OpenCL's exp (<= 3 ulp) and division (<= 2.5 ulp) without fast math keep the float32
// result within the handful of u that the tolerance's derivation allows (task.toml).
//
// bfloat16 travels as ushort: widening is a shift into the upper half of a float's bits, narrowing rounds to nearest
// even in integer operations (a NaN stays a quiet NaN), exactly as the cpu implementations do. Large |gate| is
// handled by the formula itself, as IEEE arithmetic on it does: for g < -88.72 exp(-g) overflows to +inf and
// g / inf = -0; for g > 88.72 exp(-g) is 0 or subnormal and silu(g) = g. gate = -inf gives -inf / inf = NaN and
// gate = +inf gives +inf, as the oracle defines them; a NaN in either input gives NaN.
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

// The global size is rounded up to a whole number of work-groups, so the last group has work-items past the end.
constexpr const char* k_source = R"CLC(
float from_bf16(ushort h) { return as_float((uint)h << 16); }

// float32 to bfloat16, rounded to nearest, ties to even; NaN stays NaN (quiet), where the rounding add could carry a
// NaN's payload into infinity.
ushort to_bf16(float f) {
  const uint bits = as_uint(f);
  if (f != f) return (ushort)((bits >> 16) | 0x0040u);
  return (ushort)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

float silu(float g) { return g / (1.0f + exp(-g)); }

float swiglu(float g, float u) { return silu(g) * u; }

__kernel void swiglu_fused(__global const ushort* restrict gate, __global const ushort* restrict up,
                           __global ushort* restrict y, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) y[i] = to_bf16(swiglu(from_bf16(gate[i]), from_bf16(up[i])));
}
)CLC";

constexpr size_t k_max_local = 256;

// What kwb_setup prepares for every call.
struct State {
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  size_t max_local = 1;  // largest power of two <= k_max_local that the kernel may use on this device
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

// Returns 1 when the backend is not OpenCL, 2 when the program does not build (the log is on stderr), 3 when the
// kernel cannot be created or queried.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
  const auto context = static_cast<cl_context>(ctx->device_context);
  const auto device = static_cast<cl_device_id>(ctx->device);
  g_state.program = build(context, device, k_source);
  if (g_state.program == nullptr) return 2;
  cl_int err = CL_SUCCESS;
  g_state.kernel = clCreateKernel(g_state.program, "swiglu_fused", &err);
  if (err != CL_SUCCESS) return 3;
  const std::optional<size_t> max_local = max_local_size(g_state.kernel, device);
  if (!max_local) return 3;
  g_state.max_local = *max_local;
  return 0;
}

// Returns 1 when the call does not match the task signature, 3 when OpenCL refuses an argument or the launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<SwiGLU> p = unpack(*call);
  if (!p) return 1;
  if (p->n == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const cl_ulong n = static_cast<cl_ulong>(p->n);
  const size_t local = g_state.max_local;
  const size_t global = (static_cast<size_t>(n) + local - 1) / local * local;
  cl_kernel k = g_state.kernel;
  cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &p->gate);
  err |= clSetKernelArg(k, 1, sizeof(cl_mem), &p->up);
  err |= clSetKernelArg(k, 2, sizeof(cl_mem), &p->y);
  err |= clSetKernelArg(k, 3, sizeof n, &n);
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
