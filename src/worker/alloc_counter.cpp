// kwb-profile-worker only: counts the heap allocations an implementation makes during kwb_run.
//
// Why interposition in the worker rather than a valgrind tool: it works without valgrind (so allocations are
// reported on machines where valgrind is missing or cannot run the artifact), it costs a few instructions per
// allocation instead of a 20-50x slowdown, and it counts exactly the window the worker chooses (kwb_run), where
// massif or dhat would count the whole process and need their output attributed afterwards. The timing worker
// (kwb-worker) never links this file: an interposed malloc there would change what is being timed.
//
// Mechanism: this executable defines the C allocation functions, so the dynamic linker binds every reference to
// them, the implementation's and libstdc++'s (operator new, new[] and the aligned forms all end in malloc or
// aligned_alloc), to these definitions; the link exports them explicitly (src/CMakeLists.txt). Each forwards to
// glibc's own entry point (__libc_malloc, ...), which never calls back into the public names, so there is no
// recursion to guard against. Counting is on only between kwb_alloc_counter_start() and _stop(), which the worker
// calls immediately around kwb_run; allocations of the harness (JSON, tensors) and of dlopen are not counted.
// Counting happens at the C level only, so one operator new is one allocation, never two.
#include <malloc.h>
#include <stdlib.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

// glibc's own allocator entry points, which the counter forwards to: their names are glibc's, reserved to it.
// NOLINTBEGIN(bugprone-reserved-identifier)
extern "C" {
void* __libc_malloc(size_t size);
void __libc_free(void* p);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void* __libc_valloc(size_t size);
void* __libc_pvalloc(size_t size);
}
// NOLINTEND(bugprone-reserved-identifier)

namespace {

// Relaxed atomics: the candidate may start threads (it should not on a threads = 1 task, but counting must not be
// a data race if it does); the window itself is ordered by the worker's own thread.
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_allocations{0};
std::atomic<uint64_t> g_bytes{0};
std::atomic<uint64_t> g_frees{0};

inline void count_allocation(const void* p, size_t bytes) {
  if (p == nullptr || !g_counting.load(std::memory_order_relaxed)) return;
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

inline void count_free(const void* p) {
  if (p == nullptr || !g_counting.load(std::memory_order_relaxed)) return;
  g_frees.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

// The worker's side (declared in worker_main.cpp under KWB_PROFILE_WORKER).
extern "C" void kwb_alloc_counter_start() {
  g_allocations.store(0, std::memory_order_relaxed);
  g_bytes.store(0, std::memory_order_relaxed);
  g_frees.store(0, std::memory_order_relaxed);
  g_counting.store(true, std::memory_order_seq_cst);
}

extern "C" void kwb_alloc_counter_stop(uint64_t* allocations, uint64_t* bytes, uint64_t* frees) {
  g_counting.store(false, std::memory_order_seq_cst);
  *allocations = g_allocations.load(std::memory_order_relaxed);
  *bytes = g_bytes.load(std::memory_order_relaxed);
  *frees = g_frees.load(std::memory_order_relaxed);
}

// ---- the interposed C allocation functions ----------------------------------------------------------------------

extern "C" {

void* malloc(size_t size) noexcept {
  void* p = __libc_malloc(size);
  count_allocation(p, size);
  return p;
}

void free(void* p) noexcept {
  count_free(p);
  __libc_free(p);
}

void* calloc(size_t n, size_t size) noexcept {
  void* p = __libc_calloc(n, size);
  count_allocation(p, n * size);  // __libc_calloc returned non-null, so n * size did not overflow
  return p;
}

// A realloc may move the block: it is counted as one allocation of the new size (and no free), which is what it
// costs in the worst case. realloc(p, 0) frees.
void* realloc(void* p, size_t size) noexcept {
  if (p != nullptr && size == 0) count_free(p);
  void* q = __libc_realloc(p, size);
  count_allocation(q, size);
  return q;
}

void* reallocarray(void* p, size_t n, size_t size) noexcept {
  size_t bytes = 0;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(p, bytes);
}

void* memalign(size_t alignment, size_t size) noexcept {
  void* p = __libc_memalign(alignment, size);
  count_allocation(p, size);
  return p;
}

void* aligned_alloc(size_t alignment, size_t size) noexcept { return memalign(alignment, size); }

int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0 || alignment == 0) return EINVAL;
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  count_allocation(p, size);
  *out = p;
  return 0;
}

void* valloc(size_t size) noexcept {
  void* p = __libc_valloc(size);
  count_allocation(p, size);
  return p;
}

void* pvalloc(size_t size) noexcept {
  void* p = __libc_pvalloc(size);
  count_allocation(p, size);
  return p;
}

}  // extern "C"
