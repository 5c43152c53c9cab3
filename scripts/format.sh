#!/usr/bin/env bash
# kwb's C++ formatting (.clang-format), held by a test: `scripts/format.sh --check` (the format_check test, run by the
# README's test command) fails naming every file clang-format would change; `scripts/format.sh` rewrites them.
# The version is pinned: clang-format 14, Debian 12's, installed by scripts/setup.sh (another version formats some
# constructs differently, and a check that depends on the machine is no check).
# What is formatted: kwb's own C++ (src/, the test programs, bench/). Not formatted: include/kwb/ (the public ABI
# headers, whose bytes are part of every candidate's build identity), tasks/ and the test candidates (sources kwb
# builds and hashes as implementations: their text is data), generators/ and third_party/.
set -euo pipefail
cd "$(dirname "$0")/.."
clang_format=clang-format-14
if ! command -v "$clang_format" >/dev/null; then
  echo "scripts/format.sh: $clang_format is not installed; scripts/setup.sh installs it (apt install clang-format-14)" >&2
  exit 2
fi
# Glob pathspecs: a plain 'tests/*.h' would match every header below tests/, the candidates' too.
mapfile -t files < <(git ls-files -- ':(glob)src/**/*.cpp' ':(glob)src/**/*.h' ':(glob)tests/unit/*.cpp' \
  ':(glob)tests/unit/*.h' ':(glob)tests/integration/*.cpp' ':(glob)tests/integration/*.h' \
  ':(glob)tests/support/*.h' ':(glob)tests/support/*.cpp' \
  ':(glob)tests/*.h' ':(glob)tests/fuzz/*.cpp' ':(glob)bench/*.cpp' ':(glob)bench/*.h')
if [ ${#files[@]} -eq 0 ]; then
  echo "scripts/format.sh: git lists no C++ files here (not a git checkout?); nothing to check" >&2
  exit 77
fi
if [ "${1:-}" = "--check" ]; then
  # One clang-format for every file (a process per file cost 36 s of the test command's CPU); its diagnostics name
  # the files it would change ("FILE:LINE:COL: error: code should be clang-formatted").
  bad=()
  if ! report="$("$clang_format" --dry-run -Werror "${files[@]}" 2>&1)"; then
    mapfile -t bad < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: .*/\1/p' <<<"$report" | sort -u)
    if [ ${#bad[@]} -eq 0 ]; then
      printf 'scripts/format.sh: %s failed without naming a file:\n%s\n' "$clang_format" "$report" >&2
      exit 2
    fi
  fi
  if [ ${#bad[@]} -gt 0 ]; then
    printf 'scripts/format.sh: %d of %d files are not formatted (.clang-format, clang-format 14); run scripts/format.sh to fix:\n' \
      "${#bad[@]}" "${#files[@]}" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "scripts/format.sh: ${#files[@]} files formatted"
  exit 0
fi
"$clang_format" -i "${files[@]}"
