"""Checks at the command line's edge, run before any work starts: option values and output paths.

A backtest of the default workload runs for half a minute; a ``--json`` path in a missing
directory used to fail only after all of it, with a traceback. Every check here raises
:class:`~llmscale.errors.ConfigError` (exit code 2) naming the option, e.g.
``--slo-ttft-s = nan, must be a number in (0, inf)``.
"""

from __future__ import annotations

import os
from pathlib import Path

from llmscale.errors import ConfigError
from llmscale.ranges import Interval

__all__ = ["check_option", "check_output_path"]


def check_option(option: str, value: float | None, interval: str, *, integer: bool = False) -> None:
    """``value`` (None: not given) lies in ``interval``, e.g. ``check_option("--grace-s", g, "[0, inf)")``.

    Interval notation as in :mod:`llmscale.ranges`: an open end at ``inf`` means finite, and NaN
    lies in no interval.
    """
    bounds = Interval.parse(interval)
    if value is None or value in bounds:
        return
    finite = "" if integer or bounds.hi_closed else "finite "
    kind = "an integer" if integer else f"a {finite}number"
    raise ConfigError(f"{option} = {value!r}, must be {kind} in {interval}")


def check_output_path(option: str, path: Path) -> None:
    """``path`` can be written: its directory exists and takes a new file, or it is a writable file.

    The directory is not created (a typo in it would otherwise leave a new directory tree
    behind). Probing by opening, not by :func:`os.access`: root passes every access check, yet
    a read-only file system still refuses. An existing file is opened for appending, which
    leaves it unchanged; a new one is created and removed again.
    """
    where = f"{option} {path}"
    if path.is_symlink():
        # The writers follow a link (report.html.write_page), so the file it names is what counts;
        # probing the link itself made a dangling link look like an existing file (EEXIST).
        path = path.resolve()
    if path.is_dir():
        raise ConfigError(f"{where}: is a directory; give a file name")
    parent = path.parent
    if not parent.exists():
        raise ConfigError(f"{where}: directory {parent} does not exist")
    if not parent.is_dir():
        raise ConfigError(f"{where}: {parent} is not a directory")
    try:
        if path.exists():
            if path.is_file():
                with path.open("ab"):
                    pass
            elif not os.access(path, os.W_OK):  # a device or a pipe: opening may block
                raise PermissionError(13, "Permission denied")
        else:
            with path.open("xb"):
                pass
            path.unlink()
    except OSError as e:
        raise ConfigError(f"{where}: cannot write there: {e.strerror or e}") from e
