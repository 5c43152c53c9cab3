#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test (CTest + GoogleTest).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-ci}"
bash scripts/build.sh "$preset" >/dev/null
# The MCP client the mcp_client test drives kwb mcp with: a test-only tool from PyPI, in a virtual environment of
# the build folder (the product itself depends on nothing from PyPI).
venv="build/$preset/mcp-venv"
if ! "$venv/bin/python" -c "import mcp" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/mcp/requirements.txt
fi
ctest --preset "$preset" -j "$(nproc)"
