#!/usr/bin/env bash
# Issue 46: the device carries every tracked file (64 MiB a call, wheels included) and reports/ alone is ~40 MB.
# `slim_tree.sh on` takes reports/ and docs/*.png out of the index and ignores them (.git/info/exclude) for the
# call; `slim_tree.sh off` puts both back exactly (index from HEAD, exclude lines removed). Refused when those
# paths have uncommitted changes, so nothing can be lost. The suite deselects the tests that read them
# (.ci/device/cuda_suite.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
PATHS=(reports docs/default_report.png)
MARK='# slim_tree (.ci/device/slim_tree.sh off removes these)'
case "${1:-}" in
  on)
    if [ -n "$(git status --porcelain -- "${PATHS[@]}")" ]; then
      echo "slim_tree: ${PATHS[*]} have uncommitted changes; commit or stash them first" >&2; exit 2
    fi
    { echo "$MARK"; echo '/reports/'; echo '/docs/default_report.png'; } >> .git/info/exclude
    git rm -r -q --cached -- "${PATHS[@]}"
    echo "slim_tree on: $(git ls-files | xargs -d '\n' du -cb 2>/dev/null | tail -1 | cut -f1) bytes tracked" ;;
  off)
    git reset -q -- "${PATHS[@]}"
    python3 - "$MARK" <<'PY'
import pathlib, sys
p = pathlib.Path(".git/info/exclude"); lines = p.read_text().splitlines()
if sys.argv[1] in lines:
    i = lines.index(sys.argv[1]); del lines[i:i + 3]
p.write_text("\n".join(lines) + "\n")
PY
    git status --short -- "${PATHS[@]}"; echo "slim_tree off" ;;
  *) echo "usage: .ci/device/slim_tree.sh on|off" >&2; exit 2 ;;
esac
