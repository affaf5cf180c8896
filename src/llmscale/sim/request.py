"""A request as the simulated fleet tracks it."""

from __future__ import annotations

from typing import ClassVar

__all__ = ["DECODING", "DONE", "PREFILLING", "WAITING", "Req", "Status"]

# Where a request is inside its replica (ints: compared on the hot path).
WAITING = 0
PREFILLING = 1
DECODING = 2
DONE = 3


class Status:
    """Final outcome codes (ints for speed in the hot path)."""

    IN_FLIGHT: ClassVar[int] = 0
    COMPLETED: ClassVar[int] = 1
    REJECTED: ClassVar[int] = 2
    TIMED_OUT: ClassVar[int] = 3
    KILLED: ClassVar[int] = 4  # in flight on a draining replica when its grace period ran out

    NAMES: ClassVar[tuple[str, ...]] = (
        "in_flight",
        "completed",
        "rejected",
        "timed_out",
        "killed_by_scale_down",
    )


class Req:
    """One request. While decoding, its token count is kept lazily by its replica.

    A decoding request does not store its generated-token count step by step:
    the replica keeps a step counter and the request remembers the counter and
    counts at the moment it joined decode, so a jump of n steps costs O(1) per
    jump instead of O(batch) per step.
    """

    __slots__ = (
        "arrival_s",
        "counter_join",
        "dispatch_s",
        "first_token_s",
        "gen_join",
        "generated",
        "idx",
        "input_tokens",
        "kv_join",
        "output_tokens",
        "prefill_target",
        "prefilled",
        "replica",
        "scheduled_s",
        "state",
    )

    def __init__(self, idx: int, arrival_s: float, input_tokens: int, output_tokens: int) -> None:
        self.idx = idx
        self.arrival_s = arrival_s
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.dispatch_s = arrival_s
        self.scheduled_s = -1.0
        self.first_token_s = -1.0
        # Tokens to (re)compute before the next token: the prompt, or after a
        # recompute preemption the prompt plus everything generated so far.
        self.prefill_target = input_tokens
        self.prefilled = 0
        self.generated = 0
        self.kv_join = 0
        self.gen_join = 0
        self.counter_join = 0
        self.replica: object = None
        self.state = WAITING
