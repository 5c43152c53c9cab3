#!/usr/bin/env bash
# The README's test command on fresh clones, as CI runs it: N times, each in a new clone of HEAD under /tmp, one after
# another. Prints per run the whole wall time; the ci build's and the asan build's (ninja's logs, first start to last
# end); CTest's; the tests passed (CTest's, then the unit tests under ASan); and ccache's hits and misses.
# Warm (the default): the machine's build cache (ccache) and tidy cache as they are, which is what a developer who
# built kwb before, and CI on this machine, start from. BENCH_COLD=1: each run gets empty caches of its own, as on a
# new machine. Run nothing else on the machine meanwhile: on 2 vCPUs any other work shows directly.
# Usage: [BENCH_COLD=1] bench/test_time.sh [N=3]          (~10 min per run warm on a 2-vCPU VM, ~35 cold)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
runs="${1:-3}"
head="$(git -C "$root" rev-parse --short HEAD)"
walls=()
row='%-4s %-9s %-5s %7s %8s %7s %8s %13s  %s\n'
printf "$row" run commit cache wall_s build_s asan_s ctest_s ccache_hit/miss tests
span() { # a ninja log's first start to last end, in seconds
  awk 'NR > 1 { if (min == "" || $1 < min) min = $1; if ($2 > max) max = $2 }
    END { printf "%.0f", (max - min) / 1000 }' "$1" 2>/dev/null || echo "?"
}
for ((i = 1; i <= runs; i++)); do
  dir="$(mktemp -d /tmp/kwb-test-time.XXXXXX)"
  chmod 755 "$dir"
  git clone -q "$root" "$dir/kwb"
  chmod 755 "$dir/kwb"
  cache=warm
  env=(CI=true)
  if [[ "${BENCH_COLD:-0}" == 1 ]]; then
    cache=cold
    env+=(CCACHE_DIR="$dir/ccache" KWB_TIDY_CACHE="$dir/tidy-cache")
  fi
  env "${env[@]}" ccache -z >/dev/null 2>&1 || true
  t0="$(date +%s.%N)"
  rc=0
  (cd "$dir/kwb" && env "${env[@]}" bash .ci/run) >"$dir/log" 2>&1 || rc=$?
  wall="$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.0f}')" "$t0" "$(date +%s.%N)")"
  ctest_s="$(sed -n 's/^Total Test time (real) = *\([0-9.]*\) sec/\1/p' "$dir/log" | tail -1)"
  hits="$(env "${env[@]}" ccache --print-stats 2>/dev/null | awk '/^direct_cache_hit|^preprocessed_cache_hit/ {
    h += $2 } /^cache_miss/ { m = $2 } END { printf "%d/%d", h, m }' || echo "?")"
  tests="$(grep -E '^[0-9]+% tests passed|unit tests passed under ASan' "$dir/log" | paste -sd';' || true)"
  if ((rc != 0)); then tests="FAILED (exit $rc; log kept: $dir/log)"; fi
  printf "$row" "$i" "$head" "$cache" "$wall" "$(span "$dir/kwb/build/ci/.ninja_log")" \
    "$(span "$dir/kwb/build/asan/.ninja_log")" "${ctest_s%.*}" "$hits" "$tests"
  walls+=("$wall")
  if ((rc == 0)); then rm -rf "$dir"; fi
done
printf 'wall: min %s s, max %s s over %s runs\n' "$(printf '%s\n' "${walls[@]}" | sort -n | head -1)" \
  "$(printf '%s\n' "${walls[@]}" | sort -n | tail -1)" "$runs"
