"""The README opens with a working example: its first block, run exactly as written."""

from __future__ import annotations

import contextlib
import io
import unittest

from _support import ServerEnv, readme_example


class ReadmeExample(unittest.TestCase):
    def test_the_first_block_runs_as_written(self) -> None:
        ServerEnv()  # the block reads ACP_URL and ACP_API_KEY: fail clearly without a server
        code = readme_example()
        self.assertIn("Agent.create(", code)
        out = io.StringIO()
        scope: dict = {"__name__": "readme_example"}
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), scope)
        printed = out.getvalue().split()
        self.assertIn(printed[0], ("allow", "challenge", "deny"), out.getvalue())
        self.assertTrue(scope["agent"].agent_id.startswith("agt_"))
        self.assertEqual(scope["decision"].decision, printed[0])


if __name__ == "__main__":
    unittest.main()
