"""The documentation site builds with `mkdocs build --strict`: every page in the nav, no broken link.

Strict mode turns mkdocs' warnings into a failure: a link to a page or an anchor that does not
exist, a page under docs/ missing from the nav (mkdocs.yml's `validation`), an image that is not
there. The site is built into a scratch directory, never into the checkout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    for page in ("index", "getting-started", "commands", "backtest", "policies", "kubernetes", "input-files"):
        assert (site / page / "index.html").is_file() or (site / f"{page}.html").is_file(), page
    # The README links into docs/: each target is a page of the site.
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(docs/([^)#]+)\.md", readme):
        assert (REPO / "docs" / f"{target}.md").is_file(), f"README links docs/{target}.md, which is missing"
