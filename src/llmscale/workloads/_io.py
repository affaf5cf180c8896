"""Reading trace files into string columns, and parsing columns with exact error locations.

Everything here is vectorised on the happy path (numpy parses a column of
strings in one call: about 60 ms per million values) and falls back to a
per-value Python loop only after numpy has refused a column, to find the
first bad value and report its 1-based line and field. Bad input therefore
never costs the good path anything, and never surfaces as a traceback.
"""

from __future__ import annotations

import csv
import gzip
import re
import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from llmscale.edge import MAX_TRACE_BYTES, InputFileError, input_problem, read_input_bytes, shown_path
from llmscale.errors import TraceFormatError
from llmscale.workloads.limits import MAX_ABS_TIME_S, MAX_TOKENS

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def _is_gzip(path: Path) -> bool:
    return path.name.endswith(".gz")


#: the two bytes every gzip member starts with (RFC 1952, 2.3.1)
_GZIP_MAGIC = b"\x1f\x8b"


def _gzip_problem(exc: BaseException, start: bytes) -> str:
    """What a failed gunzip means for the user (gzip, zlib and EOF errors word it for a developer).

    ``start`` is the file's first bytes: without the gzip magic the file is not gzip at all.
    """
    if not start.startswith(_GZIP_MAGIC):
        return "not a gzip file, although its name ends in .gz (no gzip header)"
    if isinstance(exc, EOFError):
        return "corrupt gzip file: it ends before the end of the compressed data (truncated?)"
    return f"corrupt gzip file: {exc}"


def _file_start(path: Path) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(2)
    except OSError:
        return b""


def check_regular_file(path: Path, *, directory_ok: bool = False) -> None:
    """A trace is a regular file of at most :data:`~llmscale.edge.MAX_TRACE_BYTES`: reading
    /dev/zero never ends, and a named pipe without a writer blocks before the first byte.
    Raises TraceFormatError."""
    problem = input_problem(path, MAX_TRACE_BYTES, directory_ok=directory_ok)
    if problem is not None:
        raise TraceFormatError(problem, path=shown_path(path))


def _read_bytes(path: Path, gunzip: bool) -> bytes:
    """The file's bytes (inflated with ``gunzip``), bounded by MAX_TRACE_BYTES; TraceFormatError."""
    try:
        return read_input_bytes(path, MAX_TRACE_BYTES, gunzip=gunzip)
    except InputFileError as exc:
        raise TraceFormatError(exc.problem, path=shown_path(path)) from exc
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(_gzip_problem(exc, _file_start(path)), path=str(path)) from exc


def read_text(path: Path) -> str:
    """Whole file as text; ``.gz`` files are decompressed. Raises TraceFormatError."""
    where = str(path)
    raw = _read_bytes(path, _is_gzip(path))
    try:
        return raw.decode("utf-8-sig")  # -sig: tolerate the BOM spreadsheets write
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TraceFormatError("not UTF-8 text (binary file?)", path=where, line=line) from exc


def first_line(path: Path, max_bytes: int = 65536) -> str:
    """First non-blank line of a (possibly gzipped) text file, for format sniffing; '' if none.

    A file that cannot be read, or a ``.gz`` file that does not decompress, raises
    TraceFormatError saying so: sniffing it as "empty" would send the user looking for a
    missing header in a file that is corrupt.
    """
    check_regular_file(path)
    try:
        if _is_gzip(path):
            with gzip.open(path, "rb") as fh:
                head = fh.read(max_bytes)
        else:
            with path.open("rb") as fh:
                head = fh.read(max_bytes)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceFormatError(_gzip_problem(exc, _file_start(path)), path=str(path)) from exc
    except OSError as exc:
        raise TraceFormatError(f"cannot read file: {exc.strerror or exc}", path=str(path)) from exc
    text = head.decode("utf-8-sig", errors="replace")
    for line in split_lines(text):
        if line.strip():
            return line.strip()
    return ""


@dataclass(frozen=True)
class Table:
    """String columns of a delimited file plus the file line of every row."""

    path: str
    columns: dict[str, list[str]]
    lines: IntArray  # 1-based file line of each data row

    @property
    def num_rows(self) -> int:
        return int(self.lines.size)

    def error(self, message: str, row: int | None = None, field: str | None = None) -> TraceFormatError:
        """A TraceFormatError pointing at data row ``row`` (0-based) and ``field``."""
        line = int(self.lines[row]) if row is not None else None
        return TraceFormatError(message, path=self.path, line=line, field=field)


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` as an editor counts them: ended by ``\n``, ``\r\n`` or ``\r``.

    Not :meth:`str.splitlines`, which also breaks at form feeds, ``\x1c``-``\x1e``, NEL and
    U+2028: a stray one inside a field would split a row in two and shift the line number of
    every error after it away from what the user's editor shows.
    """
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline ending the last line opens no new one
    return lines


def _nonblank_lines(text: str) -> tuple[list[str], IntArray]:
    """Non-blank lines and their 1-based line numbers (map/all keep the common case in C)."""
    all_lines = split_lines(text)
    if all(all_lines) and not any(map(str.isspace, all_lines)):
        return all_lines, np.arange(1, len(all_lines) + 1, dtype=np.int64)
    keep = [i for i, line in enumerate(all_lines) if line and not line.isspace()]
    return [all_lines[i] for i in keep], np.asarray(keep, dtype=np.int64) + 1


def _split_rows(
    lines: list[str], line_numbers: IntArray, n_fields: int, wanted: dict[str, int], path: str
) -> dict[str, list[str]]:
    """Columns of ``lines`` (each must have ``n_fields`` fields), keeping only ``wanted``.

    Unquoted files (all the formats here) take a fast path: one join, one
    split, strided slices, about 0.3 s for a million 3-field rows versus ~2 s
    through csv.reader. Quoted files go through csv.reader.
    """

    def wrong_count(i: int, found: int) -> TraceFormatError:
        # A short row is the usual truncated-last-line symptom; name the column that is absent.
        missing = next((name for name, col in wanted.items() if col >= found), None)
        return TraceFormatError(
            f"expected {n_fields} comma-separated fields, found {found}",
            path=path,
            line=int(line_numbers[i]),
            field=missing,
        )

    flat = ",".join(lines)
    if '"' not in flat:
        commas = [line.count(",") for line in lines]
        if min(commas) != n_fields - 1 or max(commas) != n_fields - 1:
            i = next(i for i, c in enumerate(commas) if c != n_fields - 1)
            raise wrong_count(i, commas[i] + 1)
        fields = flat.split(",")
        return {name: fields[col::n_fields] for name, col in wanted.items()}
    rows = list(csv.reader(lines))
    for i, row in enumerate(rows):
        if len(row) != n_fields:
            raise wrong_count(i, len(row))
    transposed = list(zip(*rows, strict=True))
    return {name: list(transposed[col]) for name, col in wanted.items()}


def parse_table(
    text: str,
    path: str,
    required: Sequence[str],
    *,
    header: bool = True,
    positional: Sequence[str] = (),
    optional: Sequence[str] = (),
) -> Table:
    """Split CSV text into named string columns.

    With ``header=True`` the first non-blank line names the columns; names are
    matched case-insensitively after stripping spaces, extra columns are kept
    and ignored, a missing ``required`` column is an error on the header line,
    and ``optional`` columns are returned when present.
    With ``header=False`` every row must have exactly ``len(positional)``
    fields, named by ``positional``.
    """
    lines, line_numbers = _nonblank_lines(text)
    if header:
        if not lines:
            raise TraceFormatError("empty file: no header and no requests", path=path)
        names = [name.strip() for name in next(csv.reader([lines[0]]))]
        header_line = int(line_numbers[0])
        lines, line_numbers = lines[1:], line_numbers[1:]
        by_lower: dict[str, int] = {}
        for i, name in enumerate(names):
            # Two columns of one name (case and blanks aside): the later one used to win without a
            # word, so which of two ContextTokens columns was replayed depended on their order.
            if name.lower() in by_lower and name:
                first = names[by_lower[name.lower()]]
                raise TraceFormatError(
                    f"column {name!r} appears twice in the header (columns {by_lower[name.lower()] + 1} "
                    f"and {i + 1}{'' if first == name else f', as {first!r}'}); keep one",
                    path=path,
                    line=header_line,
                    field=name,
                )
            by_lower[name.lower()] = i
        for name in required:
            if name.lower() not in by_lower:
                raise TraceFormatError(
                    f"missing column {name!r}; header has {', '.join(repr(n) for n in names)}",
                    path=path,
                    line=header_line,
                    field=name,
                )
        wanted = {name: by_lower[name.lower()] for name in required}
        wanted.update({name: by_lower[name.lower()] for name in optional if name.lower() in by_lower})
        n_fields = len(names)
    else:
        wanted = {name: i for i, name in enumerate(positional)}
        n_fields = len(positional)
    if not lines:
        raise TraceFormatError("trace has no requests", path=path)
    columns = _split_rows(lines, line_numbers, n_fields, wanted, path)
    return Table(path=path, columns=columns, lines=line_numbers)


def parse_float_column(
    table: Table, name: str, *, what: str = "number", max_abs: float | None = None, unit: str = ""
) -> FloatArray:
    """A column as finite float64, each value within ``+-max_abs`` when given.

    The first bad value is reported with its line; ``unit`` (e.g. ``"s"``) words the limit.
    """
    values = table.columns[name]
    try:
        arr = np.array(values, dtype=np.float64)
    except ValueError:
        for i, value in enumerate(values):
            try:
                float(value)
            except ValueError:
                raise table.error(f"not a {what}: {value!r}", row=i, field=name) from None
        # numpy refused a column every value of which Python reads: name the column, not a row.
        raise table.error(f"not a column of {what}s", field=name) from None
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        i = int(bad[0])
        raise table.error(f"not a finite {what}: {values[i]!r}", row=i, field=name)
    if max_abs is not None:
        check_magnitude(arr, values, table, name, what=what, max_abs=max_abs, unit=unit)
    return arr


def check_magnitude(
    arr: FloatArray,
    raw: Sequence[object],
    table: Table,
    name: str,
    *,
    what: str,
    max_abs: float,
    unit: str = "",
) -> None:
    """Every ``|value| <= max_abs``; names the first row beyond it."""
    too_big = np.flatnonzero(np.abs(arr) > max_abs)
    if too_big.size:
        i = int(too_big[0])
        limit = f"{max_abs:.0e} {unit}".replace("e+", "e").strip()
        raise table.error(
            f"{what} {raw[i]!r} is beyond the largest a trace may hold ({limit})",
            row=i,
            field=name,
        )


def parse_token_column(table: Table, name: str) -> IntArray:
    """A column of token counts as int64 in ``[0, MAX_TOKENS]`` (zeros are the caller's policy)."""
    arr = parse_float_column(table, name, what="token count")
    return check_token_counts(arr, table.columns[name], table, name)


def check_token_counts(arr: FloatArray, raw: Sequence[object], table: Table, name: str) -> IntArray:
    """Whole token counts in ``[0, MAX_TOKENS]``; names the first offending row.

    The upper bound is checked before the conversion to int64, which would turn 1e30 into a
    negative count without a word.
    """
    negative = np.flatnonzero(arr < 0)
    if negative.size:
        i = int(negative[0])
        raise table.error(f"negative token count: {raw[i]!r}", row=i, field=name)
    too_big = np.flatnonzero(arr > MAX_TOKENS)
    if too_big.size:
        i = int(too_big[0])
        raise table.error(
            f"token count {raw[i]!r} is above the limit of {MAX_TOKENS:,} tokens a request may have",
            row=i,
            field=name,
        )
    fractional = np.flatnonzero(arr != np.floor(arr))
    if fractional.size:
        i = int(fractional[0])
        raise table.error(f"token count is not a whole number: {raw[i]!r}", row=i, field=name)
    return arr.astype(np.int64)


#: a UTC offset ending an ISO timestamp: ``Z`` or ``+HH:MM`` / ``-HH:MM``
_ZONE = re.compile(r"(Z|[+-]\d\d:\d\d)$")
#: offsets in use run from UTC-12:00 to UTC+14:00; anything past 14 hours is no zone
_MAX_OFFSET_S = 14 * 3600


def _zone_of(value: str) -> str | None:
    m = _ZONE.search(value)
    if m is None or len(value) <= 6:
        return None
    return "+00:00" if m.group(1) == "Z" else m.group(1)


def _split_timezone(table: Table, name: str, values: list[str]) -> list[str]:
    """Strip one UTC offset shared by every row (numpy datetime64 has no zones).

    Every row must be written in the same zone: all without an offset, or all with the same one
    (``Z`` and ``+00:00`` are one). A trace of mixed offsets is refused at the first row that
    differs, rather than converted: rows 10 s apart as written, one at ``+05:00``, became an
    18,010 s trace, and a replay cannot tell a gap of hours from rows taken on two clocks (or
    a daylight-saving change: convert such a trace to one zone first). An offset past 14 hours
    or with minutes past 59 is refused. With one offset the relative times are those written.
    """
    first = _zone_of(values[0]) if values else None
    last = _zone_of(values[-1]) if values else None
    if first is None and last is None:
        return values  # a zone in a middle row is refused by the parser's fallback, naming it
    naive: list[str] = []
    for i, v in enumerate(values):
        zone = _zone_of(v)
        if zone != first:
            said = "no UTC offset" if zone is None else f"UTC offset {zone}"
            was = "none" if first is None else first
            raise table.error(
                f"timestamp {v!r} has {said}, the first row's is {was}: write every row in one zone",
                row=i,
                field=name,
            )
        naive.append(v[: len(v) - (1 if v.endswith("Z") else 6)])
    assert first is not None
    hours, minutes = int(first[1:3]), int(first[4:6])
    if minutes > 59 or hours * 3600 + minutes * 60 > _MAX_OFFSET_S:
        raise table.error(
            f"timestamp {values[0]!r}: UTC offset {first} is no time zone (they run from -12:00 to +14:00)",
            row=0,
            field=name,
        )
    return naive


#: a plain decimal number (what a spreadsheet or a script writes for epoch seconds)
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")

#: nanosecond timestamps hold 1677-09-21 to 2262-04-11; a difference of two of them fits an
#: int64 only within 2^63 ns (292 years), so a column spanning more is refused before subtracting
_MAX_STAMP_SPAN_NS = 2**62


def parse_datetime_column(table: Table, name: str) -> FloatArray:
    """Timestamps as float seconds since the first row: ISO-like strings or epoch seconds.

    ISO-like strings (``2023-11-16 18:17:03.9799600``) are parsed by numpy's
    datetime64[ns] in one call (about 50 ms per million rows), then converted to
    seconds relative to the first row so float64 keeps sub-microsecond resolution
    (epoch seconds would keep only ~0.2 us). One UTC offset shared by every row
    (``+00:00``, ``Z``) is accepted; mixed offsets are refused (see :func:`_split_timezone`).

    A column whose first value is a plain number (``1700000000.25``) holds Unix
    epoch seconds (or any seconds): numpy would read ``1700000000`` as the year
    1,700,000,000 and wrap it silently into the nanosecond range, and ``2023`` as
    the year 2023 (two rows a year apart: 8,760 GPU-hours for two requests).
    Numbers above :data:`MAX_ABS_TIME_S` are refused as a unit slip (epoch
    milliseconds are ~1.7e12), and so is a bare number among ISO timestamps.
    """
    values = [v.strip() for v in table.columns[name]]
    if values and _NUMBER.fullmatch(values[0]):
        return _parse_epoch_seconds(table, name, values)
    naive = _split_timezone(table, name, values)
    _refuse_bare_numbers(table, name, naive)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warns (not fails) on some odd strings: treat as bad
        try:
            stamps = np.array(naive, dtype="datetime64[ns]")
            days = np.array(naive, dtype="datetime64[D]")
        except (ValueError, UserWarning, DeprecationWarning, OverflowError):
            for i, value in enumerate(naive):
                try:
                    np.datetime64(value, "ns")
                    np.datetime64(value, "D")
                except (ValueError, UserWarning, DeprecationWarning, OverflowError):
                    if _zone_of(values[i]) is not None:
                        raise table.error(
                            f"timestamp {values[i]!r} has UTC offset {_zone_of(values[i])}, the first "
                            "row's has none: write every row in one zone",
                            row=i,
                            field=name,
                        ) from None
                    raise table.error(
                        f"unparseable timestamp {values[i]!r} (expected e.g. '2023-11-16 18:17:03.9799600')",
                        row=i,
                        field=name,
                    ) from None
            raise table.error("not a column of timestamps", field=name) from None
    bad = np.flatnonzero(np.isnat(stamps))
    if bad.size:
        i = int(bad[0])
        raise table.error(f"unparseable timestamp {values[i]!r}", row=i, field=name)
    # numpy wraps a date outside 1677-2262 into that range when it converts to nanoseconds;
    # the same string read as days does not wrap, so the two disagree exactly where it did.
    wrapped = np.flatnonzero(stamps.astype("datetime64[D]") != days)
    if wrapped.size:
        i = int(wrapped[0])
        raise table.error(
            f"timestamp {values[i]!r} is outside the years 1678-2261 a trace may hold", row=i, field=name
        )
    ns = stamps.astype(np.int64)
    lo, hi = int(ns.argmin()), int(ns.argmax())
    if int(ns[hi]) - int(ns[lo]) > _MAX_STAMP_SPAN_NS:
        raise table.error(
            f"timestamp {values[hi]!r} is more than 146 years after {values[lo]!r} "
            f"(line {int(table.lines[lo])})",
            row=hi,
            field=name,
        )
    rel_s: FloatArray = (ns - ns[0]).astype(np.float64) / 1e9
    return rel_s


def is_epoch_seconds(table: Table, name: str) -> bool:
    """Whether :func:`parse_datetime_column` reads column ``name`` as plain seconds."""
    values = table.columns[name]
    return bool(values) and _NUMBER.fullmatch(values[0].strip()) is not None


def _parse_epoch_seconds(table: Table, name: str, values: list[str]) -> FloatArray:
    """A timestamp column of plain numbers: seconds (Unix epoch or any origin) since the first row."""
    for i, value in enumerate(values):
        if not _NUMBER.fullmatch(value):
            raise table.error(
                f"timestamp {value!r} is not a number of seconds, although the first row's is "
                f"({values[0]!r}): write every row the same way",
                row=i,
                field=name,
            )
    arr = np.array(values, dtype=np.float64)
    too_big = np.flatnonzero(~(np.abs(arr) <= MAX_ABS_TIME_S))
    if too_big.size:
        i = int(too_big[0])
        raise table.error(
            f"timestamp {values[i]!r} is not epoch seconds: above {MAX_ABS_TIME_S:g} (the year 5138); "
            "epoch milliseconds? divide by 1000",
            row=i,
            field=name,
        )
    rel_s: FloatArray = arr - arr[0]
    return rel_s


def _refuse_bare_numbers(table: Table, name: str, naive: list[str]) -> None:
    """An all-digit value among ISO timestamps would parse as a year: name its row.

    ``map(str.isdigit, ...)`` runs in C: ~20 ms per million rows. A signed one ("-5") parses as
    a year outside 1678-2261 and is caught by the range check after parsing.
    """
    if not any(map(str.isdigit, naive)):
        return
    i = next(i for i, v in enumerate(naive) if v.isdigit())
    raise table.error(
        f"timestamp {naive[i]!r} is a bare number among date-times (read as the year {naive[i]}?); "
        "write every row the same way",
        row=i,
        field=name,
    )


def datetime_label(table: Table, name: str, row: int) -> str:
    """The timestamp of data row ``row`` as written, for provenance in ``meta``."""
    return table.columns[name][row].strip()
