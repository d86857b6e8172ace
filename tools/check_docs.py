#!/usr/bin/env python3
"""The docs lint: the repository must explain itself to someone who has only the repository.

Checks the git-tracked files of the tree (every file under the root when it is not a git
checkout) and reports, one line each as FILE:LINE: [rule] message:

  shared-note    a citation of notes that live outside the repository (the shared folder's
                 reference notes, papers or design document, by path or by name) in code, build
                 files, scripts or docs. Cite the public source instead (a paper's title and
                 arXiv id, the ggml GGUF spec, ...) or state the fact in place. Naming the
                 optional data folder `../shared/data/...` is allowed.
  absolute-path  an absolute path of one machine (/work/..., /root/..., /home/...) in a
                 Markdown file or anywhere under docs/: write repository-relative paths.
  tmp-path       a /tmp path under docs/results/ (a scratch folder a reader cannot have),
                 except lock files (/tmp/NAME.lock, which the documents tell the reader to use).
  dead-link      a relative Markdown link or image whose file (tracked) or #anchor (a heading or
                 an <a id/name> of the target Markdown file) does not exist.

usage: check_docs.py [--root DIR] [--json] [FILE...]
  FILE...  check only these files (paths relative to the root or absolute); links still
           resolve against the whole tree.
Exit status: 0 clean, 1 findings, 2 usage error.
"""
import argparse
import json
import os
import re
import subprocess
import sys

# Files that must spell the patterns out: this checker and its tests.
SELF = {"tools/check_docs.py", "tests/lint/docs_lint_test.py"}
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__"}

CODE_EXTENSIONS = (".cc", ".h", ".hpp", ".cpp", ".inc", ".in", ".md", ".py", ".sh", ".cmake",
                   ".toml", ".txt", ".map")
SHARED_NOTE = re.compile(
    r"shared/(?:reference|papers|DESIGN)"
    r"|\bDESIGN\.md\b"
    r"|\b(?:engine-specs|kv-landscape|serving-anchors|aesthetics-anchors)\b"
    r"|\.\./shared/(?!data/)")
ABSOLUTE = re.compile(r"(?<![\w.~:/-])/(?:work|root|home)/[^\s`'\")\]]*")
TMP = re.compile(r"(?<![\w.~:/-])/tmp/[^\s`'\")\]]*")
LOCK = re.compile(r"^/tmp/[\w.-]+\.lock$")

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:[^>]*\s)?(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")


def tracked_files(root):
    """Repository-relative paths of the files to check: git's list, or a walk."""
    if os.path.isdir(os.path.join(root, ".git")) or os.path.isfile(os.path.join(root, ".git")):
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True)
        if out.returncode == 0:
            return [p for p in out.stdout.decode("utf-8", "replace").split("\0") if p]
    files = []
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build"))
        for n in sorted(names):
            files.append(os.path.relpath(os.path.join(d, n), root).replace(os.sep, "/"))
    return files


def read_text(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None  # binary
    return data.decode("utf-8", "replace")


def slug(text, seen):
    """GitHub's heading anchor: lower case, markup and punctuation dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)                      # inline HTML
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    base = text.replace(" ", "-")
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base if n == 0 else "%s-%d" % (base, n)


def markdown_lines(text):
    """(line number, line with inline code blanked) for lines outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif line.strip().startswith(fence):
                fence = None
            continue
        if fence is None:
            yield number, INLINE_CODE.sub(lambda c: " " * len(c.group(0)), line)


def anchors_of(text):
    out = set()
    for _, line in markdown_lines(text):
        out.update(HTML_ANCHOR.findall(line))
    # Headings from the raw lines (markdown_lines blanks inline code, which slugs keep).
    seen = {}
    fence = None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if m:
            fence = m.group(1) if fence is None else (None if line.strip().startswith(fence) else fence)
            continue
        h = HEADING.match(line) if fence is None else None
        if h:
            out.add(slug(h.group(2), seen))
    return out


class Checker:
    def __init__(self, root, files):
        self.root = root
        self.files = files
        self.tracked = set(files)
        self.dirs = set()
        for f in files:
            parts = f.split("/")
            for i in range(1, len(parts)):
                self.dirs.add("/".join(parts[:i]))
        self.anchor_cache = {}
        self.findings = []

    def add(self, path, line, rule, message):
        self.findings.append({"file": path, "line": line, "rule": rule, "message": message})

    def check_file(self, rel):
        if rel in SELF:
            return
        text = read_text(os.path.join(self.root, rel))
        if text is None:
            return
        lower = rel.lower()
        name = os.path.basename(lower)
        is_md = lower.endswith(".md")
        if lower.endswith(CODE_EXTENSIONS) or name == "cmakelists.txt":
            for number, line in enumerate(text.split("\n"), 1):
                m = SHARED_NOTE.search(line)
                if m:
                    self.add(rel, number, "shared-note",
                             "cites '%s', a note outside the repository: cite the public source "
                             "or state the fact here" % m.group(0))
        if is_md or rel.startswith("docs/"):
            for number, line in enumerate(text.split("\n"), 1):
                for m in ABSOLUTE.finditer(line):
                    self.add(rel, number, "absolute-path",
                             "'%s' is one machine's path: write it relative to the repository"
                             % m.group(0))
        if rel.startswith("docs/results/"):
            for number, line in enumerate(text.split("\n"), 1):
                for m in TMP.finditer(line):
                    if not LOCK.match(m.group(0).rstrip(".,;:")):
                        self.add(rel, number, "tmp-path",
                                 "'%s' is a scratch path a reader does not have: name the "
                                 "committed folder instead" % m.group(0))
        if is_md:
            self.check_links(rel, text)

    def anchors(self, rel):
        if rel not in self.anchor_cache:
            text = read_text(os.path.join(self.root, rel)) or ""
            self.anchor_cache[rel] = anchors_of(text)
        return self.anchor_cache[rel]

    def exists(self, rel):
        return rel in self.tracked or rel in self.dirs or rel in ("", ".")

    def check_links(self, rel, text):
        base = os.path.dirname(rel)
        for number, line in markdown_lines(text):
            targets = [m.group(1) for m in LINK.finditer(line)]
            d = REFERENCE_DEF.match(line)
            if d:
                targets.append(d.group(1))
            for target in targets:
                if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
                    continue  # a URL (http:, https:, mailto:, ...)
                path, _, anchor = target.partition("#")
                if path.startswith("/"):
                    self.add(rel, number, "dead-link",
                             "'%s' is absolute: link relative to this file" % target)
                    continue
                resolved = os.path.normpath(os.path.join(base, path)).replace(os.sep, "/") \
                    if path else rel
                if resolved.startswith("../") or resolved == "..":
                    self.add(rel, number, "dead-link",
                             "'%s' leaves the repository" % target)
                    continue
                if path and not self.exists(resolved):
                    self.add(rel, number, "dead-link",
                             "'%s': no such file in the repository (%s)" % (target, resolved))
                    continue
                if anchor and resolved.lower().endswith(".md") and resolved in self.tracked:
                    if anchor not in self.anchors(resolved):
                        self.add(rel, number, "dead-link",
                                 "'%s': %s has no heading or anchor '#%s'"
                                 % (target, resolved, anchor))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="repository root (default: this script's repository)")
    ap.add_argument("--json", action="store_true", help="print {\"errors\": [...]} as JSON")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args(argv)
    root = os.path.abspath(a.root)
    if not os.path.isdir(root):
        print("check_docs: no such folder: %s" % root, file=sys.stderr)
        return 2
    files = tracked_files(root)
    checker = Checker(root, files)
    chosen = files
    if a.files:
        chosen = [os.path.relpath(os.path.abspath(f), root).replace(os.sep, "/") for f in a.files]
    for rel in chosen:
        checker.check_file(rel)
    if a.json:
        print(json.dumps({"checked": len(chosen), "errors": checker.findings}, indent=1))
    else:
        for f in checker.findings:
            print("%s:%d: [%s] %s" % (f["file"], f["line"], f["rule"], f["message"]))
        print("check_docs: %d files, %d findings" % (len(chosen), len(checker.findings)),
              file=sys.stderr)
    return 1 if checker.findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
