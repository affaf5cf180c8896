"""One exception hierarchy for llmscale.

Every error the CLI can report to a user derives from :class:`LlmscaleError`,
so the command line catches exactly one type, prints its message and exits
with :attr:`LlmscaleError.exit_code` instead of a traceback.
"""

from __future__ import annotations

__all__ = [
    "ActuationError",
    "ConfigError",
    "LlmscaleError",
    "NoDataError",
    "TraceFormatError",
]


class LlmscaleError(Exception):
    """Base of every error llmscale raises on purpose."""

    exit_code = 1


class ConfigError(LlmscaleError):
    """A configuration value or command-line option is invalid.

    The message names the field and the offending value, e.g.
    ``"max_replicas = 3, must be >= min_replicas (5)"``.
    """

    exit_code = 2


class TraceFormatError(LlmscaleError):
    """A request trace cannot be read.

    Carries the file, the 1-based line and the field so the message points the
    user at the exact place to fix.
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        where = []
        if path is not None:
            where.append(str(path))
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f"field {field!r}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class NoDataError(LlmscaleError):
    """A signal or metric has no (fresh) observation; the controller holds."""


class ActuationError(LlmscaleError):
    """Scaling the target failed after retries."""
