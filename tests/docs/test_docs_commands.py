"""Every `llmscale` command shown in README.md and docs/*.md is a real command that runs.

A command is a line of a ```bash / ```sh / ```shell / ```console block that starts with `llmscale`
or `./llmscale` (after an optional `$ ` prompt; `\\` continuations joined, `# comments` and a trailing
`&` dropped). Each one is parsed by the real command line (an unknown command or option fails here)
and then run, page by page in doc order in one scratch directory (so `analyze decisions.jsonl`
reads what the `backtest --decisions` above it wrote), with `examples/` and `../shared/data` beside it.

An HTML comment on the line before a block changes what happens to its commands:

    <!-- docs-test: small [ARGS] -->         run at the reduced size SMALL gives each command (two
                                            simulated minutes at a tenth of the rate, bounds given
                                            so no capacity probe runs, no oracle), then ARGS; a
                                            later option overrides an earlier one
    <!-- docs-test: args ARGS -->            ARGS appended to each command
    <!-- docs-test: parse-only REASON -->    parsed, not run (needs a cluster, a server that runs
                                            until stopped, or the reader's own files); REASON is required
    <!-- docs-test: needs-shared-data -->    run only where ../shared/data is present

`./llmscale` runs as `llmscale` (the wrapper only installs first); `./run-tests` is not run here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SHARED_DATA = Path(os.environ.get("LLMSCALE_SHARED_DATA") or REPO.parent / "shared" / "data")
SHELL_LANGS = {"bash", "sh", "shell", "console"}
DIRECTIVE = re.compile(r"^<!--\s*docs-test:\s*(small|args|parse-only|needs-shared-data)\b\s*(.*?)\s*-->$")
_BOUNDS = ("--max-replicas", "8", "--initial-replicas", "2")
_BACKTEST = ("--duration-s", "120", "--rate-scale", "0.1", "--no-oracle", "--jobs", "1", "--replicas", "2")
#: `small`: what each command takes to run in a few CPU-seconds; the doc shows the full-size command
SMALL: dict[str, tuple[str, ...]] = {
    "backtest": (*_BACKTEST, *_BOUNDS),
    "tune": ("--duration-s", "60", "--rate-scale", "0.1", "--jobs", "1", *_BOUNDS),
}
#: each command's own bound; the whole file stays well under two minutes on an idle 2-core machine
COMMAND_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Command:
    page: Path
    line: int
    argv: tuple[str, ...]  # without the leading `llmscale`
    mode: str  # "run", "parse-only" or "needs-shared-data"
    reason: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def _commands(page: Path) -> list[Command]:
    """The llmscale commands of one page, in order, with their block's directive applied."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Command] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\w*)", lines[i])
        if not fence:
            i += 1
            continue
        lang = fence.group(2)
        prev = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        directive = DIRECTIVE.match(prev)
        kind, arg = (directive.group(1), directive.group(2)) if directive else ("run", "")
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```"))
        if lang in SHELL_LANGS:
            body = lines[i + 1 : end]
            k = 0
            while k < len(body):
                start = k
                text = body[k]
                while text.rstrip().endswith("\\") and k + 1 < len(body):
                    k += 1
                    text = text.rstrip()[:-1] + " " + body[k].strip()
                k += 1
                text = text.strip().removeprefix("$ ")
                words = shlex.split(text, comments=True)
                if words and words[-1] == "&":
                    words = words[:-1]
                if not words or words[0] not in ("llmscale", "./llmscale"):
                    continue
                argv = tuple(words[1:])
                if kind == "small":
                    assert argv and argv[0] in SMALL, f"{page}:{i + 2 + start}: no small size for {argv[:1]}"
                    argv += SMALL[argv[0]]
                if kind in ("small", "args"):
                    argv += tuple(shlex.split(arg))
                mode = "run" if kind in ("small", "args") else kind
                found.append(Command(page, i + 2 + start, argv, mode, arg))
        i = end + 1
    return found


ALL = [c for p in PAGES for c in _commands(p)]


def test_the_docs_show_commands_and_few_are_not_run() -> None:
    # A broken extractor would pass every test below by finding nothing.
    assert len(ALL) >= 25, [c.where for c in ALL]
    not_run = [c for c in ALL if c.mode == "parse-only"]
    for c in not_run:
        assert len(c.reason.split()) >= 3, f"{c.where}: a parse-only block must say why it is not run"
    # The skip list stays small: servers and clusters only (see each block's reason).
    assert len(not_run) <= 16, [c.where for c in not_run]
    assert len(not_run) < len(ALL) / 2


def _parse(argv: tuple[str, ...]) -> None:
    """Parse argv with the real command line, without running it: unknown commands and options fail."""
    from typer.main import get_command

    from llmscale.cli import app

    # Typer carries its own copy of click: the group and its exceptions are used by duck typing.
    cli = get_command(app)
    ctx = cli.context_class(cli, info_name="llmscale")  # the group itself takes no options here
    assert argv, "a bare `llmscale` shows nothing worth documenting"
    sub = cli.get_command(ctx, argv[0])
    assert sub is not None, f"unknown command {argv[0]!r}"
    sub.make_context(argv[0], list(argv[1:]), parent=ctx)


@pytest.mark.parametrize("command", [pytest.param(c, id=c.where) for c in ALL])
def test_command_parses(command: Command) -> None:
    try:
        _parse(command.argv)
    except Exception as e:  # click's UsageError / BadParameter / NoSuchOption, from typer's copy
        message = e.format_message() if hasattr(e, "format_message") else repr(e)
        pytest.fail(f"{command.where}: llmscale {shlex.join(command.argv)}: {message}")


def _scratch(tmp_path: Path) -> Path:
    """A working directory with examples/ and, where present, ../shared/data as the docs assume."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(REPO / "examples")
    if SHARED_DATA.is_dir():
        (tmp_path / "shared").mkdir()
        (tmp_path / "shared" / "data").symlink_to(SHARED_DATA)
    return work


def _run(command: Command, cwd: Path) -> None:
    env = {**os.environ, "COLUMNS": "120"}
    src = str(REPO / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    done = subprocess.run(
        [sys.executable, "-c", "from llmscale.cli import main; main()", *command.argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, (
        f"{command.where}: llmscale {shlex.join(command.argv)} exited {done.returncode}\n"
        f"{done.stderr[-3000:]}"
    )


RUN_PAGES = sorted({c.page for c in ALL if c.mode != "parse-only"})


@pytest.mark.parametrize("page", [pytest.param(p, id=str(p.relative_to(REPO))) for p in RUN_PAGES])
def test_page_commands_run(page: Path, tmp_path: Path) -> None:
    work = _scratch(tmp_path)
    ran = 0
    for command in _commands(page):
        if command.mode == "parse-only":
            continue
        needs_data = command.mode == "needs-shared-data" or any("shared/data" in a for a in command.argv)
        if needs_data and not SHARED_DATA.is_dir():
            continue  # the shared_data tests say so once; this page's other commands still run
        _run(command, work)
        ran += 1
    if ran == 0:
        pytest.skip(f"../shared/data not found at {SHARED_DATA}: every command of this page reads it")


def test_an_unknown_command_or_option_fails_the_parse(tmp_path: Path) -> None:
    # The check above is only as good as this: a page with a misspelt option or command must fail.
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\n"
        "llmscale backtest --policy slo \\\n    --no-such-option 3   # a comment\n"
        "./llmscale no-such-command &\n"
        "echo not llmscale\n"
        "```\n",
        encoding="utf-8",
    )
    found = _commands(page)
    assert [c.argv for c in found] == [
        ("backtest", "--policy", "slo", "--no-such-option", "3"),
        ("no-such-command",),
    ]
    for command in found:
        with pytest.raises(Exception, match="no-such") as failure:
            _parse(command.argv)
        assert hasattr(failure.value, "format_message") or isinstance(failure.value, AssertionError)
