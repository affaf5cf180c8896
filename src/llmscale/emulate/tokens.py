"""Counting a prompt's tokens: with the model's own tokenizer when one is on disk, else an estimate.

The count decides the simulated request's prefill work and KV blocks, so it is
worth getting right; but the emulator never downloads anything. Given a local
``tokenizer.json`` (``--tokenizer PATH``, a file or a model directory holding
one) and the ``tokenizers`` package, prompts are encoded as vLLM encodes a
completion prompt (special tokens added: Llama-3 prepends ``<|begin_of_text|>``).
Chat messages are counted on their text alone: vLLM also renders the model's
chat template around them, a few tokens more per message.

Without a tokenizer the count is an estimate: **one token per 4 characters**,
rounded up, at least one. Four characters a token is the usual figure for
English text under the BPE vocabularies of current LLMs (OpenAI's published
rule of thumb: "one token is roughly 4 characters" of English), and it is
exactly the count ``llmscale loadgen`` means: it writes prompts of 4-character
words (``"tok "``), so ``"tok tok tok"`` (11 characters) reads as 3 tokens.
Token-id prompts are always counted exactly (one token per id).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from llmscale.errors import ConfigError

__all__ = ["CHARS_PER_TOKEN", "TokenCounter", "estimate_tokens", "load_token_counter"]

#: Characters per token of the estimate used when no tokenizer is given (see the module docstring).
CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """About one token per 4 characters, at least one: ``"tok tok tok"`` (11 chars) is 3."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


class TokenCounter:
    """``count(text)`` -> tokens; ``source`` says how (``"estimate"`` or the tokenizer file)."""

    def __init__(self, count: Callable[[str], int], source: str) -> None:
        self.count = count
        self.source = source


def load_token_counter(path: str | None) -> TokenCounter:
    """The estimate for None; else the tokenizer at ``path`` (a tokenizer.json, or a directory with one).

    Raises ConfigError naming the path when it is missing or unreadable, or when
    the ``tokenizers`` package is not installed: a tokenizer that was asked for
    is never replaced by the estimate silently.
    """
    if path is None:
        return TokenCounter(estimate_tokens, "estimate")
    from llmscale.edge import MAX_DOCUMENT_BYTES, input_problem

    file = Path(path)
    problem = input_problem(file, MAX_DOCUMENT_BYTES, directory_ok=True)  # a name too long, a FIFO
    if problem is None and file.is_dir():
        file = file / "tokenizer.json"
        problem = input_problem(file, MAX_DOCUMENT_BYTES)
    if problem is not None:
        raise ConfigError(f"--tokenizer {path}: no tokenizer.json there ({problem})")
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise ConfigError(
            f"--tokenizer {path}: the `tokenizers` package is not installed (pip install tokenizers)"
        ) from e
    try:
        tok = Tokenizer.from_file(str(file))  # reads the file only: nothing is downloaded
    except Exception as e:  # the library raises a bare Exception on a malformed file
        raise ConfigError(f"--tokenizer {file}: cannot load it: {e}") from e

    def count(text: str) -> int:
        return max(1, len(tok.encode(text, add_special_tokens=True).ids))

    return TokenCounter(count, str(file))
