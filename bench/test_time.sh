#!/usr/bin/env bash
# The README's test command on fresh clones, as CI runs it: N times, each in a new clone of HEAD under /tmp, one after
# another. Prints per run the whole wall time, the build's (ninja's log, first start to last end) and CTest's, and the
# tests passed; then the range. Run nothing else on the machine meanwhile: on 2 vCPUs any other work shows directly.
# Usage: bench/test_time.sh [N=3]                         (~7 min per run on a 2-vCPU VM)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
runs="${1:-3}"
head="$(git -C "$root" rev-parse --short HEAD)"
walls=()
printf '%-4s %-9s %8s %8s %8s  %s\n' run commit wall_s build_s ctest_s tests
for ((i = 1; i <= runs; i++)); do
  dir="$(mktemp -d /tmp/kwb-test-time.XXXXXX)"
  git clone -q "$root" "$dir/kwb"
  t0="$(date +%s.%N)"
  rc=0
  (cd "$dir/kwb" && CI=true bash .ci/run) >"$dir/log" 2>&1 || rc=$?
  wall="$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.0f}')" "$t0" "$(date +%s.%N)")"
  build="$(awk 'NR > 1 { if (min == "" || $1 < min) min = $1; if ($2 > max) max = $2 } END { printf "%.0f", (max - min) / 1000 }' \
    "$dir/kwb/build/ci/.ninja_log" 2>/dev/null || echo "?")"
  ctest_s="$(sed -n 's/^Total Test time (real) = *\([0-9.]*\) sec/\1/p' "$dir/log" | tail -1)"
  tests="$(grep -E '^[0-9]+% tests passed' "$dir/log" | tail -1)"
  if ((rc != 0)); then tests="FAILED (exit $rc; log kept: $dir/log)"; fi
  printf '%-4s %-9s %8s %8s %8s  %s\n' "$i" "$head" "$wall" "$build" "${ctest_s%.*}" "$tests"
  walls+=("$wall")
  if ((rc == 0)); then rm -rf "$dir"; fi
done
printf 'wall: min %s s, max %s s over %s runs\n' "$(printf '%s\n' "${walls[@]}" | sort -n | head -1)" \
  "$(printf '%s\n' "${walls[@]}" | sort -n | tail -1)" "$runs"
