// What the parent does around every timed call, on one call's buffers, outside any timed window but inside every
// block: writing the poison and the canaries, copying the inputs in, capturing the outputs, checking the canaries and
// validating every element against the oracle's doubles. Built and run by bench/run_parent_work.sh.
//
// Prints the median microseconds per call of each step, at rmsnorm's prefill size (64 x 4096 f32 in and out) and
// decode size (1 x 4096), with the validation's vector pass (AVX2 where the CPU has it) and without (the scalar pass
// every CPU runs).
#include "oracle/tolerance.h"
#include "worker/shared_buffer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

namespace {

double median_us(int reps, const std::function<void()>& step) {
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

void run(const char* name, size_t elements, int reps) {
  const size_t bytes = elements * sizeof(float);
  kwb::SharedBuffer out("bench-out", bytes, 48);
  std::vector<unsigned char> input(bytes, 0x3c), slot(bytes), at_done(bytes);
  std::vector<double> expected(elements);
  for (size_t i = 0; i < elements; ++i) expected[i] = std::sin(static_cast<double>(i));
  const uint64_t poison = 0x7FC0ABCDu;
  const kwb::Tolerance tol{kwb::ToleranceMode::abs_rel, 1e-5, 1e-5};
  std::printf("%s (%zu f32 elements, %zu KiB out)\n", name, elements, bytes / 1024);
  std::printf("  poison fill           %8.1f us\n", median_us(reps, [&] { out.fill_pattern(poison, 4); }));
  std::printf("  canaries (write+check)%8.1f us\n", median_us(reps, [&] {
                out.write_canaries(7);
                if (out.damaged_canary(7)) std::abort();
              }));
  std::printf("  input copy            %8.1f us\n",
              median_us(reps, [&] { std::memcpy(slot.data(), input.data(), bytes); }));
  // The kernel's result: the oracle's values rounded to f32.
  auto d = out.data();
  for (size_t i = 0; i < elements; ++i) {
    const float v = static_cast<float>(expected[i]);
    std::memcpy(d.data() + 4 * i, &v, 4);
  }
  std::printf("  capture at done       %8.1f us\n",
              median_us(reps, [&] { std::memcpy(at_done.data(), std::as_const(out).data().data(), bytes); }));
  for (bool vector : {true, false}) {
    kwb::allow_vector_compare(vector);
    std::printf("  validate (%s)    %8.1f us\n", vector ? "vector" : "scalar", median_us(reps, [&] {
                  const auto c = kwb::compare_output(std::as_const(out).data(), kwb::DType::f32, expected, tol, poison,
                                                     kwb::ErrorStats::skip);
                  if (c.value_mismatches + c.nonfinite_mismatches + c.poison_left != 0) std::abort();
                }));
  }
  kwb::allow_vector_compare(true);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 400;
  run("prefill", 64 * 4096, reps);
  run("decode", 4096, reps * 20);
  return 0;
}
