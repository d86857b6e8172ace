#!/usr/bin/env bash
# usage: bash tools/bench/gpu_carry.sh [--first-mib N] [--mib N] OUTDIR FILE...
#
# Packs FILEs (e.g. the second model's GGUF and its .spts.bin) for the lent GPU machine, which
# has no network and takes at most 64 MiB per call with the checkout: one tar stream cut into
# OUTDIR/p00, p01, ... (p00 is --first-mib MiB, default 33, to ride along with the build call's
# packages; the others --mib MiB, default 56), OUTDIR/pay.sha256, and the device calls printed:
#   call 1 ... call N-1  carry [OUTDIR/pNN]   cp OUTDIR/pNN /root/pay/
#   call N               carry [OUTDIR/pNN, OUTDIR/pay.sha256]
#                        cp ...; sha256 of the parts checked, then cat /root/pay/p?? | tar x -C /root/models
# On a warm machine each such call costs about 4 s of device time; keep them back to back (the
# machine is given back 30 s after a call). OUTDIR must be ignored by git (e.g. under .gpu-kit/).
# A build started in the background on call 1 is waited for by its log, never with `pgrep -f`
# (that matches the waiting command's own command line and never ends):
#   until grep -qE '=== DONE|FATAL' /root/bout/build.log; do sleep 2; done
set -euo pipefail

die() { echo "gpu_carry.sh: error: $*" >&2; exit 2; }
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
first=33 size=56
while [[ "${1:-}" == --* ]]; do
  case "$1" in
    --first-mib) first="${2:-}"; shift 2 ;;
    --mib) size="${2:-}"; shift 2 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ "$first" =~ ^[1-9][0-9]*$ && "$size" =~ ^[1-9][0-9]*$ ]] || die "sizes must be whole MiB"
(($# >= 2)) || die "need OUTDIR and at least one FILE (see --help)"
out="$1"
shift
for f in "$@"; do [[ -f "$f" ]] || die "$f is not a file"; done
git check-ignore -q "$out" 2> /dev/null || echo "warning: $out is not ignored by git: it would travel with every call" >&2

mkdir -p "$out"
rm -f "$out"/p?? "$out/pay.sha256"
tarball="$out/pay.tar"
args=()
for f in "$@"; do args+=(-C "$(cd "$(dirname "$f")" && pwd)" "$(basename "$f")"); done  # -C is cumulative: absolute
tar cf "$tarball" "${args[@]}"
head -c $((first * 1048576)) "$tarball" > "$out/p00"
tail -c +$((first * 1048576 + 1)) "$tarball" | split -b $((size * 1048576)) -d -a 2 --numeric-suffixes=1 - "$out/p"
sha256sum "$tarball" | cut -d' ' -f1 > "$out/pay.sha256"
rm -f "$tarball"
[[ -s "$out/p01" ]] || rm -f "$out/p01"

parts=("$out"/p??)
n=${#parts[@]}
echo "$n parts of $(du -cb "${parts[@]}" | tail -1 | cut -f1) bytes in $out; sha256 $(cat "$out/pay.sha256")"
for ((i = 0; i < n; i++)); do
  p="${parts[$i]}"
  if ((i < n - 1)); then
    echo "call $((i + 1)): carry [\"$p\"]"
    echo "  mkdir -p /root/pay && cp $p /root/pay/"
  else
    echo "call $((i + 1)): carry [\"$p\", \"$out/pay.sha256\"]"
    echo "  mkdir -p /root/pay /root/models && cp $p /root/pay/ && test \"\$(cat /root/pay/p?? | sha256sum | cut -d' ' -f1)\" = \"\$(cat $out/pay.sha256)\" && cat /root/pay/p?? | tar xf - -C /root/models && ls -la /root/models"
  fi
done
echo "(call 1 can carry p00 with the build's packages and sources: see docs/results/gpu.md)"
