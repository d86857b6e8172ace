#!/usr/bin/env bash
# Every binary of tools/ and daemon/ answers the shared command line's way
# (tools/common/command_line.h), and every shell script under tools/ answers --help:
#   TOOL --help            exit status 0, a "usage: " line on stdout
#   TOOL --no-such-option  exit status 2, one line "TOOL...: error: ..." on stderr, nothing on
#                          stdout
# and the same for every command listed under "commands:" in a tool's help (TOOL COMMAND --help,
# TOOL COMMAND --no-such-option).
#
#   usage: tests/lint/tools_help_test.sh SOURCE_DIR NAME=PATH...
#
# CMake (tests/lint/CMakeLists.txt) passes every executable target defined under tools/ and
# daemon/, so a new tool is checked without being listed anywhere. Nothing here loads a model.
set -u
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
  sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 0
fi
SRC="$1"
shift
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0

fail() {
  failed=$((failed + 1))
  printf 'FAIL %s\n' "$*"
}

# check_help LABEL COMMAND...: exit 0 and a "usage: " line on stdout.
check_help() {
  local label="$1" rc
  shift
  "$@" --help >"$TMP/out" 2>"$TMP/err" </dev/null
  rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "$label --help: exit $rc (expected 0); stderr: $(head -c 600 "$TMP/err")"
  elif ! grep -q '^usage: ' "$TMP/out"; then
    fail "$label --help: no 'usage: ' line on stdout: $(head -c 600 "$TMP/out")"
  else
    passed=$((passed + 1))
  fi
}

# check_bogus LABEL PREFIXES COMMAND...: exit 2, one line "PREFIX: error: ..." on stderr (PREFIXES:
# alternatives, a|b).
check_bogus() {
  local label="$1" prefix="$2" rc lines
  shift 2
  "$@" --no-such-option >"$TMP/out" 2>"$TMP/err" </dev/null
  rc=$?
  lines="$(wc -l <"$TMP/err")"
  if [[ $rc -ne 2 ]]; then
    fail "$label --no-such-option: exit $rc (expected 2); stderr: $(head -c 600 "$TMP/err")"
  elif [[ "$lines" -ne 1 ]] || ! grep -Eq "^($prefix): error: " "$TMP/err"; then
    fail "$label --no-such-option: expected one line '$prefix: error: ...' on stderr, got" \
      "$lines: $(head -c 600 "$TMP/err")"
  elif [[ -s "$TMP/out" ]]; then
    fail "$label --no-such-option: wrote to stdout: $(head -c 300 "$TMP/out")"
  else
    passed=$((passed + 1))
  fi
}

# The command names under "commands:" in a help text (up to the next blank line).
commands_of() {
  awk '/^commands:$/ { on = 1; next } on && /^$/ { on = 0 } on && /^  [a-z]/ { print $1 }' "$1"
}

tools=0
for arg in "$@"; do
  name="${arg%%=*}"
  path="${arg#*=}"
  if [[ ! -x "$path" ]]; then
    fail "$name: $path is not built"
    continue
  fi
  tools=$((tools + 1))
  check_help "$name" "$path"
  cp "$TMP/out" "$TMP/help"
  check_bogus "$name" "$name" "$path"
  for command in $(commands_of "$TMP/help"); do
    check_help "$name $command" "$path" "$command"
    check_bogus "$name $command" "$name $command|$name" "$path" "$command"
  done
done

# Shell scripts: --help only (their other arguments are modes and options of their own).
scripts=0
while IFS= read -r script; do
  scripts=$((scripts + 1))
  check_help "${script#"$SRC"/}" bash "$script"
done < <(find "$SRC/tools" -name '*.sh' -not -path '*/.venv*' | sort)

echo "$tools binaries, $scripts scripts: $passed passed, $failed failed"
[[ $tools -gt 0 && $failed -eq 0 ]]
