#include "oracle/oracle.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

namespace kwb {

size_t TensorView::elements() const {
  size_t n = 1;
  for (int64_t d : dims) n *= static_cast<size_t>(d);
  return n;
}

double TensorView::at(size_t i) const {
  if (dtype == DType::f32) {
    float f;
    std::memcpy(&f, data + 4 * i, 4);
    return f;
  }
  double d;
  std::memcpy(&d, data + 8 * i, 8);
  return d;
}

void CompensatedSum::add(long double x) {
  long double t = m_sum + x;
  if (std::fabs(m_sum) >= std::fabs(x)) {
    m_c += (m_sum - t) + x;
  } else {
    m_c += (x - t) + m_sum;
  }
  m_sum = t;
}

namespace {

// y[r, c] = x[r, c] / sqrt(mean_c x[r, c]^2 + eps) * weight[c], from the definition: one row at a time,
// squares and their sum in long double (64-bit mantissa on x86) with compensation.
std::vector<std::vector<double>> rmsnorm(std::span<const TensorView> inputs, std::span<const double> scalars) {
  if (inputs.size() != 2 || scalars.size() != 1) {
    throw std::invalid_argument("oracle rmsnorm expects inputs (x, weight) and scalars (eps)");
  }
  const TensorView& x = inputs[0];
  const TensorView& w = inputs[1];
  if (x.dims.empty() || w.dims.size() != 1 || w.dims[0] != x.dims.back()) {
    throw std::invalid_argument("oracle rmsnorm: weight must be 1-D with the length of x's last axis");
  }
  const size_t cols = static_cast<size_t>(x.dims.back());
  const size_t rows = x.elements() / cols;
  const long double eps = scalars[0];
  std::vector<double> y(x.elements());
  for (size_t r = 0; r < rows; ++r) {
    CompensatedSum sum;
    for (size_t c = 0; c < cols; ++c) {
      long double v = x.at(r * cols + c);
      sum.add(v * v);
    }
    long double inv_rms = 1.0L / std::sqrt(sum.value() / static_cast<long double>(cols) + eps);
    for (size_t c = 0; c < cols; ++c) {
      y[r * cols + c] = static_cast<double>(static_cast<long double>(x.at(r * cols + c)) * inv_rms * w.at(c));
    }
  }
  return {std::move(y)};
}

const std::map<std::string, OracleFn>& registry() {
  static const std::map<std::string, OracleFn> oracles = {{"rmsnorm", rmsnorm}};
  return oracles;
}

}  // namespace

const OracleFn* find_oracle(const std::string& name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<std::string> oracle_names() {
  std::vector<std::string> names;
  for (const auto& [k, v] : registry()) names.push_back(k);
  return names;
}

}  // namespace kwb
