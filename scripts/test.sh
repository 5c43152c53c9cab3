#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test (CTest + GoogleTest), then the unit tests
# again under AddressSanitizer and UBSan. Formatting (format_check), clang-tidy (tidy) and the function-length limit
# (function_lengths) are CTest tests of the first run. Both builds compile through ccache where it is installed
# (CMakeLists.txt), so a fresh clone on a machine that built kwb before compiles little.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-ci}"
bash scripts/setup.sh
# The MCP client the mcp_client test drives kwb mcp with: a test-only tool from PyPI, in a virtual environment of
# the build folder (the product itself depends on nothing from PyPI). Installed while kwb builds: it waits on the
# network more than on the CPU.
venv="build/$preset/mcp-venv"
make_venv() {
  if ! "$venv/bin/python" -c "import mcp, jsonschema" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/mcp/requirements.txt
  fi
}
mkdir -p build
make_venv > "build/$preset-venv.log" 2>&1 &
venv_pid=$!
if ! bash scripts/build.sh "$preset" >/dev/null || ! bash scripts/build.sh asan >/dev/null; then
  wait "$venv_pid" || true
  exit 1
fi
if ! wait "$venv_pid"; then
  cat "build/$preset-venv.log" >&2
  echo "scripts/test.sh: could not install the MCP client into $venv (log above)" >&2
  exit 1
fi
# Twice as many tests at once as CPUs: the tests that run beside each other never time (tests/CMakeLists.txt) and
# spend much of their time waiting (sandboxes set up, processes started, files synced), so on 2 CPUs -j 4 took that
# group from 215 s to 183 s (bench/README.md). The tests that time still run alone (RUN_SERIAL).
ctest --preset "$preset" -j "$((2 * $(nproc)))"
# The unit tests under AddressSanitizer and UBSan (the asan preset: Debug with line tables, not unity;
# CMakePresets.json), as one process per CPU, each a GoogleTest shard: ASan's start-up in each of 432 processes
# (ctest --preset asan) cost twice the time of the tests. The options are the asan test preset's.
shards="$(nproc)"
pids=()
for ((i = 0; i < shards; i++)); do
  ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 GTEST_TOTAL_SHARDS="$shards" GTEST_SHARD_INDEX="$i" \
    build/asan/tests/kwb_unit_tests --gtest_brief=1 >"build/asan/unit-shard-$i.log" 2>&1 &
  pids+=($!)
done
failed=0
for ((i = 0; i < shards; i++)); do
  if ! wait "${pids[$i]}"; then
    cat "build/asan/unit-shard-$i.log" >&2
    failed=1
  fi
done
if ((failed)); then
  echo "scripts/test.sh: the unit tests failed under ASan/UBSan (build/asan/unit-shard-*.log, above)" >&2
  exit 1
fi
awk '/^\[  PASSED  \]/ { n += $4 } END { printf "scripts/test.sh: %d unit tests passed under ASan and UBSan\n", n }' \
  build/asan/unit-shard-*.log
