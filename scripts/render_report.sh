#!/usr/bin/env bash
# Renders a bundle's report.html in headless Chromium (Debian's `chromium`, installed here if missing) to a PNG, and
# checks that the page came up with its plots: the DOM Chromium built must hold the decision and at least three SVGs
# per workload. Usage: scripts/render_report.sh BUNDLE_DIR [OUT.png]
set -euo pipefail
bundle="${1:?usage: scripts/render_report.sh BUNDLE_DIR [OUT.png]}"
png="${2:-$bundle/report.png}"
html="$(cd "$bundle" && pwd)/report.html"
[[ -f "$html" ]] || { echo "$html: missing (run kwb report $bundle first)" >&2; exit 65; }
if ! command -v chromium >/dev/null; then
  [[ "$(id -u)" -eq 0 ]] || { echo "chromium is not installed (apt-get install chromium)" >&2; exit 69; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --allow-file-access-from-files)
dom="$(chromium "${flags[@]}" --dump-dom "file://$html" 2>/dev/null)"
svgs="$(grep -o '<svg' <<<"$dom" | wc -l)"
decision="$(grep -o 'class="badge"[^>]*>[A-Z_]*<' <<<"$dom" | sed 's/.*>\([A-Z_]*\)</\1/' | head -1)"
chromium "${flags[@]}" --window-size=1000,2600 --screenshot="$png" "file://$html" >/dev/null 2>&1
[[ -s "$png" ]] || { echo "no screenshot was written" >&2; exit 1; }
echo "rendered $html: decision $decision, $svgs SVG plots; screenshot $png"
[[ -n "$decision" && "$svgs" -ge 3 ]]
