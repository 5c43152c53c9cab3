/*
 * kwb candidate ABI — the only public header of kwb.
 *
 * An implementation (baseline, candidate, control) is one C or C++ source file that kwb compiles into a shared
 * object and loads inside a worker process. It exports these C functions:
 *
 *     KWB_CANDIDATE_ABI                          (required: declares the ABI version it was written against)
 *     int  kwb_setup(const kwb_context* ctx);    (optional: once per process, untimed)
 *     int  kwb_run(const kwb_call* call);        (required: the timed call)
 *     void kwb_teardown(void);                   (optional: once per process, untimed)
 *
 * Return 0 for success from kwb_setup and kwb_run; any other value is recorded as a failure of that call.
 * Tensors are DLPack DLTensors. On the cpu backend `data` is host memory: inputs are mapped read-only (a write is
 * a fault and is reported as input mutation), outputs are filled with a poison pattern before every call and are
 * surrounded by canaries and guard pages. The candidate must write every output element on every call.
 *
 * Everything here is plain C so that candidates may be C or C++. See docs/candidate-abi.md for a full example.
 */
#ifndef KWB_KERNEL_H
#define KWB_KERNEL_H

#include <dlpack/dlpack.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of the structs or functions below. */
#define KWB_ABI_VERSION 1u

#if defined(__GNUC__)
#define KWB_EXPORT __attribute__((visibility("default")))
#else
#define KWB_EXPORT
#endif

typedef enum kwb_backend {
  KWB_BACKEND_CPU = 1,
  KWB_BACKEND_OPENCL = 2,
  KWB_BACKEND_CUDA = 3
} kwb_backend;

/* A named task scalar (e.g. eps). Always passed as double; the task's signature says what it means. */
typedef struct kwb_scalar {
  const char* name;
  double value;
} kwb_scalar;

/* Handed to kwb_setup once per worker process. Nothing here is timed. */
typedef struct kwb_context {
  uint32_t abi_version;     /* KWB_ABI_VERSION of the harness */
  kwb_backend backend;
  void* device_context;     /* cl_context on opencl, NULL on cpu and cuda (the current CUDA context is set) */
  void* device;             /* cl_device_id on opencl; on cuda a pointer to the int device ordinal; NULL on cpu */
  void* stream;             /* cl_command_queue / cudaStream_t the runs will use; NULL on cpu */
  int32_t max_threads;      /* threads the task permits the candidate to use (1 = stay single-threaded) */
  const char* task_name;
} kwb_context;

/* One call of the kernel. Pointers are valid for the duration of the call only. */
typedef struct kwb_call {
  uint32_t abi_version;
  int32_t num_inputs;
  const DLTensor* inputs;        /* in signature order; read-only */
  const char* const* input_names;
  int32_t num_outputs;
  const DLTensor* outputs;       /* in signature order; write every element */
  const char* const* output_names;
  int32_t num_scalars;
  const kwb_scalar* scalars;     /* in signature order */
  void* stream;                  /* same as kwb_context.stream */
} kwb_call;

typedef int (*kwb_setup_fn)(const kwb_context* ctx);
typedef int (*kwb_run_fn)(const kwb_call* call);
typedef void (*kwb_teardown_fn)(void);

/* Put this once at file scope in every implementation. */
#ifdef __cplusplus
#define KWB_CANDIDATE_ABI extern "C" KWB_EXPORT const uint32_t kwb_abi_version = KWB_ABI_VERSION;
#else
#define KWB_CANDIDATE_ABI KWB_EXPORT const uint32_t kwb_abi_version = KWB_ABI_VERSION;
#endif

KWB_EXPORT int kwb_setup(const kwb_context* ctx);
KWB_EXPORT int kwb_run(const kwb_call* call);
KWB_EXPORT void kwb_teardown(void);

/* Convenience for candidates: a scalar by name, or `fallback` when absent. */
static inline double kwb_scalar_or(const kwb_call* call, const char* name, double fallback) {
  for (int32_t i = 0; i < call->num_scalars; ++i) {
    const char* a = call->scalars[i].name;
    const char* b = name;
    while (*a && *a == *b) { ++a; ++b; }
    if (*a == *b) return call->scalars[i].value;
  }
  return fallback;
}

#ifdef __cplusplus
}
#endif

#endif /* KWB_KERNEL_H */
