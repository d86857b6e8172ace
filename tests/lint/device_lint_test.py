"""Tests of tools/check_device_use.py (the device lint): the committed fixtures and small trees.

Run: python3 -B -m unittest -v device_lint_test (from this folder; ctest does).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "tools", "check_device_use.py")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "device_lint")


def run(*args):
    p = subprocess.run([sys.executable, "-B", SCRIPT, "--json"] + list(args),
                       capture_output=True, text=True)
    return p.returncode, json.loads(p.stdout) if p.stdout.strip() else None, p.stderr


def expectations(path):
    """{(line, rule)} from `// expect: a, b` (this line) and `// expect-next: a` (next line)."""
    out = set()
    with open(path) as f:
        for number, line in enumerate(f, 1):
            m = re.search(r"//\s*expect(-next)?:\s*(.+)$", line)
            if not m:
                continue
            target = number + 1 if m.group(1) else number
            for rule in m.group(2).split(","):
                out.add((target, rule.strip()))
    return out


def tree(files):
    """A temporary repository root holding `files` ({relative path: text})."""
    d = tempfile.TemporaryDirectory()
    for rel, text in files.items():
        path = os.path.join(d.name, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return d


class DeviceLintTest(unittest.TestCase):
    def test_every_violation_in_the_fixture_is_reported_and_fails(self):
        path = os.path.join(FIXTURES, "violations.cc")
        rc, out, _ = run(path)
        self.assertEqual(rc, 1)
        found = {(f["line"], f["rule"]) for f in out["errors"]}
        want = expectations(path)
        self.assertGreaterEqual(len(want), 10)
        self.assertEqual(found, want)

    def test_clean_fixture_passes(self):
        rc, out, _ = run(os.path.join(FIXTURES, "clean.cc"))
        self.assertEqual(rc, 0)
        self.assertEqual(out["errors"], [])

    def test_cpu_only_folders_are_exempt_and_the_engine_core_is_not(self):
        body = "int64_t f(const at::Tensor& t) { return t.max().item<int64_t>(); }\n"
        with tree({"plugin_api/src/runtime/attention.cc": body,
                   "plugin_api/src/runtime/cpu/kernel.cc": body,
                   "plugin_api/src/runtime/quant/matrix.cc": body}) as root:
            rc, out, _ = run("--root", root)
            self.assertEqual(rc, 1)
            self.assertEqual([(e["file"], e["rule"]) for e in out["errors"]],
                             [("plugin_api/src/runtime/attention.cc", "host-read")])

    def test_the_helper_is_exempt_and_plugins_are_scanned(self):
        body = "float f(const at::Tensor& t) { return *t.data_ptr<float>(); }\n"
        with tree({"plugin_api/src/runtime/host.cc": body,
                   "plugins/x/x_stage.cc": body}) as root:
            rc, out, _ = run("--root", root)
            self.assertEqual(rc, 1)
            self.assertEqual([e["file"] for e in out["errors"]], ["plugins/x/x_stage.cc"])

    def test_the_plugin_kits_are_scanned(self):
        body = "float f(const at::Tensor& t) { return *t.data_ptr<float>(); }\n"
        with tree({"plugin_api/kits/x/x_ops.cc": body}) as root:
            rc, out, _ = run("--root", root)
            self.assertEqual(rc, 1)
            self.assertEqual([e["file"] for e in out["errors"]], ["plugin_api/kits/x/x_ops.cc"])

    def test_marker_on_the_last_line_of_a_multiline_call(self):
        src = ("at::Tensor f(int64_t n) {\n"
               "  return at::arange(n,\n"
               "                    at::kLong);  // host: a CPU index list for std::sort\n"
               "}\n")
        with tree({"plugins/x/x.cc": src}) as root:
            rc, out, _ = run("--root", root)
            self.assertEqual(rc, 0, out)

    def test_missing_path_is_a_usage_error(self):
        rc, _, err = run(os.path.join(FIXTURES, "no_such_file.cc"))
        self.assertEqual(rc, 2)
        self.assertIn("no such file", err)


if __name__ == "__main__":
    unittest.main()
