#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test (CTest + GoogleTest).
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
if ! bash scripts/build.sh "$preset" >/dev/null; then
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
