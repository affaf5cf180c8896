"""What every ``llmscale`` command shares: logging options, environment variables, JSON output.

One place configures logging for the whole command line: :class:`CommonOptionsGroup` (the
Typer app's group class) gives every command ``--log-level`` and ``--log-format`` and runs
:func:`configure_logging` before the command's own code, and it gives every option an
environment variable ``LLMSCALE_<OPTION>`` (``--max-replicas`` reads ``LLMSCALE_MAX_REPLICAS``),
shown in ``--help``. A value on the command line wins over the variable, the variable over the
default. Commands keep their own signatures: nothing here is repeated in a command module.

:func:`write_json` is how a command prints its ``--json`` document: the document carries
``schema_version`` (:data:`llmscale.schemas.SCHEMA_VERSION`) and is checked in the tests against
the shipped schema of its command (``src/llmscale/schemas/<command>.schema.json``).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.main
from typer.core import TyperGroup, TyperOption

__all__ = [
    "ENV_PREFIX",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "CommonOptionsGroup",
    "JsonLogFormatter",
    "configure_logging",
    "envvar_of",
    "write_json",
]

ENV_PREFIX = "LLMSCALE_"
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")

#: Commands that run until stopped log their progress at INFO; the one-shot commands print their
#: results and log only what went wrong (WARNING), so a script reading their stderr sees nothing
#: when all is well.
_INFO_BY_DEFAULT = frozenset({"run", "emulate"})

#: HTTP and Kubernetes client libraries whose per-request lines (httpx: one INFO line per request,
#: 3-4 per controller tick) are shown only at --log-level debug.
QUIET_LIBRARIES = ("httpx", "httpcore", "urllib3", "kubernetes", "aiohttp.access", "hpack")

#: LogRecord attributes that are not ``extra=`` fields (Python's own, plus what Formatter adds)
_RECORD_ATTRS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys() | {"message", "asctime", "taskName"}
)


class LogLevel(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class LogFormat(StrEnum):
    text = "text"
    json = "json"


class JsonLogFormatter(logging.Formatter):
    """One JSON object a line: ``time`` (UTC, ISO 8601 with ms), ``level``, ``logger``, ``message``,
    every ``extra=`` field of the call, and ``exception`` (the traceback) when there is one.

    A value JSON cannot hold (a Path, an enum) is written as its ``str``.
    """

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRS and key not in doc:
                doc[key] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exception"] = record.exc_text
        return json.dumps(doc, default=str, ensure_ascii=False)


class _OurHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler configure_logging installs (found again and replaced by the next call).

    It writes to whatever ``sys.stderr`` is at each record, not the one of its creation: a test
    runner that swaps stderr per invocation would otherwise leave it writing to a closed stream.
    """

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


#: the log format the command runs with (``configure_logging``): notices follow it
_FORMAT = "text"


def notice(console: Any, markup: str, plain: str) -> None:
    """A line the command always prints on stderr (what it assumed, how it scaled a trace):
    ``markup`` on the console in text mode; with ``--log-format json`` a JSON log line of
    ``plain`` from the logger ``llmscale.cli`` at INFO, whatever the level, so every stderr line
    stays one JSON object."""
    if _FORMAT != "json":
        console.print(markup, highlight=False)
        return
    record = logging.LogRecord("llmscale.cli", logging.INFO, __file__, 0, plain, None, None)
    for h in logging.getLogger().handlers:
        if isinstance(h, _OurHandler):
            h.handle(record)


def configure_logging(level: str, fmt: str = "text") -> None:
    """Log to stderr at ``level`` in ``fmt`` (``text`` or ``json``); library request logs at DEBUG only.

    Idempotent: a second call replaces the handler of the first (tests invoke many commands in
    one process; the stream is the ``sys.stderr`` of the call).
    """
    lvl = logging.getLevelName(level.upper())
    if not isinstance(lvl, int) or level.lower() not in LOG_LEVELS:
        raise typer.BadParameter(f"{level!r} is not one of {', '.join(LOG_LEVELS)}", param_hint="--log-level")
    if fmt not in LOG_FORMATS:
        raise typer.BadParameter(f"{fmt!r} is not one of {', '.join(LOG_FORMATS)}", param_hint="--log-format")
    global _FORMAT
    _FORMAT = fmt
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, _OurHandler)]:
        root.removeHandler(h)
    handler = _OurHandler()
    if fmt == "json":
        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(lvl)
    quiet = logging.DEBUG if lvl <= logging.DEBUG else logging.WARNING
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(quiet)


def envvar_of(option: str) -> str:
    """``LLMSCALE_<OPTION>`` of a flag: ``--max-replicas`` (or ``max_replicas``) -> LLMSCALE_MAX_REPLICAS."""
    return ENV_PREFIX + option.lstrip("-").replace("-", "_").upper()


def _common_params() -> list[Any]:
    """``--log-level`` and ``--log-format`` as Typer builds options (help, choices, env var)."""
    proto = typer.Typer(add_completion=False)

    @proto.command()
    def common(
        log_level: Annotated[
            LogLevel,
            typer.Option(
                case_sensitive=False,
                help="Level of the log lines on stderr (HTTP and Kubernetes client requests only at "
                "debug). Default: info for run and emulate, warning for the others.",
            ),
        ] = LogLevel.warning,
        log_format: Annotated[
            LogFormat,
            typer.Option(
                help="Log lines as text, or as JSON objects (time, level, logger, message, extra fields)."
            ),
        ] = LogFormat.text,
    ) -> None:
        pass

    return list(typer.main.get_command(proto).params)


def _add_common_options(name: str, cmd: Any) -> None:
    """Environment variables for ``cmd``'s options; ``--log-level``/``--log-format`` run first."""
    if getattr(cmd, "_llmscale_common", False):
        return
    cmd._llmscale_common = True
    have = {p.name for p in cmd.params}
    for param in _common_params():
        if param.name not in have:
            if param.name == "log_level" and name in _INFO_BY_DEFAULT:
                param.default = LogLevel.info
            cmd.params.append(param)
    for p in cmd.params:
        if isinstance(p, TyperOption) and not p.hidden and p.envvar is None:
            # the first long flag names it: --json (parameter json_out) reads LLMSCALE_JSON
            flag = next((o for o in p.opts if o.startswith("--")), None)
            if flag is not None:
                p.envvar = envvar_of(flag)
                p.show_envvar = True
    inner = cmd.callback
    if inner is None:
        return

    def callback(*args: Any, log_level: Any, log_format: Any, **kwargs: Any) -> Any:
        configure_logging(getattr(log_level, "value", log_level), getattr(log_format, "value", log_format))
        return inner(*args, **kwargs)

    cmd.callback = callback


class CommonOptionsGroup(TyperGroup):
    """The ``llmscale`` group: every command gets the common options (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, cmd in self.commands.items():
            _add_common_options(name, cmd)

    def add_command(self, cmd: Any, name: str | None = None) -> None:
        super().add_command(cmd, name)
        _add_common_options(name or cmd.name or "", cmd)


def write_json(
    command: str,
    doc: dict[str, Any],
    dest: str,
    *,
    write_file: Callable[[Path, str, str], None] | None = None,
) -> str:
    """Write ``doc`` (with ``schema_version`` first) to ``dest`` (``-``: stdout); returns the text.

    ``command`` names the schema the document follows (``llmscale.schemas.schema_of``).
    ``write_file(path, text, option)`` writes a file (the CLI's, which turns OSError into a message
    naming --json); the default writes it plainly.
    """
    from llmscale.schemas import versioned

    text = json.dumps(versioned(command, doc), indent=2)
    if dest == "-":
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    elif write_file is not None:
        write_file(Path(dest), text + "\n", "--json")
    else:
        Path(dest).write_text(text + "\n", encoding="utf-8")
    return text
