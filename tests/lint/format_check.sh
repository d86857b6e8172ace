#!/usr/bin/env bash
# The C++ sources follow the repository's .clang-format: clang-format-14 --dry-run --Werror over
# every tracked *.cc, *.h and *.inc file except generated ones (a "// GENERATED" line at the
# top, e.g. plugin_api/src/base/unicode_tables.inc).
#
#   usage: tests/lint/format_check.sh [SOURCE_DIR]   (default: this checkout)
#
# Exit status 0 when every file is formatted, 1 otherwise (the offending lines are printed), 77
# (skipped) without clang-format-14 ($CLANG_FORMAT overrides the binary) or outside a git
# checkout. To fix a file: clang-format-14 -i FILE.
set -u
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
  sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 0
fi
SRC="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
CLANG_FORMAT="${CLANG_FORMAT:-clang-format-14}"
if ! command -v "$CLANG_FORMAT" >/dev/null; then
  echo "skipped: $CLANG_FORMAT is not installed (apt-get install clang-format-14)"
  exit 77
fi
cd "$SRC" || exit 1
if ! files="$(git ls-files '*.cc' '*.h' '*.inc' 2>/dev/null)"; then
  echo "skipped: $SRC is not a git checkout"
  exit 77
fi
checked=()
skipped=0
while IFS= read -r f; do
  [[ -f "$f" ]] || continue  # deleted in the working tree
  if head -n 5 "$f" | grep -q '^// GENERATED'; then
    skipped=$((skipped + 1))
    continue
  fi
  checked+=("$f")
done <<<"$files"
if ((${#checked[@]} == 0)); then
  echo "no C++ files found under $SRC"
  exit 1
fi
if "$CLANG_FORMAT" --style=file --dry-run --Werror "${checked[@]}"; then
  echo "${#checked[@]} files formatted ($skipped generated files skipped)"
  exit 0
fi
echo "some of ${#checked[@]} files are not formatted: $CLANG_FORMAT -i FILE"
exit 1
