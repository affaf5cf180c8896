"""guidellm (the vLLM project's load generator) against ``llmscale emulate``, offline, for two vLLM releases.

guidellm counts prompt tokens with a Hugging Face tokenizer, which it would download; here it loads
the tokenizer llmscale ships (``emulate/tokenizer/``, a directory AutoTokenizer reads) with the hub
offline, and the emulator counts with the same one (``--tokenizer builtin``), so both sides agree
on every prompt's length. A few requests, synchronous, with a time bound.

``scripts/bootstrap.sh --test`` (so ``./run-tests``) installs guidellm 0.3.1 without PyTorch
(``scripts/guidellm-no-torch.txt`` says why that version); ``$LLMSCALE_GUIDELLM`` names another
``guidellm`` executable of the same CLI. Without one the test fails: it is part of the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmscale.emulate.tokens import BUILTIN_TOKENIZER_DIR, load_token_counter
from support.emulate_proc import start_emulate, stop_emulate

REQUESTS = 3
PROMPT_TOKENS = 32
OUTPUT_TOKENS = 16
#: wall bound on one guidellm run: its imports take ~25 s on a busy 2-core machine, the three
#: requests under a second at --time-scale 4
RUN_TIMEOUT_S = 240


def _guidellm() -> str:
    named = os.environ.get("LLMSCALE_GUIDELLM")
    if named:
        return named
    beside = Path(sys.executable).with_name("guidellm")  # .venv/bin, where bootstrap puts it
    if beside.is_file():
        return str(beside)
    found = shutil.which("guidellm")
    if found is None:
        pytest.fail(
            "no guidellm: scripts/bootstrap.sh --test installs it "
            "(pip install --no-deps -r scripts/guidellm-no-torch.txt), or name one in $LLMSCALE_GUIDELLM"
        )
    return found


@pytest.mark.parametrize("version", ["0.10.0", "0.11.0"])
def test_guidellm_benchmarks_the_emulator_offline(version: str, tmp_path: Path) -> None:
    guidellm = _guidellm()
    ep = start_emulate("--tokenizer", "builtin", "--time-scale", "4", "--vllm-version", version)
    out = tmp_path / "guidellm.json"
    try:
        run = subprocess.run(
            [
                guidellm,
                "benchmark",
                "run",
                f"--target={ep.base_url}",
                "--rate-type=synchronous",
                f"--max-requests={REQUESTS}",
                "--max-seconds=120",
                f"--data=prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}",
                f"--processor={BUILTIN_TOKENIZER_DIR}",
                f"--output-path={out}",
                "--disable-progress",
                "--random-seed=7",
            ],
            env={
                **os.environ,
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1",
            },
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    finally:
        stop_emulate(ep.proc)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (bench,) = json.loads(out.read_text())["benchmarks"]
    totals = {"successful": REQUESTS, "errored": 0, "incomplete": 0, "total": REQUESTS}
    assert bench["request_totals"] == totals
    done = bench["requests"]["successful"]
    assert len(done) == REQUESTS
    counter = load_token_counter("builtin")
    for req in done:
        # guidellm asked for OUTPUT_TOKENS (max_tokens with ignore_eos) and got them, streamed
        assert req["output_tokens"] == OUTPUT_TOKENS
        assert req["time_to_first_token_ms"] > 0
        # guidellm reports the usage the emulator returned: its count of the very text guidellm sent
        # (guidellm sized the prompt to PROMPT_TOKENS with the same tokenizer, +1 for the BOS token)
        assert req["prompt_tokens"] == counter.count(req["prompt"])
        assert abs(req["prompt_tokens"] - PROMPT_TOKENS) <= 2
