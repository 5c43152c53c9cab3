#!/usr/bin/env bash
# bench/fuzz.sh [SECONDS]: fuzz what kwb reads from others. Builds the libFuzzer targets in build/fuzz (clang,
# AddressSanitizer + UBSan over kwb_core), seeds them from the repository (the golden bundle, flattened; every
# task.toml) and runs each for SECONDS (default 300). Prints runs, crashes and hangs per target; exit 1 if any
# target found one (the reproducer is kept under build/fuzz/findings/).
#   bundle_fuzz: verify_bundle + write_reports on a bundle written from the input (tests/fuzz/bundle_fuzz.cpp)
#   task_fuzz:   load_task on the input as task.toml (tests/fuzz/task_fuzz.cpp)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
secs="${1:-300}"
build=build/fuzz
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DKWB_FUZZ=ON -DKWB_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target bundle_fuzz task_fuzz >/dev/null

mkdir -p "$build/corpus/bundle" "$build/corpus/task" "$build/findings"
# A bundle flattened into the input format: "\n@@ <path>\n<content>" per file.
python3 - "$root/tests/golden/bundle_decode" "$build/corpus/bundle/golden" <<'PY'
import os, sys
src, dst = sys.argv[1], sys.argv[2]
out = bytearray()
for dirpath, _, files in os.walk(src):
    for f in sorted(files):
        p = os.path.join(dirpath, f)
        rel = os.path.relpath(p, src)
        if rel.startswith("artifacts/"):
            continue  # binaries: large, and the reader only hashes them
        out += b"\n@@ " + rel.encode() + b"\n" + open(p, "rb").read()
open(dst, "wb").write(out)
PY
i=0
for t in tasks/*/task.toml tests/adversarial/tasks/*/task.toml; do
  cp "$t" "$build/corpus/task/seed$((i++)).toml"
done

status=0
for target in bundle_fuzz task_fuzz; do
  corpus="$build/corpus/${target%_fuzz}"
  log="$build/$target.log"
  rc=0
  "$build/tests/fuzz/$target" "$corpus" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -max_len=1048576 \
    -artifact_prefix="$build/findings/$target-" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  runs="$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')"
  crashes="$(find "$build/findings" -name "$target-crash-*" | wc -l)"
  hangs="$(find "$build/findings" -name "$target-timeout-*" | wc -l)"
  ooms="$(find "$build/findings" -name "$target-oom-*" | wc -l)"
  echo "$target: ${secs} s, $runs runs, $crashes crashes, $hangs hangs, $ooms out-of-memory (libFuzzer exit $rc; log $log)"
  if ((rc != 0 || crashes + hangs + ooms > 0)); then status=1; fi
done
exit "$status"
