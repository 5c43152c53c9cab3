// Q8_0 quantization, baseline opencl implementation: ggml's quantize_row_q8_0_ref recipe as an eager framework would
// run it on a device, one whole-tensor kernel per step (the same four passes as cpu/baseline.cpp):
//
//   1. q8_abs        a = |x|                          (rows*cols float scratch buffer)
//   2. q8_block_max  amax[b] = max(a, block of 32)    (per-block float scratch buffer; one work-item per block)
//   3. q8_scales     d = amax[b] / 127, id[b] = d ? 1/d : 0, scales[b] = f16(d)
//                                                     (per-block float scratch buffer for id)
//   4. q8_quantize   qs = round(x * id[b])            (one work-item per element; OpenCL's round, halves away from 0)
//
// Deliberately unfused: four launches on the call's queue, each a full sweep over its operands, so a profiler sees
// four kernels, the rows*cols temporary written and read back and x read twice. The scratch buffers are created on
// the first call of a size and kept (grown, never shrunk) for later calls, as a framework's caching allocator
// would. It is the "before" that the fused reference (opencl/fused.cpp) is measured against.
//
// The arithmetic is exactly the task's (float32 d, id and x * id; round half away from zero; the f16 scale rounded
// to nearest even from the float d), so its outputs are bit-identical to the oracle's: the program is built with
// -cl-fp32-correctly-rounded-divide-sqrt (OpenCL's default `/` may be off by 2.5 ulp), FP_CONTRACT is off, and
// nothing uses fast math or native_ or half_ functions.
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

constexpr int64_t k_block = 32;

// Every kernel takes its work-item count n (elements or blocks): the global size is rounded up to a whole number
// of work-groups, so the last group has work-items past the end.
constexpr const char* k_source = R"CLC(
#pragma OPENCL FP_CONTRACT OFF

__kernel void q8_abs(__global const float* restrict x, __global float* restrict a, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) a[i] = fabs(x[i]);
}

__kernel void q8_block_max(__global const float* restrict a, __global float* restrict amax, const ulong n) {
  const size_t b = get_global_id(0);
  if (b >= n) return;
  float m = 0.0f;
  for (int j = 0; j < 32; ++j) m = a[b * 32 + j] > m ? a[b * 32 + j] : m;
  amax[b] = m;
}

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

__kernel void q8_scales(__global const float* restrict amax, __global float* restrict id,
                        __global ushort* restrict scales, const ulong n) {
  const size_t b = get_global_id(0);
  if (b >= n) return;
  const float d = amax[b] / 127.0f;
  id[b] = d != 0.0f ? 1.0f / d : 0.0f;
  scales[b] = f16_bits(d);
}

// round() gives an integer in [-127, 127], so the conversion to char (toward zero) is exact.
__kernel void q8_quantize(__global const float* restrict x, __global const float* restrict id,
                          __global char* restrict qs, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) qs[i] = convert_char(round(x[i] * id[i / 32]));
}
)CLC";

enum Kernel { k_abs, k_block_max, k_scales, k_quantize, k_kernels };
constexpr const char* k_names[k_kernels] = {"q8_abs", "q8_block_max", "q8_scales", "q8_quantize"};

constexpr size_t k_max_local = 256;

// What kwb_setup prepares, plus the scratch buffers the calls grow.
struct State {
  cl_context context = nullptr;
  cl_program program = nullptr;
  cl_kernel kernels[k_kernels] = {};
  size_t max_local[k_kernels] = {};  // per kernel: largest power of two <= k_max_local it may use on this device
  cl_mem a = nullptr;                // |x|, rows*cols floats
  size_t a_bytes = 0;
  cl_mem amax = nullptr;             // per block: max |x|
  size_t amax_bytes = 0;
  cl_mem id = nullptr;               // per block: 1 / d, or 0
  size_t id_bytes = 0;
};
State g_state;

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

// Sets `kernel`'s buffer arguments and the trailing count n, then enqueues it over n work-items (rounded up to whole
// work-groups).
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
// (the reason is on stderr), 3 when a kernel cannot be created or queried.
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
  const std::optional<Q8> p = unpack(*call);
  if (!p) return 1;
  if (p->blocks == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const cl_ulong blocks = static_cast<cl_ulong>(p->blocks);
  const cl_ulong n = blocks * k_block;
  if (!ensure_scratch(g_state.a, g_state.a_bytes, static_cast<size_t>(n) * sizeof(float)) ||
      !ensure_scratch(g_state.amax, g_state.amax_bytes, static_cast<size_t>(blocks) * sizeof(float)) ||
      !ensure_scratch(g_state.id, g_state.id_bytes, static_cast<size_t>(blocks) * sizeof(float))) {
    return 2;
  }
  // The queue is in order, so each pass sees the previous one's writes. No clFinish: kwb waits for the queue to
  // drain inside the timed region.
  const bool ok = launch(queue, k_abs, {p->x, g_state.a}, n) &&
                  launch(queue, k_block_max, {g_state.a, g_state.amax}, blocks) &&
                  launch(queue, k_scales, {g_state.amax, g_state.id, p->scales}, blocks) &&
                  launch(queue, k_quantize, {p->x, g_state.id, p->qs}, n);
  return ok ? 0 : 3;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  for (cl_kernel kernel : g_state.kernels) {
    if (kernel != nullptr) clReleaseKernel(kernel);
  }
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  for (cl_mem buffer : {g_state.a, g_state.amax, g_state.id}) {
    if (buffer != nullptr) clReleaseMemObject(buffer);
  }
  g_state = State{};
}
