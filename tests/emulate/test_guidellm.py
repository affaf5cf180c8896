"""guidellm (the vLLM project's load generator) against ``llmscale emulate``, offline, for two vLLM releases.

guidellm counts prompt tokens with a Hugging Face tokenizer, which it would download; here it loads
the tokenizer llmscale ships (``emulate/tokenizer/``, a directory AutoTokenizer reads) with the hub
offline, and the emulator counts with the same one (``--tokenizer builtin``), so both sides agree
on every prompt's length. A few requests, synchronous, with a time bound.

guidellm is not in the test extra: it pulls PyTorch and CUDA libraries (about 6 GB installed), far
more than the rest of the suite. The test runs when a ``guidellm`` executable is on the PATH or
named by ``$LLMSCALE_GUIDELLM`` (``pip install guidellm==0.8.1`` in any virtual environment).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llmscale.emulate.tokens import BUILTIN_TOKENIZER_DIR, load_token_counter
from support.emulate_proc import start_emulate, stop_emulate

GUIDELLM = os.environ.get("LLMSCALE_GUIDELLM") or shutil.which("guidellm")
REQUESTS = 3
PROMPT_TOKENS = 32
OUTPUT_TOKENS = 16

pytestmark = pytest.mark.skipif(
    GUIDELLM is None, reason="guidellm is not installed (about 6 GB with PyTorch; see the module docstring)"
)


@pytest.mark.parametrize("version", ["0.10.0", "0.11.0"])
def test_guidellm_benchmarks_the_emulator_offline(version: str, tmp_path: Path) -> None:
    ep = start_emulate("--tokenizer", "builtin", "--time-scale", "4", "--vllm-version", version)
    out = tmp_path / "guidellm.json"
    try:
        run = subprocess.run(
            [
                str(GUIDELLM),
                "run",
                f"--backend=kind=openai_http,target={ep.base_url}",
                "--profile=kind=synchronous",
                f"--constraint=kind=max_requests,count={REQUESTS}",
                f"--data=kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}",
                f"--tokenizer=kind=huggingface_auto,model={BUILTIN_TOKENIZER_DIR}",
                f"--output=kind=json,path={out}",
                "--disable-console",
            ],
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        stop_emulate(ep.proc)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (bench,) = json.loads(out.read_text())["benchmarks"]
    metrics = bench["metrics"]
    assert metrics["request_totals"] == {
        "successful": REQUESTS,
        "errored": 0,
        "incomplete": 0,
        "total": REQUESTS,
    }
    assert metrics["output_token_count"]["successful"]["mean"] == OUTPUT_TOKENS
    # guidellm sends chat requests: the prompt it wrote, plus the chat template's tokens, as the
    # emulator counts them with the same tokenizer
    template = load_token_counter("builtin").count_chat([("user", "")])
    assert metrics["prompt_token_count"]["successful"]["mean"] == PROMPT_TOKENS + template
