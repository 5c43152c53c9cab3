// Q8_0 quantization, reference optimized opencl implementation: one kernel, one work-item per block of 32, nothing
// else.
//
//   q8_0_fused  loads its block as eight float4, amax = max |x| (exact and order-free), then ggml's float32 recipe:
//               d = amax / 127, id = d ? 1 / d : 0, scales[b] = f16(d) (round to nearest even), and
//               qs = round(x * id) (OpenCL's round: halves away from zero, C's roundf), stored as eight char4.
//
// Compared with the four-kernel baseline it launches once instead of four times, reads x once (the block stays in
// registers), and never writes or re-reads a temporary (the baseline sweeps a rows*cols |x| buffer and two
// per-block buffers). Every output must be bit-exact (task.toml), so the program is built with
// -cl-fp32-correctly-rounded-divide-sqrt (the two divisions are then IEEE's), FP_CONTRACT is off, and nothing uses
// fast math or native_ or half_ functions; x * id is a single rounded multiply. The f16 scale is rounded in integer
// operations, as cpu/baseline.cpp does; the float -> char conversion is exact because round() already gave an
// integer in [-127, 127].
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

constexpr int64_t k_block = 32;

// One work-item per block; the global size is rounded up to whole work-groups, so the last group has work-items
// past the last block.
constexpr const char* k_source = R"CLC(
#pragma OPENCL FP_CONTRACT OFF

// float32 -> binary16 bits, round to nearest even, overflow to inf (the argument here is finite and >= 0), in
// integer operations: the conversion the cpu implementations make (cpu/baseline.cpp's f16_bits).
ushort f16_bits(float f) {
  const uint w = as_uint(f);
  const uint sign = (w >> 16) & 0x8000u;
  const uint a = w & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return (ushort)(sign | 0x7C00u | (a > 0x7F800000u ? 0x200u : 0u));
  if (a >= 0x477FF000u) return (ushort)(sign | 0x7C00u);  // >= 65520: rounds to inf
  if (a < 0x38800000u) {                                   // below 2^-14: an f16 subnormal or 0
    if (a < 0x33000000u) return (ushort)sign;              // below 2^-25 (half of 2^-24): 0
    const uint mantissa = (a & 0x7FFFFFu) | 0x800000u;
    const uint shift = 126u - (a >> 23);  // the value is mantissa * 2^(e - 150); f16 units are 2^-24
    uint q = mantissa >> shift;
    const uint rest = mantissa & ((1u << shift) - 1u);
    const uint half_unit = 1u << (shift - 1u);
    if (rest > half_unit || (rest == half_unit && (q & 1u) != 0)) ++q;
    return (ushort)(sign | q);
  }
  // A normal f16: rebias the exponent and round the 23-bit mantissa to 10 bits; a carry moves into the exponent.
  uint h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3FFu);
  const uint rest = a & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;
  return (ushort)(sign | h);
}

__kernel void q8_0_fused(__global const float* restrict x, __global char* restrict qs,
                         __global ushort* restrict scales, const ulong blocks) {
  const size_t b = get_global_id(0);
  if (b >= blocks) return;
  const __global float* xb = x + b * 32;
  __global char* qb = qs + b * 32;

  float4 v[8];
  float4 m = (float4)(0.0f);
  for (int k = 0; k < 8; ++k) {
    v[k] = vload4(k, xb);
    m = fmax(m, fabs(v[k]));
  }
  const float amax = fmax(fmax(m.s0, m.s1), fmax(m.s2, m.s3));

  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  scales[b] = f16_bits(d);
  for (int k = 0; k < 8; ++k) {
    vstore4(convert_char4(round(v[k] * id)), k, qb);
  }
}
)CLC";

constexpr size_t k_max_local = 64;

// What kwb_setup prepares for every call.
struct State {
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  size_t max_local = 1;  // largest power of two <= k_max_local that the kernel may use on this device
};
State g_state;

// The OpenCL C source built for `device` with correctly rounded float32 division, which the recipe's d = amax / 127
// and id = 1 / d need to be exact (OpenCL's default `/` may be off by 2.5 ulp). A device that does not offer it
// (CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) is refused. On failure the reason or the build log goes to stderr and the
// result is null.
cl_program build(cl_context context, cl_device_id device, const char* source) {
  cl_device_fp_config fp = 0;
  if (clGetDeviceInfo(device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, nullptr) != CL_SUCCESS ||
      (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) == 0) {
    std::fprintf(stderr, "q8_0_quantize: the device has no correctly rounded float32 division\n");
    return nullptr;
  }
  cl_int err = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context, 1, &source, nullptr, &err);
  if (err != CL_SUCCESS) {
    std::fprintf(stderr, "q8_0_quantize: clCreateProgramWithSource failed (%d)\n", err);
    return nullptr;
  }
  err = clBuildProgram(program, 1, &device, "-cl-fp32-correctly-rounded-divide-sqrt", nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::vector<char> log(size + 1, '\0');
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    std::fprintf(stderr, "q8_0_quantize: clBuildProgram failed (%d):\n%s\n", err, log.data());
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

// The call's tensors, found by name and checked against the task signature: x [rows, 32*blocks] f32 in;
// qs [rows, 32*blocks] i8 and scales [rows, blocks] f16 out; compact row-major, OpenCL buffers. Rows are whole
// blocks, so the tensor is one contiguous run of blocks: x[b*32 .. b*32+31] -> qs[b*32 ..], scales[b].
struct Q8 {
  cl_mem x;
  cl_mem qs;
  cl_mem scales;
  int64_t blocks;  // over the whole tensor
};

// A cl_mem cannot be offset from the host, so a nonzero byte_offset is refused too (kwb passes 0).
bool is_compact_opencl(const DLTensor& t, int32_t ndim, uint8_t code, uint8_t bits) {
  if (t.device.device_type != kDLOpenCL || t.ndim != ndim || t.byte_offset != 0) return false;
  if (t.dtype.code != code || t.dtype.bits != bits || t.dtype.lanes != 1) return false;
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

const DLTensor* find(const DLTensor* tensors, const char* const* names, int32_t count, std::string_view name) {
  for (int32_t i = 0; i < count; ++i) {
    if (names[i] != nullptr && name == names[i]) return &tensors[i];
  }
  return nullptr;
}

std::optional<Q8> unpack(const kwb_call& call) {
  const DLTensor* x = find(call.inputs, call.input_names, call.num_inputs, "x");
  const DLTensor* qs = find(call.outputs, call.output_names, call.num_outputs, "qs");
  const DLTensor* scales = find(call.outputs, call.output_names, call.num_outputs, "scales");
  if (x == nullptr || qs == nullptr || scales == nullptr) return std::nullopt;
  if (!is_compact_opencl(*x, 2, kDLFloat, 32) || !is_compact_opencl(*qs, 2, kDLInt, 8) ||
      !is_compact_opencl(*scales, 2, kDLFloat, 16)) {
    return std::nullopt;
  }
  const int64_t rows = x->shape[0], cols = x->shape[1];
  if (cols % k_block != 0 || qs->shape[0] != rows || qs->shape[1] != cols || scales->shape[0] != rows ||
      scales->shape[1] != cols / k_block) {
    return std::nullopt;
  }
  return Q8{static_cast<cl_mem>(x->data), static_cast<cl_mem>(qs->data), static_cast<cl_mem>(scales->data),
            rows * (cols / k_block)};
}

}  // namespace

// Returns 1 when the backend is not OpenCL, 2 when the program does not build or the device cannot divide exactly
// (the reason is on stderr), 3 when the kernel cannot be created or queried.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
  const auto context = static_cast<cl_context>(ctx->device_context);
  const auto device = static_cast<cl_device_id>(ctx->device);
  g_state.program = build(context, device, k_source);
  if (g_state.program == nullptr) return 2;
  cl_int err = CL_SUCCESS;
  g_state.kernel = clCreateKernel(g_state.program, "q8_0_fused", &err);
  if (err != CL_SUCCESS) return 3;
  const std::optional<size_t> max_local = max_local_size(g_state.kernel, device);
  if (!max_local) return 3;
  g_state.max_local = *max_local;
  return 0;
}

// Returns 1 when the call does not match the task signature, 3 when OpenCL refuses an argument or the launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Q8> p = unpack(*call);
  if (!p) return 1;
  if (p->blocks == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const cl_ulong blocks = static_cast<cl_ulong>(p->blocks);
  const size_t local = g_state.max_local;
  const size_t global = (static_cast<size_t>(blocks) + local - 1) / local * local;
  cl_kernel k = g_state.kernel;
  cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &p->x);
  err |= clSetKernelArg(k, 1, sizeof(cl_mem), &p->qs);
  err |= clSetKernelArg(k, 2, sizeof(cl_mem), &p->scales);
  err |= clSetKernelArg(k, 3, sizeof blocks, &blocks);
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
