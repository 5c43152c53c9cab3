// The topk task's oracle (include/kwb/oracle.h), written from the definition and shared with no implementation:
// for each row r of x [rows, n], the k largest entries in descending order, values [rows, k] and their column
// indices [rows, k] (0 to n - 1, relative to the row, as torch.topk gives them).
//
// The order is total and defined by the task: a larger value ranks first, and equal values rank by ascending
// index, the order a stable sort into descending order leaves them in. So the oracle sorts each row's column indices
// with std::stable_sort on the value alone (descending): equal values keep their original, ascending, index order.
// Comparisons are IEEE: -inf is the smallest value (entries of -inf are chosen, by ascending index, only when a row
// has fewer than k larger ones), +inf the largest; -0 and +0 are equal (a tie). The task's inputs never hold NaN
// (no case draws any and kwb's twins never make one): a NaN is refused here with a message, not given an order.
//
// Values are copied, never computed, so they are exact in double; indices are integers below 2^53.
#include "kwb/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

namespace {

int fail(const kwb_oracle_args* args, const char* message) {
  std::snprintf(args->error, args->error_capacity, "%s", message);
  return 1;
}

}  // namespace

extern "C" int kwb_oracle(const kwb_oracle_args* args) {
  if (args->num_inputs != 1 || args->num_outputs != 2) {
    return fail(args, "topk expects one input (x) and two outputs (values, indices)");
  }
  const kwb_oracle_tensor& x = args->inputs[0];
  const kwb_oracle_tensor& values = args->outputs[0];
  const kwb_oracle_tensor& indices = args->outputs[1];
  if (x.ndim != 2 || values.ndim != 2 || indices.ndim != 2) return fail(args, "topk: x, values, indices are 2-D");
  const int64_t rows = x.shape[0];
  const int64_t n = x.shape[1];
  const int64_t k = values.shape[1];
  if (values.shape[0] != rows || indices.shape[0] != rows || indices.shape[1] != k) {
    return fail(args, "topk: values and indices must both be [rows, k]");
  }
  if (k < 1 || k > n) return fail(args, "topk: the task requires 1 <= k <= n");

  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const double* in = x.data + r * n;
    for (int64_t c = 0; c < n; ++c) {
      if (std::isnan(in[c])) return fail(args, "topk: x holds a NaN; the task's inputs never do");
    }
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [in](int64_t a, int64_t b) { return in[a] > in[b]; });
    for (int64_t j = 0; j < k; ++j) {
      values.data[r * k + j] = in[order[static_cast<size_t>(j)]];
      indices.data[r * k + j] = static_cast<double>(order[static_cast<size_t>(j)]);
    }
  }
  return 0;
}
