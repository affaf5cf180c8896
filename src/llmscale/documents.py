"""One strict reader of the YAML and JSON documents a user hands llmscale.

``run``'s config, ``--policy-config``, a tenants file and a calibration profile are YAML; the
controller's state and the decision logs ``analyze`` reads are JSON. Each used to call
``yaml.safe_load`` or ``json.loads`` on its own, and each let through what a loader allows but no
person means:

* **duplicate keys**: ``max_replicas: 4`` twice in one mapping kept the last without a word;
* **deep nesting**: ``[[[[...]]]]`` thousands deep ended in a RecursionError traceback;
* **aliases**: ``&a`` / ``*a`` let a 1 kB file name 10^9 values (the "billion laughs"), which
  pydantic or ``json.dumps`` then expand.

:func:`load_yaml` and :func:`loads_json` refuse all three with a ConfigError whose message starts
with the document's name (and the line, for YAML). Aliases are refused outright: none of our files
needs them, and refusing is simpler to trust than a bounded expansion.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any, Final

from llmscale.errors import ConfigError

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "MAX_DEPTH",
    "load_yaml",
    "loads_json",
    "no_duplicate_keys",
    "read_yaml_file",
    "validation_message",
]

#: Deepest nesting of mappings and lists accepted. Our deepest document (a run config's
#: ``shadow.guards.max_up_step``) is 3 deep; 64 leaves room for any hand-written structure and
#: stays far below Python's recursion limit (1,000) in every consumer that walks it.
MAX_DEPTH: Final = 64


@cache
def _loader_class() -> type:
    """A SafeLoader that refuses aliases, duplicate keys and nesting past MAX_DEPTH (built lazily:
    the CLI imports this module without yaml)."""
    import yaml
    from yaml.constructor import ConstructorError
    from yaml.nodes import MappingNode, Node

    class StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # yaml ships no types here
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self._depth = 0

        def compose_node(self, parent: Node | None, index: Any) -> Node | None:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"alias *{event.anchor} is not accepted (write the value out)",
                    event.start_mark,
                )
            self._depth += 1
            try:
                if self._depth > MAX_DEPTH:
                    event = self.peek_event()
                    raise yaml.composer.ComposerError(
                        None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark
                    )
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: dict[Any, Any] = {}
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise ConstructorError(
                        None,
                        None,
                        "merge keys (<<) are not accepted (write the keys out)",
                        key_node.start_mark,
                    )
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    raise ConstructorError(
                        None, None, f"a {type(key).__name__} cannot be a mapping key", key_node.start_mark
                    ) from None
                if first is not None:
                    raise ConstructorError(
                        None,
                        None,
                        f"duplicate key {key!r} (first on line {first.line + 1})",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark
            return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]

    return StrictLoader


def load_yaml(text: str, source: str) -> Any:
    """Parse one YAML document strictly; ConfigError ``"{source}: line N: not valid YAML: why"``."""
    import yaml

    loader = None
    try:
        loader = _loader_class()(text)  # the reader refuses control characters here already
        return loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{source}:{where} not valid YAML: {problem}") from e
    except RecursionError as e:  # flow collections nest in the parser before compose counts them
        raise ConfigError(f"{source}: not valid YAML: nested too deeply") from e
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml_file(path: Any, what: str, *, name: str | None = None) -> Any:
    """Read ``path`` (a regular text file of at most MAX_DOCUMENT_BYTES) and :func:`load_yaml` it.

    The one YAML reader of the edge: ``run``'s config, ``--policy-config``, a tenants file and a
    calibration profile all come through here. ``what`` names the document in the errors, e.g.
    ``"the policy config"``; ``name`` is how an error names the file (default: the path as given).
    A file that is not text is named without ``what``: ``llmscale.yaml: line 1: byte 0 is not
    UTF-8: not a YAML text file`` (tests/live/test_live_config.py pins it).
    """
    from llmscale.edge import MAX_DOCUMENT_BYTES, InputFileError, read_input_text

    shown = str(path) if name is None else name
    try:
        text = read_input_text(path, MAX_DOCUMENT_BYTES, what="a YAML text file")
    except InputFileError as e:
        if "binary" in e.problem:
            raise ConfigError(f"{shown}: {e.problem}") from e
        raise ConfigError(f"{e.path}: cannot read {what}: {e.problem}") from e
    return load_yaml(text, shown)


def validation_message(error: ValidationError, source: str) -> str:
    """The first error of a pydantic validation as one line naming ``source`` and the field path.

    E.g. ``llmscale.yaml: policy.params.tick_s: Input should be greater than 0 (got -1)``, with
    ``(and 2 more error(s))`` when there are more; the value is shown unless the message already
    does. The edge's models (``config.py``, the tenants file) all report through this.
    """
    first = error.errors()[0]
    where = ".".join(str(x) for x in first["loc"]) or "(top level)"
    msg = first["msg"].removeprefix("Value error, ")
    got = first.get("input")
    if isinstance(got, int | float | str) and not isinstance(got, bool) and repr(got) not in msg:
        msg = f"{msg} (got {got!r})"
    more = f" (and {error.error_count() - 1} more error(s))" if error.error_count() > 1 else ""
    return f"{source}: {where}: {msg}{more}"


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s object_pairs_hook: ValueError on a repeated key (json keeps the last)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate key {dup!r}")
    return out


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, walked without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in v)
    return deepest


def loads_json(text: str, source: str) -> Any:
    """Parse JSON refusing duplicate keys and nesting past MAX_DEPTH; ConfigError naming ``source``.

    For small documents (state, results): the depth is walked after parsing. A decision log's
    lines are parsed with :func:`no_duplicate_keys` alone (llmscale.analyze.log), since only a
    few known fields of each are read.
    """
    import json

    try:
        value = json.loads(text, object_pairs_hook=no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{source}: not JSON: {e.msg} (line {e.lineno}, column {e.colno})") from e
    except ValueError as e:  # a duplicate key; an integer of more than 4,300 digits
        raise ConfigError(f"{source}: not accepted JSON: {e}") from e
    except RecursionError as e:
        raise ConfigError(f"{source}: not accepted JSON: nested too deeply") from e
    if _depth(value) > MAX_DEPTH:
        raise ConfigError(f"{source}: not accepted JSON: nested more than {MAX_DEPTH} levels deep")
    return value
