"""The simulator's own containers: request lists and the two heaps that order its events.

They replace deques, dicts and tuple heaps so that the compiled simulator stays
native; their contract is that of what they replace. Each is checked against
a plain-Python model under random operations (Hypothesis).
"""

from __future__ import annotations

import numpy as np
from fake_perf import FakePerf
from hypothesis import given
from hypothesis import strategies as st

from llmscale.sim.config import SimConfig
from llmscale.sim.fleet import Fleet, StepQueue
from llmscale.sim.replica import FinishHeap
from llmscale.sim.request import PrefillQueue, Req, ReqList


def _reqs(n: int) -> list[Req]:
    return [Req(i, float(i), 10, 10) for i in range(n)]


@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["append", "appendleft", "popleft", "remove"]), st.integers(0, 11))
    )
)
def test_req_list_keeps_order_like_a_deque(ops):
    reqs = _reqs(12)
    lst = ReqList()
    model: list[Req] = []
    for op, k in ops:
        req = reqs[k]
        if op in ("append", "appendleft") and req not in model:
            getattr(lst, op)(req)
            if op == "append":
                model.append(req)
            else:
                model.insert(0, req)
        elif op == "popleft" and model:
            assert lst.popleft() is model.pop(0)
        elif op == "remove" and req in model:
            lst.remove(req)
            model.remove(req)
        assert lst.items() == model
        assert len(lst) == len(model)
        assert lst.first is (model[0] if model else None)
        assert lst.last is (model[-1] if model else None)


@given(ops=st.lists(st.tuples(st.sampled_from(["append", "remove", "rebuild"]), st.integers(0, 11))))
def test_prefill_queue_keeps_admission_order(ops):
    reqs = _reqs(12)
    q = PrefillQueue()
    model: list[Req] = []
    for op, k in ops:
        req = reqs[k]
        if op == "append" and req not in model:
            q.append(req)
            model.append(req)
        elif op == "remove" and req in model:
            q.remove(req)
            model.remove(req)
        elif op == "rebuild":
            # The replica's walk: detach, then put back all but the multiples of k + 1.
            r = q.detach()
            while r is not None:
                nxt = r.pf_next
                if r.idx % (k + 1):
                    q.append(r)
                r = nxt
            model = [r for r in model if r.idx % (k + 1)]
        walked = []
        r = q.first
        while r is not None:
            walked.append(r)
            r = r.pf_next
        assert walked == model
        assert len(q) == len(model)


@given(
    fin=st.lists(st.integers(0, 20), min_size=1, max_size=40),
    removals=st.lists(st.integers(0, 39), max_size=10),
)
def test_finish_heap_pops_by_finish_step_then_arrival(fin, removals):
    reqs = _reqs(len(fin))
    heap = FinishHeap()
    for req, f in zip(reqs, fin, strict=True):
        req.fin_at = f
        heap.push(req)
    alive = set(range(len(reqs)))
    for k in removals:
        if k in alive:
            heap.remove(reqs[k])
            alive.discard(k)
            assert reqs[k].heap_pos == -1
    order = []
    while len(heap):
        order.append(heap.pop().idx)
    assert order == sorted(alive, key=lambda i: (fin[i], i))


@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["schedule", "remove"]), st.integers(0, 9), st.sampled_from([0.5, 1.0, 2.0, 3.0])
        ),
        max_size=60,
    )
)
def test_step_queue_top_is_the_earliest_then_first_scheduled(ops):
    fleet = Fleet(
        FakePerf(),
        SimConfig(),
        np.zeros(0),
        np.zeros(0, dtype=np.int64),
        np.zeros(0, dtype=np.int64),
        initial_replicas=10,
        gpus_per_replica=1,
    )
    replicas = fleet.replicas
    q = StepQueue()
    model: dict[int, tuple[float, int]] = {}  # replica index -> (time, seq)
    seq = 0
    for op, k, t in ops:
        r = replicas[k]
        if op == "schedule":
            seq += 1
            q.schedule(r, t, seq)
            model[k] = (t, seq)
        else:
            q.remove(r)
            model.pop(k, None)
        assert len(q) == len(model)
        for i, item in enumerate(q.items):
            assert item.heap_pos == i
        if model:
            k_min = min(model, key=lambda i: model[i])
            assert q.items[0] is replicas[k_min]
            assert (q.times[0], q.seqs[0]) == model[k_min]
