// A neighbour that comes and goes: copies 16 MiB blocks of a 64 MiB buffer for 10-200 ms, sleeps 10-200 ms, forever.
// bench/honest_under_load.sh runs it beside kwb to load the machine the way a shared host does: in bursts, hitting
// the caches and the memory bus. Kill it to stop it.
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long ms_since(const struct timespec* t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

int main(void) {
  const size_t n = (size_t)64 << 20;
  char* a = malloc(n);
  char* b = malloc(n);
  if (!a || !b) return 1;
  memset(a, 1, n);
  memset(b, 2, n);
  srand((unsigned)getpid());
  for (;;) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const long on = 10 + rand() % 190;
    while (ms_since(&t0) < on) {
      memcpy(b, a, n / 8);
      memcpy(a + n / 2, b, n / 8);
    }
    usleep((useconds_t)(10 + rand() % 190) * 1000);
  }
}
