"""Build the small tokenizer llmscale ships (src/llmscale/emulate/tokenizer/), from the repository's text.

Why: load tools (guidellm, vLLM's bench) and ``llmscale emulate --tokenizer`` need a tokenizer to
count prompt tokens, and the real models' tokenizers are downloads (gated, for Llama-3). This one is
trained here, offline, with the ``tokenizers`` library on the repository's own documentation and
Python sources, so nothing is fetched and the result is reproducible from a checkout:

    python scripts/build_tokenizer.py        # rewrites src/llmscale/emulate/tokenizer/*.json

It is a byte-level BPE (any text encodes, no unknown token) of 4,096 ids with Llama-3's special
tokens, so the chat template's header tokens (<|start_header_id|> ... <|eot_id|>) are one token each
and a completion prompt starts with <|begin_of_text|>, as vLLM serving Llama-3 counts them. It is
not Llama-3's vocabulary (4,096 ids against 128,256): this repository's docs come out at about 3.4
characters a token, where Llama-3 gives about 4, and the header's role and blank line take two
tokens each here (one each in Llama-3).
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "llmscale" / "emulate" / "tokenizer"
VOCAB_SIZE = 4096
BOS, EOS, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"
SPECIAL = [BOS, EOS, "<|start_header_id|>", "<|end_header_id|>", EOT]
#: Llama-3 Instruct's chat template (its documented prompt format): per message a header
#: (<|start_header_id|>role<|end_header_id|>, a blank line), the content, <|eot_id|>; BOS once in
#: front; the assistant header as the generation prompt. emulate/tokens.py counts the same tokens.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


def corpus() -> list[Path]:
    """The training text: the docs and the package's sources, in a fixed order."""
    files = sorted((ROOT / "docs").rglob("*.md")) + sorted((ROOT / "src" / "llmscale").rglob("*.py"))
    return [f for f in files if f.is_file()]


def build() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [f.read_text(encoding="utf-8", errors="replace") for f in corpus()]
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    bos = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, bos)])
    return tok


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    build().save(str(OUT / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOT,
        "model_max_length": 8192,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (OUT / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {OUT}/tokenizer.json and tokenizer_config.json ({VOCAB_SIZE} ids)")


if __name__ == "__main__":
    main()
