"""A request as the simulated fleet tracks it, and the list that queues requests inside a replica.

Both classes are compiled with mypyc (setup.py) and written so that it can use
native types throughout: ``Final`` constants (folded into the C code instead
of a module-dict lookup per use), ``@final`` classes (direct attribute access
and calls), ``i64`` counters and no ``Optional`` numbers.
"""

from __future__ import annotations

from typing import Final, final

from mypy_extensions import i64

__all__ = ["DECODING", "DONE", "PREFILLING", "WAITING", "PrefillQueue", "Req", "ReqList"]

# Where a request is inside its replica (ints: compared on the hot path).
WAITING: Final = 0
PREFILLING: Final = 1
DECODING: Final = 2
DONE: Final = 3


@final
class Req:
    """One request. While decoding, its token count is kept lazily by its replica.

    A decoding request does not store its generated-token count step by step:
    the replica keeps a step counter and the request remembers the counter and
    counts at the moment it joined decode, so a jump of n steps costs O(1) per
    jump instead of O(batch) per step. ``fin_at`` is the counter value at which
    it produces its last token (``counter_join + output_tokens - gen_join``).

    ``prev``/``next`` link it into its replica's waiting queue or running list
    (it is in at most one, see :class:`ReqList`); while it has prompt tokens
    left, ``pf_next`` links it into the replica's :class:`PrefillQueue` as
    well. ``heap_pos`` is its slot in the replica's finish heap while it
    decodes, -1 otherwise.
    """

    __slots__ = (
        "arrival_s",
        "chunk",
        "counter_join",
        "dispatch_s",
        "fin_at",
        "first_token_s",
        "gen_join",
        "generated",
        "heap_pos",
        "idx",
        "input_tokens",
        "kv_join",
        "next",
        "output_tokens",
        "pf_next",
        "prefill_target",
        "prefilled",
        "prev",
        "replica",
        "scheduled_s",
        "state",
    )

    def __init__(self, idx: i64, arrival_s: float, input_tokens: i64, output_tokens: i64) -> None:
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
        self.prefilled: i64 = 0
        self.chunk: i64 = 0  # prompt tokens of its chunk in the iteration in flight; 0: none
        self.generated: i64 = 0
        self.kv_join: i64 = 0
        self.gen_join: i64 = 0
        self.counter_join: i64 = 0
        self.fin_at: i64 = 0
        self.heap_pos: i64 = -1
        self.replica: object = None
        self.state: i64 = WAITING
        self.prev: Req | None = None
        self.next: Req | None = None
        self.pf_next: Req | None = None


@final
class ReqList:
    """Requests in order, linked through their own ``prev``/``next`` (a request is in one list at most).

    A replica's waiting queue (first come, first served; a preempted request
    goes back to the front) and its running requests in admission order (the
    last is preempted first). Every operation is a few pointer writes once
    compiled: a ``dict`` used as an ordered set hashes on every insert and
    delete, and ``collections.deque`` is opaque to mypyc (each call is a
    generic method call).
    """

    __slots__ = ("first", "last", "size")

    def __init__(self) -> None:
        self.first: Req | None = None
        self.last: Req | None = None
        self.size: i64 = 0

    def __len__(self) -> int:
        return self.size

    def append(self, req: Req) -> None:
        last = self.last
        req.prev = last
        req.next = None
        if last is None:
            self.first = req
        else:
            last.next = req
        self.last = req
        self.size += 1

    def appendleft(self, req: Req) -> None:
        first = self.first
        req.prev = None
        req.next = first
        if first is None:
            self.last = req
        else:
            first.prev = req
        self.first = req
        self.size += 1

    def remove(self, req: Req) -> None:
        """Unlink ``req``; pre: it is in this list."""
        prev = req.prev
        nxt = req.next
        if prev is None:
            self.first = nxt
        else:
            prev.next = nxt
        if nxt is None:
            self.last = prev
        else:
            nxt.prev = prev
        req.prev = None
        req.next = None
        self.size -= 1

    def popleft(self) -> Req:
        """Unlink and return the first request; pre: the list is not empty."""
        req = self.first
        assert req is not None
        self.remove(req)
        return req

    def items(self) -> list[Req]:
        """The requests in order (a copy: the list may change while the caller walks it)."""
        out = []
        req = self.first
        while req is not None:
            out.append(req)
            req = req.next
        return out

    def clear(self) -> None:
        req = self.first
        while req is not None:
            nxt = req.next
            req.prev = None
            req.next = None
            req = nxt
        self.first = None
        self.last = None
        self.size = 0


@final
class PrefillQueue:
    """Running requests with prompt tokens left, in admission order, linked through ``pf_next``.

    A replica walks it front to back twice per prefill iteration: to hand out
    chunks, then to apply them. A ``list`` cost an allocation per iteration
    (emptied, CPython frees its buffer) and a ``list.remove`` per finished
    prompt; here a walk rebuilds the queue in place (:meth:`detach`, then
    :meth:`append` the requests to keep) and nothing is allocated.
    """

    __slots__ = ("first", "last", "size")

    def __init__(self) -> None:
        self.first: Req | None = None
        self.last: Req | None = None
        self.size: i64 = 0

    def __len__(self) -> int:
        return self.size

    def append(self, req: Req) -> None:
        req.pf_next = None
        last = self.last
        if last is None:
            self.first = req
        else:
            last.pf_next = req
        self.last = req
        self.size += 1

    def detach(self) -> Req | None:
        """Empty the queue and return its first request; the rest follow through ``pf_next``.

        The caller reads each ``pf_next`` before it appends that request back.
        """
        first = self.first
        self.first = None
        self.last = None
        self.size = 0
        return first

    def remove(self, req: Req) -> None:
        """Unlink ``req`` (a walk: for the rare preemption); pre: it is in the queue."""
        first = self.detach()
        while first is not None:
            nxt = first.pf_next
            if first is not req:
                self.append(first)
            first = nxt
        req.pf_next = None

    def clear(self) -> None:
        req = self.detach()
        while req is not None:
            nxt = req.pf_next
            req.pf_next = None
            req = nxt
