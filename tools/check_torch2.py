#!/usr/bin/env python3
"""LibTorch 2.x compile check: a syntax-only pass over the tree against a PyPI torch wheel's headers.

The CPU build uses Debian's LibTorch 1.13, so the `TORCH_VERSION >= 2.x` branches (and anything
LibTorch 2.x renamed or removed) would never be compiled here. This check keeps them honest:

  1. the `torch` wheel of the pinned version (PyPI, manylinux x86_64) is downloaded once with
     `pip download --no-deps` and only its include/ and share/cmake/ folders are kept, in a cache
     folder outside the tree (default ~/.cache/sift/torch-<version>; --cache or $SIFT_TORCH2_CACHE);
  2. the compile commands of every translation unit that includes LibTorch are read from the build
     folder's compile_commands.json (CMAKE_EXPORT_COMPILE_COMMANDS is on);
  3. each is rerun with `-fsyntax-only`, LibTorch's include folders swapped for the wheel's, C++20
     where the wheel needs it (>= 2.13) else C++17, code generation flags (-O, -g, -f...) dropped,
     and a precompiled <ATen/ATen.h> of the wheel built once for the run (GCC PCH) so that each
     file costs one or two seconds instead of ten;
  4. a header taken from the system LibTorch (/usr/include/{ATen,c10,torch,caffe2}) instead of the
     wheel's is an error too (it would hide a header that 2.x no longer has).

--quick checks only the files with a TORCH_VERSION branch plus the first LibTorch file of every
source folder; the default checks every file.

--only PART (repeatable) checks only the files whose path contains PART (e.g. decode_pool.cc).

Usage: tools/check_torch2.py [--build DIR] [--torch VERSION] [--cache DIR] [--jobs N] [--quick]
                             [--only PART]... [--fetch-only]
Exit status: 0 every file compiles, 1 a file does not, 2 set-up failed (no compile_commands.json,
download failed).
"""

import argparse
import concurrent.futures
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

DEFAULT_TORCH = "2.15.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEM_TORCH = re.compile(r"^\.+ /usr/include/(?:ATen|c10|torch|caffe2)/")


def log(msg):
    print("[check_torch2] " + msg, flush=True)


def fetch_headers(version, cache):
    """The wheel's torch/ folder (include/, share/cmake/) under cache, downloading it if needed."""
    torch_dir = os.path.join(cache, "torch")
    stamp = os.path.join(cache, ".complete")
    if os.path.exists(stamp):
        log("torch %s headers: %s (cached)" % (version, torch_dir))
        return torch_dir
    os.makedirs(cache, exist_ok=True)
    start = time.time()
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--only-binary=:all:", "--platform", "manylinux_2_28_x86_64",
               "--python-version", "3.11", "--implementation", "cp",
               "torch==" + version, "-d", tmp]
        log("downloading the torch %s wheel (headers only are kept): %s" %
            (version, " ".join(cmd[2:])))
        subprocess.run(cmd, check=True)
        wheels = glob.glob(os.path.join(tmp, "torch-*.whl"))
        if len(wheels) != 1:
            raise RuntimeError("pip download left %d torch wheels" % len(wheels))
        size = os.path.getsize(wheels[0])
        t_download = time.time() - start
        with zipfile.ZipFile(wheels[0]) as z:
            members = [n for n in z.namelist()
                       if n.startswith(("torch/include/", "torch/share/cmake/"))]
            shutil.rmtree(torch_dir, ignore_errors=True)
            z.extractall(cache, members)
    with open(stamp, "w") as f:
        f.write(version + "\n")
    log("torch %s: wheel %.0f MB downloaded in %.1f s, %d header files kept (%.1f s in all)" %
        (version, size / 1e6, t_download, len(members), time.time() - start))
    return torch_dir


def wheel_version(torch_dir):
    for name in ("torch/headeronly/version.h", "torch/csrc/api/include/torch/version.h"):
        path = os.path.join(torch_dir, "include", name)
        if not os.path.exists(path):
            continue
        text = open(path).read()
        major = re.search(r"#define TORCH_VERSION_MAJOR (\d+)", text)
        minor = re.search(r"#define TORCH_VERSION_MINOR (\d+)", text)
        if major and minor:
            return int(major.group(1)), int(minor.group(1))
    raise RuntimeError("no TORCH_VERSION_MAJOR/MINOR under " + torch_dir)


def is_torch_include(path):
    return path.rstrip("/").endswith("torch/csrc/api/include") or re.match(
        r"^/usr(/local)?/include/(ATen|c10|torch|caffe2)\b", path) is not None


def cuda_include():
    """The CUDA toolkit's include folder (cuda_runtime_api.h), or None."""
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    roots += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for root in roots:
        for inc in (os.path.join(root, "include"),
                    os.path.join(root, "targets", "x86_64-linux", "include")):
            if root and os.path.exists(os.path.join(inc, "cuda_runtime_api.h")):
                return inc
    return None


def rewrite(entry, wheel_includes, std, pch_header, extra=()):
    """The syntax-only command for one compile_commands entry, or None if it does not use
    LibTorch."""
    args = entry.get("arguments") or shlex.split(entry["command"])
    out, uses_torch, i = [], False, 0
    compiler = args[0]
    if os.path.basename(compiler) == "ccache":
        args = args[1:]
        compiler = args[0]
    out.append(compiler)
    i = 1
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if a in ("-isystem", "-I") and is_torch_include(nxt):
            uses_torch = True
            i += 2
            continue
        if (a.startswith("-isystem") or a.startswith("-I")) and len(a) > 2 and \
                is_torch_include(a[8:] if a.startswith("-isystem") else a[2:]):
            uses_torch = True
            i += 1
            continue
        if a in ("-o", "-MF", "-MT", "-MQ") or (a == "-include" and "cmake_pch" in nxt):
            i += 2
            continue
        if a == "-x" and nxt == "c++-header":  # the project's own PCH: not a source file
            return None
        if a in ("-c", "-MD", "-MMD", "-Winvalid-pch") or re.match(r"^-(O.*|g.*|f.*|std=.*)$", a):
            i += 1
            continue
        if a == entry["file"] or os.path.abspath(os.path.join(entry["directory"], a)) == \
                os.path.abspath(entry["file"]):
            i += 1
            continue
        out.append(a)
        i += 1
    if not uses_torch:
        return None
    inc = []
    for d in wheel_includes:
        inc += ["-isystem", d]
    return (out[:1] + inc + out[1:] + list(extra) +
            ["-std=" + std, "-fsyntax-only", "-Winvalid-pch", "-H", "-include", pch_header,
             entry["file"]])


def pick_quick(entries):
    """Files with a TORCH_VERSION branch plus the first LibTorch file of every source folder."""
    chosen, seen = [], set()
    for e in sorted(entries, key=lambda e: e["file"]):
        src = open(e["file"], errors="replace").read()
        folder = os.path.dirname(e["file"])
        if re.search(r"#\s*(?:el)?if.*TORCH_VERSION", src) or folder not in seen:
            chosen.append(e)
        seen.add(folder)
    return chosen


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="See the docstring at the top of this file.")
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="build folder with compile_commands.json (default: build/)")
    p.add_argument("--torch", default=os.environ.get("SIFT_TORCH2_VERSION", DEFAULT_TORCH),
                   help="torch wheel version (default %s)" % DEFAULT_TORCH)
    p.add_argument("--cache", default=None,
                   help="folder for the wheel's headers (default: $SIFT_TORCH2_CACHE or "
                        "~/.cache/sift/torch-VERSION)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--quick", action="store_true",
                   help="TORCH_VERSION files plus one file per source folder only")
    p.add_argument("--only", action="append", default=[], metavar="PART",
                   help="check only the files whose path contains PART (repeatable)")
    p.add_argument("--fetch-only", action="store_true",
                   help="only download and unpack the headers (into the cache), then exit")
    args = p.parse_args(argv)

    start = time.time()
    db = os.path.join(args.build, "compile_commands.json")
    if not os.path.exists(db) and not args.fetch_only:
        log("no %s: configure the build first (cmake -S . -B build)" % db)
        return 2
    cache = args.cache or os.environ.get("SIFT_TORCH2_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "sift",
        "torch-" + args.torch)
    try:
        torch_dir = fetch_headers(args.torch, cache)
        major, minor = wheel_version(torch_dir)
    except (subprocess.CalledProcessError, RuntimeError, OSError) as e:
        log("could not get the torch %s headers: %s" % (args.torch, e))
        return 2
    t_fetch = time.time() - start
    if args.fetch_only:
        log("torch %d.%d headers ready in %s (%.1f s)" % (major, minor, torch_dir, t_fetch))
        return 0
    std = "c++20" if (major, minor) >= (2, 13) else "c++17"
    wheel_includes = [os.path.join(torch_dir, "include"),
                      os.path.join(torch_dir, "include", "torch", "csrc", "api", "include")]
    # The wheel is LibTorch with CUDA, as on a GPU machine: its CUDA branches (SIFT_CUDA, e.g.
    # the decode pool's graphs) are checked too when the toolkit's headers are here.
    extra = []
    cuda_inc = cuda_include()
    if cuda_inc and os.path.isdir(os.path.join(torch_dir, "include", "ATen", "cuda")):
        extra = ["-DSIFT_CUDA=1", "-isystem", cuda_inc]
        log("CUDA branches checked too (-DSIFT_CUDA=1, CUDA headers %s)" % cuda_inc)
    else:
        log("CUDA branches not checked: no CUDA toolkit headers (cuda_runtime_api.h) found")

    with tempfile.TemporaryDirectory() as tmp:
        pch_header = os.path.join(tmp, "torch2_pch.h")
        with open(pch_header, "w") as f:
            f.write("#include <ATen/ATen.h>\n")
        entries, seen = [], set()
        for e in json.load(open(db)):
            if e["file"] in seen:
                continue
            cmd = rewrite(e, wheel_includes, std, pch_header, extra)
            if cmd is None:
                continue
            seen.add(e["file"])
            e["check"] = cmd
            entries.append(e)
        if not entries:
            log("no translation unit in %s uses LibTorch" % db)
            return 2
        if args.quick:
            entries = pick_quick(entries)
        if args.only:
            entries = [e for e in entries if any(part in e["file"] for part in args.only)]
            if not entries:
                log("no LibTorch file matches --only %s" % " ".join(args.only))
                return 2

        # The PCH: the defines and warning options every selected file shares (-pedantic changes
        # predefined macros), so that GCC accepts it for all of them.
        common = None
        for e in entries:
            defs = [a for a in e["check"] if a.startswith(("-D", "-W", "-pedantic"))]
            common = defs if common is None else [d for d in common if d in defs]
        t0 = time.time()
        pch_cmd = ([entries[0]["check"][0]] + sum([["-isystem", d] for d in wheel_includes], []) +
                   common +
                   ["-std=" + std, "-x", "c++-header", pch_header, "-o", pch_header + ".gch"])
        r = subprocess.run(pch_cmd, capture_output=True, text=True)
        if r.returncode != 0:
            log("the wheel's <ATen/ATen.h> does not compile as C++ (%s):\n%s" % (std, r.stderr))
            return 1
        t_pch = time.time() - t0
        log("torch %d.%d headers, %s, %d files%s; PCH of <ATen/ATen.h> in %.1f s" %
            (major, minor, std, len(entries), " (--quick)" if args.quick else "", t_pch))

        def check(e):
            t = time.time()
            r = subprocess.run(e["check"], cwd=e["directory"], capture_output=True, text=True)
            lines = r.stderr.splitlines()
            leaked = sorted({l.split(" ", 1)[1] for l in lines if SYSTEM_TORCH.match(l)})
            # -H lists headers ("." per depth), the PCH ("!" used, "x" refused) and, after
            # "Multiple include guards may be useful for:", bare paths; keep the diagnostics.
            pch_rejected = any(l.startswith("x ") and l.endswith(".gch") for l in lines)
            text = "\n".join(l for l in lines
                             if not re.match(r"^[.!x]+ ", l) and not re.match(r"^/\S+$", l) and
                             not l.startswith("Multiple include guards"))
            return e["file"], r.returncode, leaked, text, pch_rejected, time.time() - t

        failed = 0
        rejected = 0
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for path, rc, leaked, text, pch_rejected, secs in pool.map(check, entries):
                rel = os.path.relpath(path, ROOT)
                rejected += pch_rejected
                if rc != 0 or leaked:
                    failed += 1
                    log("FAIL %s (%.1f s)" % (rel, secs))
                    if leaked:
                        print("  system LibTorch headers used instead of the wheel's: " +
                              ", ".join(leaked[:5]))
                    if text.strip():
                        print(text)
        t_check = time.time() - t0
    log("%d of %d files compile against torch %d.%d (%s); headers %.1f s, PCH %.1f s, "
        "files %.1f s, total %.1f s on %d job(s)%s" %
        (len(entries) - failed, len(entries), major, minor, std, t_fetch, t_pch, t_check,
         time.time() - start, args.jobs,
         "; the PCH was refused for %d file(s)" % rejected if rejected else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
