"""doc/python.md's examples run: every ```python block, in order, in one namespace, in a
temporary directory (the blocks build small synthetic indexes there)."""
import contextlib
import io
import os
import re
import shutil
import tempfile
import unittest

SRCDIR = os.environ.get("TT_SRCDIR", "")
DOC = os.path.join(SRCDIR, "doc", "python.md")


@unittest.skipUnless(SRCDIR and os.path.exists(DOC), "needs TT_SRCDIR with doc/python.md")
@unittest.skipIf(os.environ.get("TT_SANITIZERS"), "seven builds; run in the plain build")
class TestDocExamples(unittest.TestCase):
    def test_python_blocks_run(self):
        with open(DOC) as f:
            text = f.read()
        blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
        self.assertGreaterEqual(len(blocks), 6)
        cwd = os.getcwd()
        tmp = tempfile.mkdtemp(prefix="tartan-doc-")
        ns = {"__name__": "doc_python_md"}
        out = io.StringIO()
        try:
            os.chdir(tmp)
            for i, code in enumerate(blocks):
                with self.subTest(block=i), contextlib.redirect_stdout(out):
                    exec(compile(code, f"{DOC} block {i + 1}", "exec"), ns)
        finally:
            os.chdir(cwd)
            shutil.rmtree(tmp, ignore_errors=True)
        printed = out.getvalue()
        # the table printed one row per width, 4 bits first
        rows = re.findall(r"^\s+([124])\s+\d+\s+[\d.]+\s+([\d.]+)\s+", printed, flags=re.M)
        self.assertEqual([r[0] for r in rows], ["4", "2", "1"], printed)
        self.assertIn("-8 ", printed)  # the ExistsError example printed its status


if __name__ == "__main__":
    unittest.main()
