# shellcheck shell=bash
# Sourced by the bench/*.sh scripts: repo root, the kwb binary, a results folder, a clock, and run_kwb.
# KWB: the kwb binary (default build/ci/kwb, else build/dev/kwb). BENCH_OUT: where the raw JSON goes (default: a
# new folder under /tmp). KWB_CACHE_DIR is passed through to kwb (its build cache).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2
KWB="${KWB:-build/ci/kwb}"
if [[ ! -x "$KWB" ]]; then KWB=build/dev/kwb; fi
if [[ ! -x "$KWB" ]]; then
  echo "no kwb binary: build one (scripts/build.sh) or set KWB=path/to/kwb" >&2
  exit 2
fi
export task=tasks/rmsnorm
out="${BENCH_OUT:-$(mktemp -d /tmp/kwb-bench.XXXXXX)}"
mkdir -p "$out"
export PYTHONDONTWRITEBYTECODE=1  # summary.py is imported from bench/: leave no __pycache__ there
now() { date +%s.%N; }

# run_kwb NAME ARGS...: kwb ARGS --json > $out/NAME.json, wall seconds of the whole command > $out/NAME.wall.
# compare exits 1-3 for FAIL/INCONCLUSIVE/INVALID: those are results here, anything else is an error.
run_kwb() {
  local name="$1" rc=0 t0
  shift
  t0="$(now)"
  "$KWB" "$@" --json >"$out/$name.json" || rc=$?
  python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$(now)" >"$out/$name.wall"
  if ((rc > 3)); then
    echo "kwb failed (exit $rc): $KWB $*" >&2
    return "$rc"
  fi
}
