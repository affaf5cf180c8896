"""Where a command prints and writes: its consoles, its output files and its ``--json`` option."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from llmscale.edge import check_distinct_paths, check_output_path
from llmscale.errors import LlmscaleError

__all__ = ["JsonOpt", "json_console", "make_console", "write_output"]


def make_console(*, stderr: bool) -> Any:
    """A rich console; when output is not a terminal (a file, CI) use a wide page, not 80 columns."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, width=180 if wide else None)


def write_output(path: Path, text: str, option: str) -> None:
    """Write an output file; a full disk or a vanished directory is an error naming the option.

    The paths were checked writable before the run, but a write can still fail at the end
    (ENOSPC: found with ``--json /dev/full``, which printed a traceback after the whole run).
    """
    try:
        path.write_text(text)
    except OSError as e:
        raise LlmscaleError(f"{option} {path}: cannot write: {e.strerror or e}") from e


#: ``--json PATH`` of the commands that also print a table
JsonOpt = Annotated[
    str | None,
    typer.Option(
        "--json",
        help="Also write the results as JSON to PATH ('-' for stdout: the JSON alone there, the "
        "table on stderr); schema: src/llmscale/schemas/<command>.schema.json.",
    ),
]


def json_console(json_out: str | None, *checked: tuple[str, Path | None]) -> Any:
    """The console of a command with --json: stderr when the JSON takes stdout. A --json PATH is
    checked writable, and distinct from ``checked`` (the command's inputs), before any work."""
    if json_out not in (None, "-"):
        assert json_out is not None
        check_output_path("--json", Path(json_out))
        check_distinct_paths([("--json", Path(json_out))], list(checked))
    return make_console(stderr=json_out == "-")
