// Test candidate for `kwb profile`: known_work.cpp with 0 iterations of the known loop (keep the two identical
// except for k_iterations; the test subtracts this one from the other).
//
// known_work(n) executes 2 + 4n instructions: `test`, `jz` once, then n times `nop; nop; dec; jnz`. The loop count
// is read from a volatile at run time, so this file and known_work_zero.cpp (the same code with 0 iterations)
// compile to identical instructions and differ only in the value of g_iterations. Under callgrind the difference of
// their instructions per call must therefore be exactly 4 * k_iterations: anything else means the measurement
// window holds more (or less) than kwb_run. The RMSNorm itself is plain scalar code with a double accumulator, so
// it passes the check on every case of tasks/rmsnorm.
#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>

KWB_CANDIDATE_ABI

namespace {

constexpr uint64_t k_iterations = 0;
volatile uint64_t g_iterations = k_iterations;

__attribute__((noinline)) void known_work(uint64_t n) {
  asm volatile(
      "test %0, %0\n\t"
      "jz 2f\n"
      "1:\n\t"
      "nop\n\t"
      "nop\n\t"
      "dec %0\n\t"
      "jnz 1b\n"
      "2:\n"
      : "+r"(n)
      :
      : "cc");
}

}  // namespace

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  if (call->num_inputs != 2 || call->num_outputs != 1 || call->inputs[0].ndim != 2) return 1;
  const DLTensor& xt = call->inputs[0];
  const int64_t rows = xt.shape[0];
  const int64_t cols = xt.shape[1];
  const float* x = static_cast<const float*>(xt.data);
  const float* w = static_cast<const float*>(call->inputs[1].data);
  float* y = static_cast<float*>(call->outputs[0].data);
  const double eps = kwb_scalar_or(call, "eps", 1e-6);
  known_work(g_iterations);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += static_cast<double>(x[r * cols + c]) * x[r * cols + c];
    const double inv_rms = 1.0 / std::sqrt(sum / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = static_cast<float>(x[r * cols + c] * inv_rms * w[c]);
  }
  return 0;
}
