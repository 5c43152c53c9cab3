/*
 * kwb oracle interface — what a task's reference implementation (its oracle) exports.
 *
 * A task names one C or C++ source file, `oracle = "oracle.cpp"` in task.toml, that computes the task's outputs from
 * its inputs as the task's author defines them. kwb compiles it for accuracy (-O2 -ffp-contract=off, no fast-math)
 * and runs it in a sandboxed worker process of its own, never in kwb and never beside a candidate. It exports one
 * C function:
 *
 *     int kwb_oracle(const kwb_oracle_args* args);
 *
 * Every tensor arrives as double, whatever its dtype in the task: inputs are the exact values the candidate sees,
 * converted to double (exactly: every dtype kwb knows is a subset of double), and outputs are written as double,
 * which kwb compares with the candidate's outputs within the task's tolerance. One interface thus serves every
 * dtype, and the oracle may compute in any precision it likes inside (long double, compensated sums).
 *
 * Return 0 on success. On any other return value kwb stops with a task error (exit 65) that names the oracle's file
 * and quotes the message written to args->error (NUL-terminated, at most args->error_capacity bytes including the
 * NUL). A crash, an abort or a call that runs past kwb's time limit is likewise a task error naming the file.
 * Outputs start as NaN: an element the oracle leaves unwritten stays NaN, and every candidate then disagrees there.
 *
 * Inputs are read-only (a write faults). Shapes are row-major and compact. Scalars come in signature order, with
 * the case's overrides applied.
 */
#ifndef KWB_ORACLE_H
#define KWB_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of the structs below. */
#define KWB_ORACLE_VERSION 1u

typedef struct kwb_oracle_tensor {
  const char* name;      /* as in task.toml */
  int32_t ndim;
  const int64_t* shape;  /* ndim dimensions, row-major */
  int64_t elements;      /* the product of the dimensions */
  double* data;          /* inputs: read-only; outputs: write every element */
} kwb_oracle_tensor;

typedef struct kwb_oracle_args {
  uint32_t version;                   /* KWB_ORACLE_VERSION */
  int32_t num_inputs;
  const kwb_oracle_tensor* inputs;    /* in signature order */
  int32_t num_outputs;
  const kwb_oracle_tensor* outputs;   /* in signature order */
  int32_t num_scalars;
  const char* const* scalar_names;    /* in signature order */
  const double* scalars;
  char* error;                        /* a message on failure: what was wrong with the inputs, say */
  size_t error_capacity;
} kwb_oracle_args;

int kwb_oracle(const kwb_oracle_args* args);

#ifdef __cplusplus
}
#endif

#endif /* KWB_ORACLE_H */
