// Independent oracles: scalar reference math written from each task's definition, in long double with
// compensated summation. They share no code with any implementation, and run only in the parent.
#pragma once

#include "task/task.h"

#include <functional>
#include <span>
#include <string>
#include <vector>

namespace kwb {

struct TensorView {
  const unsigned char* data = nullptr;
  DType dtype = DType::f32;
  std::vector<int64_t> dims;
  size_t elements() const;
  double at(size_t i) const;  // element i as double
};

// Computes every output (as double, rounded once from long double) from the inputs and scalars.
using OracleFn = std::function<std::vector<std::vector<double>>(std::span<const TensorView> inputs,
                                                                std::span<const double> scalars)>;

// nullptr when no oracle has that name.
const OracleFn* find_oracle(const std::string& name);
std::vector<std::string> oracle_names();

// Neumaier's variant of Kahan summation (Neumaier 1974): the error stays O(u) independent of n even when terms
// are larger than the running sum.
class CompensatedSum {
public:
  void add(long double x);
  long double value() const { return m_sum + m_c; }

private:
  long double m_sum = 0.0L;
  long double m_c = 0.0L;
};

}  // namespace kwb
