#!/usr/bin/env bash
# Installs the Debian packages kwb needs to build, test and run, and nothing else. Idempotent: packages already
# present are left alone and apt is not touched at all when nothing is missing. chromium-headless-shell is for one
# test: a campaign's report.html opened in a real browser (tests/campaign/report_in_browser.py); clang-format-14 is the
# pinned formatter the format_check test holds the tree to (scripts/format.sh), clang-tidy-14 the linter of the tidy
# test (scripts/tidy.py, .clang-tidy); universal-ctags finds the functions the function_lengths test measures
# (scripts/function_lengths.py); ccache is the build cache every build compiles through (CMakeLists.txt).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libfmt-dev libssl-dev libseccomp-dev libdlpack-dev
  libsqlite3-dev libcurl4-openssl-dev libgtest-dev libgmock-dev python3-jsonschema
  valgrind bubblewrap python3-venv clang-format-14 clang-tidy-14 universal-ctags ccache
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd
  chromium-headless-shell
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "kwb setup: installing ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "kwb setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
