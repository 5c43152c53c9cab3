// One loop over indices, spread over threads: the timing pool's input sets and their oracle calls are made this way.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace kwb {

// Runs work(thread, i) for every i in [0, count), on `threads` threads (thread = 0 .. threads - 1; on the calling
// thread alone when threads <= 1), each taking the next index in order. After a failure no thread takes another
// index, and the exception of the earliest index that failed is rethrown: every index before it was taken and ran
// to its end, so it is the one a loop in order would have thrown.
template <typename Work>
void for_each_index(size_t count, size_t threads, Work&& work) {
  if (threads <= 1) {
    for (size_t i = 0; i < count; ++i) work(size_t{0}, i);
    return;
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::exception_ptr> errors(count);
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t i = next++; i < count && !failed; i = next++) {
        try {
          work(t, i);
        } catch (...) {
          errors[i] = std::current_exception();
          failed = true;
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace kwb
