"""Write src/llmscale/schemas/<command>.schema.json from the pydantic models of llmscale.schemas.

    python scripts/gen_schemas.py          # write the files
    python scripts/gen_schemas.py --check  # exit 1, naming the files, when one is out of date

tests/cli/test_output_schemas.py runs the check; rerun this after changing a model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from llmscale.schemas import COMMANDS, schema_of

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "src" / "llmscale" / "schemas"


def rendered(command: str) -> str:
    return json.dumps(schema_of(command), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when a file differs")
    args = ap.parse_args(argv)
    stale = []
    for command in COMMANDS:
        path = SCHEMA_DIR / f"{command}.schema.json"
        text = rendered(command)
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path.name)
        if not args.check:
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run scripts/gen_schemas.py)", file=sys.stderr)
        return 1
    if not args.check:
        print(f"wrote {len(stale)} of {len(COMMANDS)} schema file(s) in {SCHEMA_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
