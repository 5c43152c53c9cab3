#!/usr/bin/env bash
# The cuda backend's device checks, for a bare GPU machine (an H200 with nvcc, cmake, ninja and g++, but no package
# registry): builds kwb with the `ci` preset, then runs the rmsnorm task's cuda implementations through kwb check,
# profile and compare and keeps everything they print.
#
#   tests/gpu/run.sh [OUT_DIR] [--budget SECONDS]
#
# OUT_DIR (default ./gpu-results/<timestamp>) receives summary.txt (one line per step: expected outcome, exit code,
# wall time), every step's output, nvidia-smi -q before and after, and the build logs. --budget is the time for each
# of the two compares (default 90 s), split evenly over the task's three timing workloads. Measured on an H200
# (docs/backends.md, "Seen on an H200"): about 8 minutes with --budget 45 (build 67 s, checks 62 s, profiles 44 s,
# each compare about 146 s: dram's ten-block floor outlasts a short budget), about 9 with the default.
#
# Nothing stops at the first failure: every step runs and is recorded. The exit code is 0 when every expected-pass
# step exited 0, every control and adversarial candidate was rejected (exit 1) and each compare reached a verdict
# (an A/A on a short budget may well end INCONCLUSIVE, exit 2), 1 otherwise.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=""
budget=90
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) budget=${2:?--budget needs a number of seconds}; shift 2 ;;
    --budget=*) budget=${1#--budget=}; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1 (expected [OUT_DIR] [--budget SECONDS])" >&2; exit 64 ;;
    *) out=$1; shift ;;
  esac
done
case "$budget" in
  ''|*[!0-9]*) echo "run.sh: --budget $budget: expected whole seconds, e.g. 90" >&2; exit 64 ;;
esac
out=${out:-./gpu-results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"/{check,profile,compare}
out=$(cd "$out" && pwd)
summary=$out/summary.txt
failures=0

# A fresh artifact cache per run: every implementation is built by this run's nvcc, nothing comes from elsewhere.
export KWB_CACHE_DIR=${KWB_CACHE_DIR:-$out/cache}
# CMake finds the toolkit through the nvcc on PATH, and kwb builds candidates with that nvcc.
if ! command -v nvcc >/dev/null; then
  for dir in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
    if [ -n "$dir" ] && [ -x "$dir/bin/nvcc" ]; then export PATH=$dir/bin:$PATH; break; fi
  done
fi

printf '%-34s %-7s %4s %8s  %-6s %s\n' step expect rc seconds status command > "$summary"

# kwb compiles candidates only inside bubblewrap; the GPU machine's image has none, so the vendored one
# (scripts/vendor_third_party.sh) goes first on PATH, through a wrapper naming its libraries where the machine
# lacks them (ldd says "not found").
if ! command -v bwrap >/dev/null && [ -x "$root/third_party/bin/bwrap" ]; then
  if ldd "$root/third_party/bin/bwrap" | grep -q 'not found'; then
    mkdir -p "$out/bin"
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$root/third_party/bin/lib" "$root/third_party/bin/bwrap" \
      > "$out/bin/bwrap"
    chmod 755 "$out/bin/bwrap"
    export PATH=$out/bin:$PATH
  else
    export PATH=$root/third_party/bin:$PATH
  fi
fi

# step NAME EXPECT TIMEOUT_S OUTFILE CMD...: runs CMD with its stdout in OUTFILE and its stderr in OUTFILE.log and
# records it. EXPECT is pass (exit 0), reject (exit 1: a control or cheat the check must refuse), verdict (a timing
# verb that reached a verdict: exit 0 PASS, 1 FAIL, 2 INCONCLUSIVE or 3 INVALID; 4 and above are kwb's or the input's
# errors) or info (any).
step() {
  local name=$1 expect=$2 limit=$3 file=$4
  shift 4
  local t0 t1 rc status seconds
  echo "== $name: $*" >&2
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" < /dev/null > "$file" 2> "$file.log"
  rc=$?
  t1=$(date +%s.%N)
  case "$expect" in
    pass) if [ "$rc" -eq 0 ]; then status=ok; else status=FAIL; fi ;;
    reject) if [ "$rc" -eq 1 ]; then status=ok; else status=FAIL; fi ;;
    verdict) if [ "$rc" -le 3 ]; then status=ok; else status=FAIL; fi ;;
    *) status=- ;;
  esac
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status="$status(timeout ${limit}s)"; fi
  [ "${status%%(*}" = FAIL ] && failures=$((failures + 1))
  seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  printf '%-34s %-7s %4s %8s  %-6s %s\n' "$name" "$expect" "$rc" "$seconds" "$status" "$*" >> "$summary"
  echo "   -> rc $rc ($status)" >&2
  return 0
}

# note TEXT: a line in the summary that is not a step (what was found, a reason that was or was not reported).
note() { echo "# $*" >> "$summary"; echo "   $*" >&2; }

# ---- the machine ----------------------------------------------------------------------------------------------------
step nvidia-smi info 60 "$out/nvidia-smi.txt" nvidia-smi -q
step nvidia-smi-list info 60 "$out/nvidia-smi-L.txt" nvidia-smi -L
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname)"
  echo "kwb commit: $(git -C "$root" rev-parse HEAD 2>/dev/null)," \
    "$(git -C "$root" status --porcelain 2>/dev/null | wc -l) changed file(s)"
  echo "kernel: $(uname -r)"
  echo "nvcc: $(command -v nvcc) $(nvcc --version 2>/dev/null | grep release)"
  echo "cmake: $(cmake --version 2>/dev/null | head -1)"
  echo "ninja: $(ninja --version 2>/dev/null)"
  echo "c++: $(c++ --version 2>/dev/null | head -1)"
  echo "PATH=$PATH"
  echo "device nodes: $(ls /dev/nvidia* 2>/dev/null | tr '\n' ' ')"
  echo "libcuda: $(ldconfig -p 2>/dev/null | grep 'libcuda\.so\.1' | head -1)"
  echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>} KWB_CUDA_DEVICE=${KWB_CUDA_DEVICE-<unset>}"
  echo "bwrap: $(command -v bwrap) $(bwrap --version 2>&1)"
  echo "compare budget: ${budget}s each"
} > "$out/provenance.txt"

# ---- build ----------------------------------------------------------------------------------------------------------
# Tests off: GoogleTest is not among the third-party libraries and the machine has no registry; the device checks
# below are what this machine is for. With the vendored libraries, no -Werror: that machine's compiler is newer than
# CI's (g++ 13 warns -Warray-bounds inside fmt's headers, 2026-12-04), and CI holds the warning gate; the build log
# keeps every warning.
cmake_args=(--preset ci -DKWB_BUILD_TESTS=OFF)
if [ -d "$root/third_party" ]; then cmake_args+=("-DKWB_THIRD_PARTY=$root/third_party" -DKWB_WERROR=OFF); fi
cd "$root" || exit 1
step configure pass 300 "$out/configure.txt" cmake "${cmake_args[@]}"
if grep -q "kwb: CUDA backend with toolkit" "$out/configure.txt"; then
  note "configure: $(grep 'kwb: CUDA backend' "$out/configure.txt" | sed 's/^-- //')"
else
  note "configure: the cuda backend was NOT built (no CUDA toolkit or CUPTI found): every cuda step will exit 69"
fi
step build pass 600 "$out/build.txt" cmake --build --preset ci
if [ ! -x build/ci/kwb ] && grep -q -- '-Werror' "$out/build.txt"; then
  # A compiler newer than the one the code was checked with may warn where it did not: -Werror would then cost the
  # whole device session, so retry without it (the failed -Werror build stays recorded above).
  step configure-no-werror info 300 "$out/configure-no-werror.txt" cmake "${cmake_args[@]}" -DKWB_WERROR=OFF
  step build-no-werror info 600 "$out/build-no-werror.txt" cmake --build --preset ci
fi
kwb=$root/build/ci/kwb
step kwb-version pass 30 "$out/kwb-version.txt" "$kwb" --version
# The worker must not be linked against CUDA (it starts, and reports "unavailable", on machines without it).
step worker-ldd info 30 "$out/worker-ldd.txt" ldd "$root/build/ci/kwb-worker"
if grep -q 'libcudart\|libcupti\|libcuda\.' "$out/worker-ldd.txt"; then
  note "worker-ldd: kwb-worker is linked against CUDA; it must open it with dlopen"
  failures=$((failures + 1))
fi
if [ ! -x "$kwb" ]; then
  note "no kwb binary: nothing else can run"
  step nvidia-smi-after info 60 "$out/nvidia-smi-after.txt" nvidia-smi -q -d CLOCK,TEMPERATURE,PERFORMANCE
  echo "summary: $summary" >&2
  exit 1
fi

# ---- check ----------------------------------------------------------------------------------------------------------
task=tasks/rmsnorm
cuda=$task/cuda
for impl in baseline fused; do
  step "check $impl" pass 300 "$out/check/$impl.json" "$kwb" check "$task" --backend cuda --impl "$cuda/$impl.cu" --json
done

# Each control must be rejected (exit 1), and for the reason it was written to provoke (the JSON's failure reasons;
# no_eps may also show as nan_mismatch on the zeros case).
while read -r control reason; do
  step "check control $control" reject 300 "$out/check/control_$control.json" \
    "$kwb" check "$task" --backend cuda --control "$control" --json
  if grep -q "\"reason\": *\"$reason\"" "$out/check/control_$control.json"; then
    note "control $control: reported $reason, as expected"
  else
    note "control $control: WARNING: no $reason failure reported (see check/control_$control.json)"
  fi
done <<'EOF'
no_eps numeric_mismatch
no_weight numeric_mismatch
wrong_axis numeric_mismatch
zeros numeric_mismatch
mutate_input input_modified
stale_output_replay stale_output
EOF

# The side-stream cheat: correct output, but on a private stream; the trace must say so.
step "check adversarial other_stream" reject 300 "$out/check/adversarial_other_stream.json" \
  "$kwb" check "$task" --backend cuda --impl tests/adversarial/cuda/other_stream.cu --json
if grep -q '"reason": *"work_off_queue"' "$out/check/adversarial_other_stream.json"; then
  note "adversarial other_stream: reported work_off_queue, as expected"
else
  note "adversarial other_stream: WARNING: no work_off_queue failure reported (see check/adversarial_other_stream.json)"
fi

# ---- profile --------------------------------------------------------------------------------------------------------
profile_dir_flag=false
if "$kwb" profile --help 2>/dev/null | grep -q -- '--output-dir'; then profile_dir_flag=true; fi
for impl in baseline fused; do
  args=("$kwb" profile "$task" --backend cuda --impl "$cuda/$impl.cu" --json)
  if $profile_dir_flag; then args+=(--output-dir "$out/profile/$impl"); fi
  step "profile $impl" pass 300 "$out/profile/$impl.json" "${args[@]}"
done

# ---- compare --------------------------------------------------------------------------------------------------------
# --max-minutes is per timing workload; the task has three (decode, prefill, dram).
per_workload=$(awk -v b="$budget" 'BEGIN { printf "%.3f", b / 3 / 60 }')
limit=$((budget + 240))
step "compare aa" verdict "$limit" "$out/compare/aa.txt" "$kwb" compare "$task" --backend cuda --aa \
  --baseline "$cuda/baseline.cu" --max-minutes "$per_workload" --output-dir "$out/compare/aa"
step "compare fused_vs_baseline" verdict "$limit" "$out/compare/fused_vs_baseline.txt" "$kwb" compare "$task" \
  --backend cuda --baseline "$cuda/baseline.cu" --candidate "$cuda/fused.cu" --max-minutes "$per_workload" \
  --output-dir "$out/compare/fused_vs_baseline"

step nvidia-smi-after info 60 "$out/nvidia-smi-after.txt" nvidia-smi -q -d CLOCK,TEMPERATURE,PERFORMANCE

echo >&2
cat "$summary" >&2
echo "results: $out" >&2
if [ "$failures" -gt 0 ]; then
  echo "run.sh: $failures step(s) did not end as expected" >&2
  exit 1
fi
exit 0
