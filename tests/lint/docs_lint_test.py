"""Tests of tools/check_docs.py (the docs lint): every rule fails on a bad input, so the lint
cannot pass silently, and the allowed forms stay allowed.

Run: python3 -B -m unittest -v docs_lint_test (from this folder; ctest does).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "tools", "check_docs.py")


def run(root, *files):
    p = subprocess.run([sys.executable, "-B", SCRIPT, "--json", "--root", root] + list(files),
                       capture_output=True, text=True)
    out = json.loads(p.stdout) if p.stdout.strip() else None
    return p.returncode, out, p.stderr


def tree(files):
    """A temporary repository root (not a git checkout) holding `files` ({path: text})."""
    d = tempfile.TemporaryDirectory()
    for rel, text in files.items():
        path = os.path.join(d.name, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return d


CLEAN = {
    "README.md": "# sift\n\nSee [the map](docs/architecture.md#request-path) and "
                 "[plugins](docs/writing-a-plugin.md).\n",
    "docs/architecture.md": "# Architecture\n\n## Request path\n\nText; [back](../README.md), "
                            "[a section](#request-path), [code](../daemon/main.cc).\n",
    "docs/writing-a-plugin.md": "# Writing a plugin\n\n## 1. The `files`\n\n"
                                "[files](#1-the-files)\n",
    "daemon/main.cc": "// siftd. Layout: ggml docs/gguf.md (https://github.com/ggml-org/ggml).\n",
}


class DocsLintTest(unittest.TestCase):
    def findings(self, files, *only):
        with tree(files) as root:
            rc, out, err = run(root, *only)
        self.assertIsNotNone(out, err)
        return rc, [(f["file"], f["line"], f["rule"]) for f in out["errors"]]

    def assertFails(self, files, expected):
        rc, found = self.findings(files)
        self.assertEqual(rc, 1, found)
        self.assertEqual(sorted(found), sorted(expected))

    def test_clean_tree_passes(self):
        rc, found = self.findings(CLEAN)
        self.assertEqual((rc, found), (0, []))

    def test_shared_notes_are_refused_in_code_and_docs(self):
        bad = dict(CLEAN)
        bad["plugin_api/include/sift/gguf.h"] = "// x\n// Layout: shared/reference/engine-specs.md §1.\n"
        bad["daemon/front_end.h"] = "// Socket rules (serving-anchors §7)\n"
        bad["tools/x.py"] = "# see engine-specs §3.7\n"
        bad["docs/methods/a.md"] = "# A\n\nSpec: `shared/papers/chunkkv.md` §3.\n\nSee DESIGN.md §4.\n"
        bad["CMakeLists.txt"] = "# ../shared/reference/kv-landscape.md\n"
        self.assertFails(bad, [
            ("plugin_api/include/sift/gguf.h", 2, "shared-note"),
            ("daemon/front_end.h", 1, "shared-note"),
            ("tools/x.py", 1, "shared-note"),
            ("docs/methods/a.md", 3, "shared-note"),
            ("docs/methods/a.md", 5, "shared-note"),
            ("CMakeLists.txt", 1, "shared-note"),
        ])

    def test_the_optional_data_folder_may_be_named(self):
        ok = dict(CLEAN)
        ok["docs/bench.md"] = "# Bench\n\n`--haystack ../shared/data/pg_essays` when present.\n"
        ok["tools/setup.sh"] = 'text="$ROOT/../shared/data/pg_essays"\n'
        rc, found = self.findings(ok)
        self.assertEqual((rc, found), (0, []))

    def test_absolute_machine_paths_are_refused_in_docs(self):
        bad = dict(CLEAN)
        bad["docs/results/x.md"] = "# X\n\n- command: `/work/main/build/bin/sift-bench`\n"
        bad["docs/results/x/raw.json"] = '{"model": "/root/models/m.gguf"}\n'
        bad["docs/y.md"] = "# Y\n\nhome: /home/me/sift\n"
        self.assertFails(bad, [
            ("docs/results/x.md", 3, "absolute-path"),
            ("docs/results/x/raw.json", 1, "absolute-path"),
            ("docs/y.md", 3, "absolute-path"),
        ])

    def test_urls_and_relative_paths_are_not_absolute_paths(self):
        ok = dict(CLEAN)
        ok["docs/z.md"] = ("# Z\n\nhttps://example.com/work/x and models/root/x and "
                           "ipc:///tmp/siftd.sock\n")
        rc, found = self.findings(ok)
        self.assertEqual((rc, found), (0, []))

    def test_tmp_paths_in_results_except_lock_files(self):
        bad = dict(CLEAN)
        bad["docs/results/r.md"] = ("# R\n\nRun under `flock /tmp/sift-measure.lock`.\n\n"
                                    "- command: `sift-bench speed --out /tmp/a_speed`\n")
        bad["docs/results/r/raw.json"] = '{"command": "x --out /tmp/c_acc/4096"}\n'
        self.assertFails(bad, [
            ("docs/results/r.md", 5, "tmp-path"),
            ("docs/results/r/raw.json", 1, "tmp-path"),
        ])

    def test_dead_files_and_anchors_are_refused(self):
        bad = dict(CLEAN)
        bad["docs/w.md"] = ("# W\n\n[gone](missing.md) [bad anchor](architecture.md#nowhere)\n"
                            "[self](#no-such-heading) ![img](pics/none.png)\n"
                            "[out](../../elsewhere.md)\n\n[ref]: ../nope/file.h\n")
        self.assertFails(bad, [
            ("docs/w.md", 3, "dead-link"),
            ("docs/w.md", 3, "dead-link"),
            ("docs/w.md", 4, "dead-link"),
            ("docs/w.md", 4, "dead-link"),
            ("docs/w.md", 5, "dead-link"),
            ("docs/w.md", 7, "dead-link"),
        ])

    def test_links_in_code_and_urls_are_not_checked(self):
        ok = dict(CLEAN)
        ok["docs/v.md"] = ("# V\n\n```\n[x](missing.md)\n```\n\n`[y](missing.md)` "
                           "[web](https://example.com/missing.md) [dir](../daemon)\n")
        rc, found = self.findings(ok)
        self.assertEqual((rc, found), (0, []))

    def test_only_tracked_files_count_in_a_git_checkout(self):
        if shutil.which("git") is None:
            self.skipTest("git is not installed")
        with tree(CLEAN) as root:
            env = dict(os.environ, GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
            subprocess.run(["git", "init", "-q", root], check=True, env=env)
            subprocess.run(["git", "-C", root, "add", "-A"], check=True, env=env)
            # Untracked: neither checked nor a valid link target.
            with open(os.path.join(root, "docs", "untracked.md"), "w") as f:
                f.write("# U\n\n/work/main/x shared/reference/x\n")
            rc, out, err = run(root)
            self.assertEqual((rc, out["errors"]), (0, []), err)
            with open(os.path.join(root, "README.md"), "a") as f:
                f.write("[u](docs/untracked.md)\n")
            rc, out, err = run(root)
            self.assertEqual(rc, 1, err)
            self.assertEqual([e["rule"] for e in out["errors"]], ["dead-link"])

    def test_the_repository_itself_is_clean(self):
        rc, out, err = run(ROOT)
        self.assertEqual(rc, 0, "\n".join("%(file)s:%(line)d: [%(rule)s] %(message)s" % e
                                          for e in (out or {"errors": []})["errors"]) + err)


if __name__ == "__main__":
    unittest.main()
