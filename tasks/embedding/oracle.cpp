// The embedding task's oracle (include/kwb/oracle.h): out[i, :] = table[ids[i], :]. Every value arrives as the
// exact double of the candidate's f16 or i32, and a copy needs no arithmetic, so the oracle is a loop of copies; its
// one judgement is the domain: an id outside [0, vocab) is refused, naming it (no law of the task draws one).
#include "kwb/oracle.h"

#include <cinttypes>
#include <cstdio>

extern "C" int kwb_oracle(const kwb_oracle_args* args) {
  if (args->num_inputs != 2 || args->num_outputs != 1) {
    std::snprintf(args->error, args->error_capacity, "expected 2 inputs (table, ids) and 1 output (out)");
    return 1;
  }
  const kwb_oracle_tensor& table = args->inputs[0];
  const kwb_oracle_tensor& ids = args->inputs[1];
  const kwb_oracle_tensor& out = args->outputs[0];
  if (table.ndim != 2 || ids.ndim != 1 || out.ndim != 2 || out.shape[0] != ids.shape[0] ||
      out.shape[1] != table.shape[1]) {
    std::snprintf(args->error, args->error_capacity, "shapes: table [vocab, dim], ids [n], out [n, dim]");
    return 1;
  }
  const int64_t vocab = table.shape[0], dim = table.shape[1], n = ids.shape[0];
  for (int64_t i = 0; i < n; ++i) {
    const double id = ids.data[i];
    if (!(id >= 0.0 && id < static_cast<double>(vocab))) {
      std::snprintf(args->error, args->error_capacity,
                    "ids[%" PRId64 "] = %.0f is outside the table's %" PRId64 " rows: the ids' law must stay within "
                    "[0, vocab - 1]",
                    i, id, vocab);
      return 1;
    }
    const int64_t row = static_cast<int64_t>(id);
    for (int64_t j = 0; j < dim; ++j) out.data[i * dim + j] = table.data[row * dim + j];
  }
  return 0;
}
