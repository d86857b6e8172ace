#!/usr/bin/env python3
"""Lists the C++ functions longer than a limit (default 80 lines), longest first.

Reads the git-tracked *.cc, *.h and *.inc files (or the FILEs given) with universal-ctags, which
gives each function definition's first and last line (a function's length counts both, and any
lambdas inside it). A report, not a lint: long functions with a reason to stay long exist.

usage: long_functions.py [--limit N] [--root DIR] [FILE...]
Prints "LINES PATH:LINE NAME" per function and "total: N" on stderr. Exit status 0; 2 when
ctags is missing or is not universal-ctags.
"""
import argparse
import shutil
import subprocess
import sys


def tracked_sources(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "*.cc", "*.h", "*.inc"],
                         capture_output=True, text=True, check=True)
    return [p for p in out.stdout.split("\n") if p]


def functions(root, files):
    """(lines, path, first line, name) of every function definition ctags finds."""
    out = subprocess.run(["ctags", "--language-force=C++", "--c++-kinds=f", "--fields=+ne", "-o",
                          "-"] + files, cwd=root, capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        parts = line.split("\t")
        fields = dict(p.split(":", 1) for p in parts[3:] if ":" in p)
        if "line" not in fields or "end" not in fields:
            continue
        scope = fields.get("class") or fields.get("struct") or ""
        name = (scope + "::" if scope else "") + parts[0]
        first = int(fields["line"])
        yield int(fields["end"]) - first + 1, parts[1], first, name


def main():
    parser = argparse.ArgumentParser(
        description="List the C++ functions longer than --limit lines (universal-ctags).")
    parser.add_argument("--limit", type=int, default=80, help="report functions longer than this")
    parser.add_argument("--root", default=".", help="repository root (default: .)")
    parser.add_argument("files", nargs="*", metavar="FILE",
                        help="files to read (default: the git-tracked C++ files)")
    args = parser.parse_args()
    ctags = shutil.which("ctags")
    version = subprocess.run([ctags, "--version"], capture_output=True, text=True).stdout \
        if ctags else ""
    if "Universal Ctags" not in version:
        print("long_functions.py: error: needs universal-ctags (Debian: apt-get install "
              "universal-ctags)", file=sys.stderr)
        return 2
    rows = [r for r in functions(args.root, args.files or tracked_sources(args.root))
            if r[0] > args.limit]
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    for lines, path, first, name in rows:
        print(f"{lines:5d} {path}:{first} {name}")
    print(f"total: {len(rows)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
