// The cross_entropy task's oracle (include/kwb/oracle.h): per row r of logits [rows, vocab],
//
//   loss[r] = logsumexp(logits[r, :]) - logits[r, targets[r]]
//           = (m_r - logits[r, t]) + log(sum_c exp(logits[r, c] - m_r)),   m_r = max_c logits[r, c],
//
// written from the definition, one row at a time, shared with no implementation. Subtracting the row's maximum
// changes nothing mathematically and keeps every exponent <= 0, so nothing overflows even at logits of +-1e4, and
// the sum is at least 1 (the maximum's own term is exp(0)), so its log never meets 0. Everything is in double (the
// inputs are float32 values, exact in double); the exponentials are summed with Neumaier's compensated summation
// (Neumaier 1974: the error stays O(u) whatever the row's length), so the result is good to ~1e-15 relative, far
// below the float32 tolerance it is compared with.
//
// Non-finite logits follow IEEE arithmetic of the max-subtracted formula rather than a convention of their own:
//   - a -inf logit (a masked token) contributes exp(-inf) = 0 to the sum. If the target itself is masked, the loss
//     is m - (-inf) = +inf: a model that gives the right answer probability 0 has an infinite loss. Legal, and
//     every honest implementation gets +inf there too.
//   - a row that is entirely -inf has m = -inf, and logits - m = -inf - -inf = NaN: its loss is NaN (the row is no
//     distribution at all; torch.nn.functional.cross_entropy gives NaN as well). The task's masked case avoids such
//     rows by design (10% of the logits masked in rows of 2000: the chance of a whole row is 0.1^2000), so no
//     implementation's convention for them is ever judged; the oracle still defines them, here, rather than leave
//     them to chance.
//   - a NaN or a +inf logit anywhere in the row makes its loss NaN (+inf is the row's max, and exp(inf - inf) is
//     NaN), as torch's log_softmax and this task's softmax oracle give.
//
// A target outside [0, vocab) (or not an integer) is refused with a message naming it: no law of the task draws one
// (targets are randint from 0 to vocab - 1 at every shape).
#include "kwb/oracle.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>

namespace {

class CompensatedSum {
public:
  void add(double x) {
    const double t = m_sum + x;
    if (std::fabs(m_sum) >= std::fabs(x)) {
      m_c += (m_sum - t) + x;
    } else {
      m_c += (x - t) + m_sum;
    }
    m_sum = t;
  }
  double value() const { return m_sum + m_c; }

private:
  double m_sum = 0.0;
  double m_c = 0.0;
};

constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();
constexpr double k_inf = std::numeric_limits<double>::infinity();

// One row's loss; `target` is a valid column.
double row_loss(const double* logits, int64_t vocab, int64_t target) {
  double m = -k_inf;
  for (int64_t c = 0; c < vocab; ++c) {
    const double v = logits[c];
    if (std::isnan(v) || v == k_inf) return k_nan;  // NaN, or exp(inf - inf): the row is NaN
    if (v > m) m = v;
  }
  if (m == -k_inf) return k_nan;  // every logit masked: -inf - -inf, no distribution (see above)
  CompensatedSum sum;
  for (int64_t c = 0; c < vocab; ++c) sum.add(std::exp(logits[c] - m));  // exp(-inf) = 0 for a masked logit
  // sum >= 1, so log(sum) >= 0; m - logits[target] >= 0 and is +inf for a masked target.
  return (m - logits[target]) + std::log(sum.value());
}

int fail(const kwb_oracle_args* args, const char* message) {
  std::snprintf(args->error, args->error_capacity, "%s", message);
  return 1;
}

}  // namespace

extern "C" int kwb_oracle(const kwb_oracle_args* args) {
  if (args->num_inputs != 2 || args->num_outputs != 1) {
    return fail(args, "cross_entropy expects 2 inputs (logits, targets) and 1 output (loss)");
  }
  const kwb_oracle_tensor& logits = args->inputs[0];
  const kwb_oracle_tensor& targets = args->inputs[1];
  const kwb_oracle_tensor& loss = args->outputs[0];
  if (logits.ndim != 2 || targets.ndim != 1 || loss.ndim != 1 || targets.shape[0] != logits.shape[0] ||
      loss.shape[0] != logits.shape[0]) {
    return fail(args, "cross_entropy: shapes must be logits [rows, vocab], targets [rows], loss [rows]");
  }
  const int64_t rows = logits.shape[0], vocab = logits.shape[1];
  if (rows > 0 && vocab < 1) return fail(args, "cross_entropy: a row needs at least one logit (vocab >= 1)");
  for (int64_t r = 0; r < rows; ++r) {
    const double t = targets.data[r];
    if (!(t >= 0.0 && t < static_cast<double>(vocab)) || t != std::floor(t)) {
      std::snprintf(args->error, args->error_capacity,
                    "targets[%" PRId64 "] = %g is not a column of the row's %" PRId64 " logits: the targets' law "
                    "must stay within [0, vocab - 1]",
                    r, t, vocab);
      return 1;
    }
    loss.data[r] = row_loss(logits.data + r * vocab, vocab, static_cast<int64_t>(t));
  }
  return 0;
}
