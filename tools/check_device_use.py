#!/usr/bin/env python3
"""Device lint: flags C++ that reads tensor memory on the host or creates tensors on the CPU.

On a CUDA model every tensor a stage sees lives on the GPU. Code that reads its memory on the host
(data_ptr, accessor, item) crashes or silently reads garbage, and a tensor created without a device
(at::arange(n, at::kLong)) is on the CPU and fails the next op with a device mismatch. CPU-only CI
cannot run a GPU, so this check finds both patterns in the source instead (docs/writing-a-plugin.md,
"Devices"). Rules:

  host-read   data_ptr, accessor<>, packed_accessor, .item() / item<T>()
  host-copy   .cpu(), .to(at::kCPU ...)                      (copies to the host)
  host-wrap   from_blob                                       (wraps host memory as a tensor)
  no-device   at::/torch:: arange, zeros, ones, empty, full, rand, randn, randint, linspace,
              logspace, eye, tensor, scalar_tensor, empty_strided without TensorOptions that carry
              a device: an argument naming options / opts / device (x.options(), a variable
              `index_options`, TensorOptions().device(...)); a fresh TensorOptions() without
              .device(...) does not count.

The one sanctioned way to bring values to the host is sift/host.h (ToHost, HostInts, HostInt,
HostDouble); its implementation is exempt. Any other line may state why it is safe with a marker
comment on that line (for a call spanning lines: on its first or last line):

    std::memcpy(t.data_ptr(), s.data(), n);  // host: t was just created on the CPU

The CPU kernels (plugin_api/src/runtime/cpu/), the quantised matrices (.../quant/) and their bench
are CPU-only by contract and exempt.

Usage: tools/check_device_use.py [--root DIR] [--json] [PATH ...]
With no PATH: every .cc/.h under plugins/, plugin_api/kits/, daemon/, plugin_api/src/runtime/ and
tools/.
Exit status: 0 clean, 1 errors found, 2 bad usage.
"""

import argparse
import json
import os
import re
import sys

SCAN_DIRS = ["plugins", "plugin_api/kits", "daemon", "plugin_api/src/runtime", "tools"]
EXTENSIONS = (".cc", ".h", ".cpp", ".hpp")
# The helper itself: the one place allowed to read tensor memory on the host. The CPU kernels and
# the quantised matrices are CPU-only by contract (their headers say so; sift::Model calls them only
# for CPU tensors), and so is the benchmark of the latter.
EXEMPT = {"plugin_api/src/runtime/host.cc"}
EXEMPT_DIRS = ("plugin_api/src/runtime/cpu/", "plugin_api/src/runtime/quant/", "tools/quant_bench/")

MARKER = re.compile(r"//\s*host:\s*(\S.*)$")
CREATORS = ("arange|zeros|ones|empty|full|rand|randn|randint|linspace|logspace|eye|tensor|"
            "scalar_tensor|empty_strided")
PATTERNS = [
    ("host-read", re.compile(r"data_ptr\b"),
     "reads tensor memory on the host: use sift::HostInts / HostInt / ToHost (sift/host.h)"),
    ("host-read", re.compile(r"\b(?:packed_)?accessor\s*<"),
     "reads tensor memory on the host: use sift::HostInts / ToHost (sift/host.h)"),
    ("host-read", re.compile(r"\.\s*item\s*(?:<|\()"),
     "reads a tensor value on the host: use sift::HostInt / HostDouble (sift/host.h)"),
    ("host-copy", re.compile(r"\.\s*cpu\s*\(\s*\)"),
     "copies to the host: use sift::ToHost (sift/host.h)"),
    ("host-copy", re.compile(r"\.\s*to\s*\(\s*(?:(?:at|torch|c10)::)?(?:kCPU|Device\s*\(\s*"
                             r"(?:(?:at|torch|c10)::)?(?:kCPU|DeviceType::CPU)|DeviceType::CPU)"),
     "copies to the host: use sift::ToHost (sift/host.h)"),
    ("host-wrap", re.compile(r"\bfrom_blob\s*\("),
     "wraps host memory as a tensor: build it on the device, or mark why it stays on the CPU"),
]
CREATE = re.compile(r"\b((?:at|torch)::(?:" + CREATORS + r"))\s*\(")
OPTION_WORDS = re.compile(r"options|opts|device", re.IGNORECASE)
FRESH_OPTIONS = re.compile(r"TensorOptions\s*\(")


def strip_code(text):
    """Returns (code, comments): code with comments and string/char literal contents blanked (same
    length, newlines kept), and per line the text of its // comment (or '')."""
    out = list(text)
    comments = {}
    i, n, line = 0, len(text), 1

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            comments[line] = text[i:j]
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += text.count("\n", i, j)
            blank(i, j)
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or
                                                                      text[i - 1] == "_")):
            paren = text.find("(", i + 2)
            delim = text[i + 2:paren] if paren >= 0 else ""
            end = text.find(")" + delim + '"', paren + 1) if paren >= 0 else -1
            j = n if end < 0 else end + len(delim) + 2
            line += text.count("\n", i, j)
            blank(i + 2, j - 1)
            i = j
        elif c in "\"'":
            # A ' between digits is a C++14 digit separator (1'000), not a char literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out), comments


def call_args(code, open_paren):
    """Top-level arguments of the call whose '(' is at open_paren, and the index of its ')'."""
    depth, args, start = 0, [], open_paren + 1
    for k in range(open_paren, len(code)):
        ch = code[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append(code[start:k])
                return [a.strip() for a in args if a.strip()], k
        elif ch == "," and depth == 1:
            args.append(code[start:k])
            start = k + 1
    return [], len(code) - 1


def has_device_options(args):
    for a in args[1:]:
        if not OPTION_WORDS.search(a):
            continue
        if FRESH_OPTIONS.search(a) and not re.search(r"device", a, re.IGNORECASE):
            continue  # at::TensorOptions().dtype(...) alone: CPU
        return True
    return False


def check_file(path, rel):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    code, comments = strip_code(text)
    lines = text.split("\n")
    line_starts = [0]
    for m in re.finditer("\n", code):
        line_starts.append(m.end())

    def line_of(pos):
        lo, hi = 0, len(line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if line_starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def marked(*line_numbers):
        for ln in line_numbers:
            m = MARKER.search(comments.get(ln, ""))
            if m and len(m.group(1).strip()) >= 3:
                return True
        return False

    findings = []

    def add(rule, pos, message, end_line=None):
        ln = line_of(pos)
        if marked(ln, end_line or ln):
            return
        findings.append({"file": rel, "line": ln, "rule": rule, "message": message,
                         "source": lines[ln - 1].strip() if ln - 1 < len(lines) else ""})

    for rule, pattern, message in PATTERNS:
        for m in pattern.finditer(code):
            add(rule, m.start(), message)
    for m in CREATE.finditer(code):
        args, close = call_args(code, m.end() - 1)
        if not has_device_options(args):
            add("no-device", m.start(),
                "%s creates a CPU tensor: pass options with a device (an input's .options(), "
                "or TensorOptions().device(model device))" % m.group(1), line_of(close))
    findings.sort(key=lambda f: (f["line"], f["rule"]))
    return findings


def collect(root, paths):
    files = []
    if not paths:
        paths = [os.path.join(root, d) for d in SCAN_DIRS
                 if os.path.isdir(os.path.join(root, d))]
    for p in paths:
        if os.path.isfile(p):
            files.append(p)
            continue
        if not os.path.isdir(p):
            raise FileNotFoundError(p)
        for dirpath, dirnames, filenames in os.walk(p):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(EXTENSIONS):
                    files.append(os.path.join(dirpath, name))
    return files


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="See the module docstring (the top of this file).")
    parser.add_argument("paths", nargs="*", help="files or folders (default: the tree's sources)")
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), help="repository root (default: this script's)")
    parser.add_argument("--json", action="store_true", help="print findings as JSON")
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    try:
        files = collect(root, args.paths)
    except FileNotFoundError as e:
        print("check_device_use: no such file or folder: %s" % e, file=sys.stderr)
        return 2
    errors = []
    for path in files:
        rel = os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")
        if rel in EXEMPT or rel.startswith(EXEMPT_DIRS):
            continue
        errors.extend(check_file(path, rel))
    if args.json:
        print(json.dumps({"files": len(files), "errors": errors}, indent=1))
    else:
        for f in errors:
            print("%s:%d: error: [%s] %s\n    %s" % (f["file"], f["line"], f["rule"], f["message"],
                                                   f["source"]))
        print("device lint: %d file(s), %d error(s)" % (len(files), len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
