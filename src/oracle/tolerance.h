// Element-wise comparison of an implementation's output with the oracle's.
#pragma once

#include "task/task.h"

#include <cstdint>
#include <optional>
#include <span>

namespace kwb {

struct ElementReport {
  size_t index = 0;
  double got = 0.0;
  double expected = 0.0;
};

struct OutputComparison {
  size_t elements = 0;
  size_t value_mismatches = 0;      // finite expected, finite got, outside atol + rtol * |expected|
  size_t nonfinite_mismatches = 0;  // NaN/Inf where the oracle has none, or the oracle's NaN/Inf not reproduced
  size_t poison_left = 0;           // elements still holding this call's poison pattern: never written
  double max_abs_error = 0.0;       // over finite elements; 0 unless ErrorStats::compute
  double max_rel_error = 0.0;       // over finite elements with |expected| > 0; 0 unless ErrorStats::compute
  // How much of the tolerance the worst finite element used: max |got - expected| / (atol + rtol * |expected|), so
  // 1 is the limit (where atol dominates, the relative error alone says little); 0 unless ErrorStats::compute.
  double max_tolerance_used = 0.0;
  std::optional<ElementReport> first_value_mismatch;
  std::optional<ElementReport> first_nonfinite_mismatch;
};

// Whether compare_output computes the error maxima (a division per element): check reports them; a timed call's
// validation only needs the verdict.
enum class ErrorStats { compute, skip };

// Within tolerance: |got - expected| <= what the output's tolerance allows at `expected` (task.h, Tolerance: abs_rel,
// ulp or exact; an integer or boolean dtype is always exact). Non-finite values must agree exactly in kind
// (NaN with NaN, +Inf with +Inf). `poison` is the pattern written before the call, in its low bytes at the dtype's
// width. The counts and the first mismatches are exact whatever `stats` says.
OutputComparison compare_output(std::span<const unsigned char> got, DType dtype, std::span<const double> expected,
                                const Tolerance& tol, uint64_t poison, ErrorStats stats = ErrorStats::compute);

// Whether compare_output may use the CPU's vector unit for its plain-fine pass (AVX2, where the CPU has it; on by
// default). Its results are the same either way; tests turn it off to compare the two.
void allow_vector_compare(bool allowed);

// What `tol` allows |got - expected| to be at `expected`, for an output of `dtype` (ulp mode measures in its units).
double allowed_error(double expected, const Tolerance& tol, DType dtype);
bool within_tolerance(double got, double expected, const Tolerance& tol, DType dtype);

}  // namespace kwb
