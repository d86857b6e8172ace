#!/usr/bin/env python3
"""Clang's thread-safety analysis over the files whose shared state carries annotations
(sift/thread_annotations.h): each is compiled syntax-only with clang++ -Wthread-safety
-Werror=thread-safety, with the flags of this build's compile_commands.json (GCC-only flags and
the precompiled header dropped).

  check_thread_safety.py [--build build] [--clang clang++-14] [FILE...]

Without FILE, checks the annotated files (ANNOTATED below). Exit status: 0 clean, 1 a warning or
an error, 2 nothing to check with (no compile_commands.json, no clang: the test is skipped).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Files whose shared state is annotated; add a file here when its locks carry annotations.
ANNOTATED = [
    "plugin_api/src/runtime/batch_engine.cc",
    "plugin_api/src/runtime/prefix_cache.cc",
    "daemon/kv_budget.cc",
    "daemon/scheduler.cc",
]
GCC_ONLY = ("-fno-fat-lto-objects", "-fconcepts-diagnostics-depth", "-Wno-maybe-uninitialized")


def rewrite(command, clang):
    args = command.split()
    out = [clang]
    skip = False
    for i, a in enumerate(args[1:], 1):
        if skip:
            skip = False
            continue
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if a in ("-o", "-MF", "-MT", "-MQ") or (a == "-include" and "cmake_pch" in nxt):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD", "-Winvalid-pch") or a.startswith(GCC_ONLY):
            continue
        out.append(a)
    return out + ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety", "-Wno-unknown-warning-option",
                  "-Wno-unused-command-line-argument"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--clang", default="clang++-14")
    p.add_argument("files", nargs="*")
    a = p.parse_args()
    if not shutil.which(a.clang):
        print(f"check_thread_safety: no {a.clang}", file=sys.stderr)
        return 2
    db_path = os.path.join(a.build, "compile_commands.json")
    if not os.path.exists(db_path):
        print(f"check_thread_safety: no {db_path}", file=sys.stderr)
        return 2
    db = {os.path.realpath(e["file"]): e for e in json.load(open(db_path))}
    failed = 0
    for rel in a.files or ANNOTATED:
        path = os.path.realpath(os.path.join(ROOT, rel))
        entry = db.get(path)
        if entry is None:
            print(f"check_thread_safety: {rel} is not in {db_path}", file=sys.stderr)
            return 1
        r = subprocess.run(rewrite(entry["command"], a.clang), cwd=entry["directory"],
                           capture_output=True, text=True)
        status = "ok" if r.returncode == 0 else "FAILED"
        print(f"{status} {rel}")
        if r.returncode != 0:
            failed += 1
            print(r.stderr[-4000:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
