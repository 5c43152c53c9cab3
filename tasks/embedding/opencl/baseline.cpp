// Embedding lookup, baseline opencl implementation: the straightforward port of cpu/baseline.cpp, one work-item
// per id, each copying its row one element at a time and widening every f16 by hand from its bits (sign, exponent,
// mantissa; subnormals normalized; infinities and NaN kept). Correct for every value, and slow: n work-items only
// (8 for a decode step), each a serial loop over dim with a branchy conversion per element, and on a GPU every
// work-item of a group reading a different row (uncoalesced). It is the "before" that the element-parallel
// reference (opencl/reference.cpp) is measured against.
//
// An id outside [0, vocab), which no case draws (the oracle refuses one), gives a row of NaN rather than a read
// outside the table.
#include <CL/cl.h>
#include <kwb/kernel.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

KWB_CANDIDATE_ABI

namespace {

constexpr const char* k_source = R"CLC(
// IEEE binary16 bits to the float32 of the same value (exact: every f16 value is a float32 value).
float widen(ushort h) {
  const uint sign = (uint)(h & 0x8000u) << 16;
  const uint exponent = (h >> 10) & 0x1Fu;
  uint mantissa = h & 0x3FFu;
  uint bits = 0;
  if (exponent == 0x1Fu) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // infinity or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);  // normal: rebias 15 -> 127
  } else if (mantissa == 0) {
    bits = sign;  // signed zero
  } else {
    int e = -1;  // subnormal: shift the leading 1 into the implicit bit
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    bits = sign | ((112u - (uint)e) << 23) | ((mantissa & 0x3FFu) << 13);
  }
  return as_float(bits);
}

__kernel void embedding_baseline(__global const ushort* table, __global const int* ids, __global float* out,
                                 const uint vocab, const uint dim, const uint n) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const int row = ids[i];
  for (uint j = 0; j < dim; ++j) {
    out[(size_t)i * dim + j] = row < 0 || row >= (int)vocab ? NAN : widen(table[(size_t)row * dim + j]);
  }
}
)CLC";

// Work-items per group: a few, so that n = 8 ids still make one group; the global size is rounded up to a whole
// group and the work-items past n return at once.
constexpr size_t k_local = 8;

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
    std::fprintf(stderr, "embedding: clCreateProgramWithSource failed (%d)\n", err);
    return nullptr;
  }
  err = clBuildProgram(program, 1, &device, nullptr, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::vector<char> log(size + 1, '\0');
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    std::fprintf(stderr, "embedding: clBuildProgram failed (%d):\n%s\n", err, log.data());
    clReleaseProgram(program);
    return nullptr;
  }
  return program;
}

// The call's tensors, checked against the task signature: table [vocab, dim] f16 and ids [n] i32 in, out [n, dim]
// f32, compact row-major OpenCL buffers. Anything else is refused rather than guessed at.
struct Lookup {
  cl_mem table;
  cl_mem ids;
  cl_mem out;
  int64_t vocab;
  int64_t dim;
  int64_t n;
};

// A cl_mem cannot be offset from the host, so a nonzero byte_offset is refused too (kwb passes 0).
bool is_compact_opencl(const DLTensor& t, int32_t ndim, uint8_t code, uint8_t bits) {
  if (t.device.device_type != kDLOpenCL || t.ndim != ndim || t.byte_offset != 0) return false;
  if (t.dtype.code != code || t.dtype.bits != bits || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0 || t.shape[d] > INT32_MAX) return false;  // the kernel takes the dims as uint, ids as int
  }
  return t.strides == nullptr;  // DLPack: NULL strides mean compact row-major
}

std::optional<Lookup> unpack(const kwb_call& call) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& table = call.inputs[0];
  const DLTensor& ids = call.inputs[1];
  const DLTensor& out = call.outputs[0];
  if (!is_compact_opencl(table, 2, kDLFloat, 16) || !is_compact_opencl(ids, 1, kDLInt, 32) ||
      !is_compact_opencl(out, 2, kDLFloat, 32)) {
    return std::nullopt;
  }
  if (out.shape[0] != ids.shape[0] || out.shape[1] != table.shape[1]) return std::nullopt;
  return Lookup{static_cast<cl_mem>(table.data), static_cast<cl_mem>(ids.data), static_cast<cl_mem>(out.data),
                table.shape[0], table.shape[1], ids.shape[0]};
}

}  // namespace

// Returns 1 when the backend is not OpenCL, 2 when the program does not build (the log is on stderr), 3 when the
// kernel cannot be created.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
  const auto context = static_cast<cl_context>(ctx->device_context);
  const auto device = static_cast<cl_device_id>(ctx->device);
  g_state.program = build(context, device, k_source);
  if (g_state.program == nullptr) return 2;
  cl_int err = CL_SUCCESS;
  g_state.kernel = clCreateKernel(g_state.program, "embedding_baseline", &err);
  return err == CL_SUCCESS ? 0 : 3;
}

// Returns 1 when the call does not match the task signature, 3 when OpenCL refuses an argument or the launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Lookup> p = unpack(*call);
  if (!p) return 1;
  if (p->n == 0 || p->dim == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const cl_uint vocab = static_cast<cl_uint>(p->vocab), dim = static_cast<cl_uint>(p->dim);
  const cl_uint n = static_cast<cl_uint>(p->n);
  const size_t local = k_local;
  const size_t global = (static_cast<size_t>(n) + local - 1) / local * local;
  cl_kernel k = g_state.kernel;
  cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &p->table);
  err |= clSetKernelArg(k, 1, sizeof(cl_mem), &p->ids);
  err |= clSetKernelArg(k, 2, sizeof(cl_mem), &p->out);
  err |= clSetKernelArg(k, 3, sizeof vocab, &vocab);
  err |= clSetKernelArg(k, 4, sizeof dim, &dim);
  err |= clSetKernelArg(k, 5, sizeof n, &n);
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
