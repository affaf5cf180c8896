"""Checks at the command line's edge, run before any work starts: option values and output paths.

A backtest of the default workload runs for half a minute; a ``--json`` path in a missing
directory used to fail only after all of it, with a traceback. Every check here raises
:class:`~llmscale.errors.ConfigError` (exit code 2) naming the option, e.g.
``--slo-ttft-s = nan, must be a number in (0, inf)``.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from llmscale.errors import ConfigError
from llmscale.ranges import Interval

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_LOG_BYTES",
    "MAX_TOKEN_BYTES",
    "MAX_TRACE_BYTES",
    "InputFileError",
    "check_distinct_paths",
    "check_input_file",
    "check_option",
    "check_output_path",
    "decode_text",
    "input_problem",
    "read_input_bytes",
    "read_input_text",
    "shown_path",
]


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
    leaves it unchanged; a new one is created and removed again. A named pipe, a socket or a
    device is refused: the probe passed on a FIFO and the run then blocked at its first write
    (``run``'s decision log, where it also ignored SIGTERM); ``-`` is how an option that can
    write to standard output is asked to.
    """
    where = f"{option} {shown_path(path)}"
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            # The writers follow a link (report.page.write_page), so the file it names is what counts;
            # probing the link itself made a dangling link look like an existing file (EEXIST).
            path = path.resolve()
    except (FileNotFoundError, NotADirectoryError):
        pass  # told apart below
    except (OSError, ValueError, RuntimeError) as e:
        raise ConfigError(f"{where}: {_stat_problem(e) if not isinstance(e, RuntimeError) else e}") from e
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise ConfigError(f"{where}: {path.parent} is not a directory") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"{where}: {_stat_problem(e)}") from e
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{where}: is a directory; give a file name")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{where}: is {_kind(st.st_mode)}, not a regular file; write to a file")
    parent = path.parent
    if not parent.exists():
        raise ConfigError(f"{where}: directory {parent} does not exist")
    if not parent.is_dir():
        raise ConfigError(f"{where}: {parent} is not a directory")
    try:
        if st is not None:
            with path.open("ab"):
                pass
        else:
            with path.open("xb"):
                pass
            path.unlink()
    except OSError as e:
        raise ConfigError(f"{where}: cannot write there: {e.strerror or e}") from e


# ---- input files ---------------------------------------------------------------------------------
#
# Every file a command reads is checked before the first byte: a named pipe without a writer
# blocked `run` forever (and SIGTERM could not stop it), /dev/zero was read until MemoryError,
# and a gzip of 10 MB of zeros inflated to 10 GB. The limits below bound what is read, raw and
# inflated; each is far above any real file of its kind, and the message names the limit.

#: A trace, raw or after gunzip: 2 GiB. MAX_REQUESTS (20 million) rows of an Azure or plain CSV
#: trace take ~40-100 bytes each, 0.8-2 GB; a larger file would be refused by the row limit anyway,
#: after costing its whole size in memory (a trace is parsed in memory, ~2.5x its size).
MAX_TRACE_BYTES = 2 * 1024**3
#: A decision log read by ``analyze`` / ``diagnose``: 2 GiB. A week of 2 s ticks is 302,400
#: lines of ~1.5 kB each, 0.45 GB.
MAX_LOG_BYTES = 2 * 1024**3
#: A YAML or JSON document a person writes or a tool saves (run's config, --policy-config, a
#: tenants file, a calibration profile, controller state, a benchmark result): 64 MiB. The
#: largest we write is a calibration profile of a few kB; a `vllm bench serve` result of 100,000
#: requests with every inter-token gap is ~40 MB.
MAX_DOCUMENT_BYTES = 64 * 1024**2
#: A token file: 64 kB (a bearer token is tens of bytes).
MAX_TOKEN_BYTES = 64 * 1024

#: gunzip in pieces of this size, so a bomb is refused after at most the limit plus one piece
_INFLATE_CHUNK_BYTES = 16 * 1024**2
#: a file name is shown whole up to this length; a longer one by its ends
_SHOWN_NAME_CHARS = 160


class InputFileError(ConfigError):
    """An input file cannot be read as one: ``path`` and ``problem`` kept apart for callers that
    report in their own terms (a trace loader raises TraceFormatError with them)."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{shown_path(path)}: {problem}")


def shown_path(path: str | os.PathLike[str]) -> str:
    """``path`` for a one-line message: a name of 5,000 characters is shown by its two ends."""
    text = os.fspath(path)
    if isinstance(text, bytes):  # pragma: no cover - the CLI hands str paths
        text = text.decode(errors="replace")
    if len(text) <= _SHOWN_NAME_CHARS:
        return text
    half = _SHOWN_NAME_CHARS // 2
    return f"{text[:half]}...{text[-half:]} ({len(text):,} characters)"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("kiB", 1024)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _stat_problem(exc: OSError | ValueError) -> str:
    if isinstance(exc, ValueError):  # "embedded null byte"
        return f"not a usable file name ({exc})"
    if exc.errno == errno.ENOENT:
        return "file not found"
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long for this system"
    return f"cannot read: {exc.strerror or exc}"


def input_problem(path: str | os.PathLike[str], max_bytes: int, *, directory_ok: bool = False) -> str | None:
    """Why ``path`` cannot be read as an input of at most ``max_bytes``, or None when it can.

    A regular file (a symbolic link is followed), or a directory when ``directory_ok``. Never
    opens the file: opening a FIFO blocks until a writer comes.
    """
    try:
        st = os.stat(path)
    except (OSError, ValueError) as exc:
        return _stat_problem(exc)
    if stat.S_ISDIR(st.st_mode):
        return None if directory_ok else "is a directory, expected a file"
    if not stat.S_ISREG(st.st_mode):
        return f"is {_kind(st.st_mode)}, not a regular file"
    if st.st_size > max_bytes:
        return f"is {_size(st.st_size)}, over the {_size(max_bytes)} such a file may have"
    return None


def check_input_file(
    path: str | os.PathLike[str], max_bytes: int = MAX_DOCUMENT_BYTES, *, directory_ok: bool = False
) -> None:
    """Raise :class:`InputFileError` (exit 2) when :func:`input_problem` finds one."""
    problem = input_problem(path, max_bytes, directory_ok=directory_ok)
    if problem is not None:
        raise InputFileError(path, problem)


def read_input_bytes(path: str | os.PathLike[str], max_bytes: int, *, gunzip: bool = False) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (after inflating, with ``gunzip``).

    Opened without blocking and checked again on the open descriptor, so a file swapped for a
    FIFO between the check and the open cannot block. A gzip member that inflates past
    ``max_bytes`` is refused after reading at most ``max_bytes`` plus 16 MiB of it. Raises
    :class:`InputFileError`; a corrupt gzip stream raises what :mod:`gzip` raises (OSError,
    EOFError, zlib.error) for the caller to word.
    """
    check_input_file(path, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InputFileError(path, _stat_problem(exc)) from exc
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(path, f"is {_kind(st.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
        try:
            if not gunzip:
                # the size the file has, +1 to see one that grew since: one read of a regular file
                return _read_bounded(fh.read, min(st.st_size, max_bytes) + 1, max_bytes, path, "is")
            import gzip

            with gzip.GzipFile(fileobj=fh) as gz:
                return _read_bounded(gz.read, _INFLATE_CHUNK_BYTES, max_bytes, path, "inflates to")
        except MemoryError as exc:
            raise InputFileError(path, "too large to read into this machine's memory") from exc
        except OSError as exc:
            if gunzip and (exc.errno is None or type(exc).__name__ == "BadGzipFile"):
                raise  # a corrupt gzip stream (gzip raises a bare OSError): the caller words it
            raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from exc


def _read_bounded(
    read: Callable[[int], bytes], first_size: int, max_bytes: int, path: str | os.PathLike[str], verb: str
) -> bytes:
    """Everything ``read`` gives, in pieces (the first of ``first_size``, then 16 MiB), refused as
    soon as it passes ``max_bytes``: one ``read(max_bytes + 1)`` would allocate the whole limit up
    front, 2 GiB for every trace."""
    pieces: list[bytes] = []
    total = 0
    size = first_size
    while piece := read(size):
        total += len(piece)
        if total > max_bytes:
            raise InputFileError(path, f"{verb} over the {_size(max_bytes)} such a file may have")
        pieces.append(piece)
        size = _INFLATE_CHUNK_BYTES
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def decode_text(path: str | os.PathLike[str], raw: bytes, what: str = "text") -> str:
    """``raw`` as UTF-8 (a leading BOM dropped, as spreadsheets write it); a binary file is refused.

    A NUL byte is valid UTF-8 but never in a text file a person or tool writes as text: it is
    the mark of a binary file (an ELF, a gzip without .gz), so it is refused with the line.
    """
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputFileError(
            path, f"line {line}: byte {exc.start} is not UTF-8: not {what} (a binary file?)"
        ) from exc
    nul = text.find("\0")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise InputFileError(path, f"line {line}: a NUL byte: not {what} (a binary file?)")
    return text


def read_input_text(
    path: str | os.PathLike[str], max_bytes: int = MAX_DOCUMENT_BYTES, what: str = "text"
) -> str:
    """A text input file, checked (:func:`read_input_bytes`) and decoded (:func:`decode_text`)."""
    return decode_text(path, read_input_bytes(path, max_bytes), what)


# ---- outputs against inputs ------------------------------------------------------------------------


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same inode when both exist, else the same resolved path."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return a.resolve() == b.resolve()
    except (OSError, ValueError, RuntimeError):
        return False


def check_distinct_paths(
    outputs: Sequence[tuple[str, Path | None]], inputs: Sequence[tuple[str, Path | None]] = ()
) -> None:
    """No output overwrites an input of the same run, nor another output.

    ``--json trace.csv`` replaced the trace with the results after the run, and ``--report x
    --decisions x`` kept whichever was written last. Pairs are (option, path); None is "not
    given". Raises ConfigError naming both options.
    """
    given_out = [(opt, p) for opt, p in outputs if p is not None]
    given_in = [(opt, p) for opt, p in inputs if p is not None]
    for i, (opt, p) in enumerate(given_out):
        for other_opt, q in given_out[:i]:
            if _same_file(p, q):
                raise ConfigError(f"{opt} {shown_path(p)}: the same file as {other_opt}; give each its own")
        for in_opt, q in given_in:
            if _same_file(p, q):
                raise ConfigError(
                    f"{opt} {shown_path(p)}: is the input {in_opt}; writing there would overwrite it"
                )
