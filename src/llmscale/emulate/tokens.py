"""Counting a prompt's tokens: with the model's own tokenizer when one is on disk, else an estimate.

The count decides the simulated request's prefill work and KV blocks, so it is
worth getting right; but the emulator never downloads anything. Given a local
``tokenizer.json`` (``--tokenizer PATH``, a file or a model directory holding
one) and the ``tokenizers`` package, prompts are encoded as vLLM encodes a
completion prompt (special tokens added: Llama-3 prepends ``<|begin_of_text|>``).
``--tokenizer builtin`` is the small tokenizer llmscale ships
(:data:`BUILTIN_TOKENIZER_DIR`, built by scripts/build_tokenizer.py), which load
tools can be pointed at too, so both sides count with one vocabulary, offline.

Chat messages are counted as vLLM counts them: rendered through a chat template,
here Llama-3 Instruct's (its documented prompt format), then tokenized without
adding special tokens again. The template puts ``<|begin_of_text|>`` once in
front, wraps each message as ``<|start_header_id|>ROLE<|end_header_id|>\n\n``
+ content (trimmed) + ``<|eot_id|>``, and ends with the assistant's header as
the generation prompt. In Llama-3's vocabulary a header is 4 tokens (the role
and the blank line are one token each) and ``<|eot_id|>`` one, so chat "hi" is
1 + (4 + 1 + 1) + 4 = 11 prompt tokens, what vLLM serving Llama-3-8B-Instruct
reports; the estimate counts exactly these template tokens plus the content's
estimate. With a tokenizer the rendered text is encoded, so the count is that
tokenizer's (16 with the builtin one, whose vocabulary splits the roles and the blank line).

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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llmscale.errors import ConfigError

__all__ = [
    "BUILTIN_TOKENIZER",
    "BUILTIN_TOKENIZER_DIR",
    "CHARS_PER_TOKEN",
    "TokenCounter",
    "estimate_tokens",
    "load_token_counter",
    "render_chat",
]

#: Characters per token of the estimate used when no tokenizer is given (see the module docstring).
CHARS_PER_TOKEN = 4
#: ``--tokenizer builtin``: the tokenizer shipped in the package (tokenizer.json + tokenizer_config.json,
#: a directory Hugging Face's AutoTokenizer and guidellm's ``--processor`` load as well).
BUILTIN_TOKENIZER = "builtin"
BUILTIN_TOKENIZER_DIR = Path(__file__).parent / "tokenizer"
_BOS = "<|begin_of_text|>"
#: Llama-3's template tokens around one message: <|start_header_id|>, the role, <|end_header_id|>,
#: the blank line, and <|eot_id|> after the content.
_MESSAGE_TOKENS = 5
#: the generation prompt: the assistant's header (4 tokens)
_GENERATION_PROMPT_TOKENS = 4


def estimate_tokens(text: str) -> int:
    """About one token per 4 characters, at least one: ``"tok tok tok"`` (11 chars) is 3."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def render_chat(messages: Sequence[tuple[str, str]], add_generation_prompt: bool = True) -> str:
    """Llama-3 Instruct's chat template over ``(role, content)`` pairs (see the module docstring)."""
    parts = [_BOS]
    for role, content in messages:
        parts.append(f"<|start_header_id|>{role}<|end_header_id|>\n\n{content.strip()}<|eot_id|>")
    if add_generation_prompt:
        parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(parts)


class TokenCounter:
    """``count(text)`` -> tokens; ``source`` says how (``"estimate"`` or the tokenizer file).

    With a tokenizer, :meth:`encode` and :meth:`decode` give its ids (``/tokenize``); without one
    they return None (the estimate has no ids to give).
    """

    def __init__(self, count: Callable[[str], int], source: str, tokenizer: Any = None) -> None:
        self.count = count
        self.source = source
        self._tok = tokenizer

    def count_chat(self, messages: Sequence[tuple[str, str]], add_generation_prompt: bool = True) -> int:
        """Prompt tokens of a chat request: the template rendered, then counted (module docstring).

        Worked: ``[("user", "hi")]`` is 1 + 5 + 1 + 4 = 11 with the estimate.
        """
        if self._tok is not None:
            rendered = render_chat(messages, add_generation_prompt)
            return len(self._tok.encode(rendered, add_special_tokens=False).ids)
        content = sum(math.ceil(len(text.strip()) / CHARS_PER_TOKEN) for _, text in messages)
        gen = _GENERATION_PROMPT_TOKENS if add_generation_prompt else 0
        return 1 + _MESSAGE_TOKENS * len(messages) + content + gen

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int] | None:
        if self._tok is None:
            return None
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def token_strs(self, ids: Sequence[int]) -> list[str] | None:
        if self._tok is None:
            return None
        return [self._tok.id_to_token(i) or "" for i in ids]

    def decode(self, ids: Sequence[int]) -> str | None:
        if self._tok is None:
            return None
        return str(self._tok.decode(list(ids), skip_special_tokens=False))

    @property
    def vocab_size(self) -> int | None:
        return None if self._tok is None else int(self._tok.get_vocab_size())


def load_token_counter(path: str | None) -> TokenCounter:
    """The estimate for None; else the tokenizer at ``path`` (a tokenizer.json, or a directory with one;
    ``"builtin"``: the one shipped in the package).

    Raises ConfigError naming the path when it is missing or unreadable, or when
    the ``tokenizers`` package is not installed: a tokenizer that was asked for
    is never replaced by the estimate silently.
    """
    if path is None:
        return TokenCounter(estimate_tokens, "estimate")
    if path == BUILTIN_TOKENIZER:
        path = str(BUILTIN_TOKENIZER_DIR)
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

    return TokenCounter(count, str(file), tok)
