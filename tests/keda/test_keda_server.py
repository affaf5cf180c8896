"""The KEDA external scaler over real gRPC: a server on 127.0.0.1, a client built from the same
externalscaler.proto (the generated stub), the controller's decision published with scale_to."""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from llmscale.cluster.base import Cluster
from llmscale.cluster.keda import DEFAULT_METRIC_NAME, KedaScaler, KedaServer, serve
from llmscale.cluster.keda import externalscaler_pb2 as pb
from llmscale.cluster.keda import externalscaler_pb2_grpc as pb_grpc
from llmscale.cluster.keda.server import peer_host
from llmscale.errors import ActuationError, ConfigError
from llmscale.types import Phase, ReplicaView
from support.wait import wait_for

RPC_TIMEOUT_S = 5.0  # deadline of every unary call
STREAM_DEADLINE_S = 20.0  # upper bound on any stream a test opens
WAIT_S = 3.0  # how long a test waits for a message it expects


def ref(name: str = "llm", namespace: str = "serving", **metadata: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=metadata)


@dataclass
class Served:
    scaler: KedaScaler
    server: KedaServer
    port: int
    channel: grpc.Channel
    stub: pb_grpc.ExternalScalerStub


MakeServed = Callable[..., Served]


@pytest.fixture
def make_served() -> Iterator[MakeServed]:
    """Start a scaler server on a free loopback port with a client; everything stops after the test."""
    started: list[Served] = []

    def make(scaler: KedaScaler | list[KedaScaler] | None = None, **kwargs: Any) -> Served:
        scaler = scaler or KedaScaler("llm", "serving")
        server, port = serve(scaler, **kwargs)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        first = scaler if isinstance(scaler, KedaScaler) else scaler[0]
        s = Served(first, server, port, channel, pb_grpc.ExternalScalerStub(channel))
        started.append(s)
        return s

    yield make
    for s in started:
        s.channel.close()
        s.server.stop(grace_s=0.5)


@pytest.fixture
def served(make_served: MakeServed) -> Served:
    return make_served()


@dataclass
class StreamReader:
    """Reads a StreamIsActive call on a thread: messages into a queue, the final status kept."""

    call: Any  # grpc's streaming call: an iterator with cancel()
    messages: queue.Queue[bool] = field(default_factory=queue.Queue)
    final_code: grpc.StatusCode | None = None
    ended: threading.Event = field(default_factory=threading.Event)

    @staticmethod
    def open(stub: pb_grpc.ExternalScalerStub, r: pb.ScaledObjectRef) -> StreamReader:
        reader = StreamReader(stub.StreamIsActive(r, timeout=STREAM_DEADLINE_S))
        threading.Thread(target=reader._run, daemon=True).start()
        return reader

    def _run(self) -> None:
        try:
            for msg in self.call:
                self.messages.put(msg.result)
            self.final_code = grpc.StatusCode.OK
        except grpc.RpcError as e:
            self.final_code = e.code()
        finally:
            self.ended.set()

    def next(self, timeout_s: float = WAIT_S) -> bool:
        return self.messages.get(timeout=timeout_s)

    def assert_silent(self, for_s: float) -> None:
        with pytest.raises(queue.Empty):
            self.messages.get(timeout=for_s)

    def cancel(self) -> None:
        self.call.cancel()


def code_of(fn: Callable[..., object], *args: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        fn(*args, timeout=RPC_TIMEOUT_S)
    return info.value.code(), info.value.details()


# --- the Cluster side -------------------------------------------------------------------


def test_keda_scaler_is_a_cluster() -> None:
    views = (ReplicaView("llm-0", Phase.READY, since_s=1.0, created_s=0.0),)
    cluster: Cluster = KedaScaler("llm", initial_replicas=2, replicas_view=lambda: views)
    assert cluster.spec_replicas == 2  # before any decision: the initial value, never served
    cluster.scale_to(5, now_s=10.0)
    assert cluster.spec_replicas == 5
    assert cluster.replicas_view() == views


def test_keda_scaler_without_a_view_lists_no_replicas() -> None:
    scaler = KedaScaler("llm")
    assert scaler.replicas_view() == ()
    assert scaler.desired_replicas is None and scaler.decided_at_s is None
    scaler.scale_to(0, now_s=3.5, drain_until_idle=True)
    assert (scaler.desired_replicas, scaler.decided_at_s) == (0, 3.5)


def test_negative_replicas_is_an_actuation_error() -> None:
    with pytest.raises(ActuationError, match="replicas = -1"):
        KedaScaler("llm").scale_to(-1, now_s=0.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param(
            {"max_streams": 16, "max_workers": 16}, "max_streams = 16, must be < max_workers", id="streams"
        ),
        pytest.param({"keepalive_s": 0.0}, "keepalive_s = 0.0", id="keepalive"),
    ],
)
def test_serve_validates_its_options(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        serve(KedaScaler("llm"), **kwargs)


def test_a_scaled_object_listed_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="serving/llm is listed twice"):
        serve([KedaScaler("llm", "serving"), KedaScaler("llm", "serving")])


# --- unary calls ------------------------------------------------------------------------


def test_client_gets_the_current_decision(served: Served) -> None:
    served.scaler.scale_to(3, now_s=100.0)
    stub = served.stub
    assert stub.IsActive(ref(), timeout=RPC_TIMEOUT_S).result is True
    spec = stub.GetMetricSpec(ref(), timeout=RPC_TIMEOUT_S)
    assert [(s.metricName, s.targetSize, s.targetSizeFloat) for s in spec.metricSpecs] == [
        (DEFAULT_METRIC_NAME, 1, 1.0)
    ]
    values = stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref(), metricName=DEFAULT_METRIC_NAME), timeout=RPC_TIMEOUT_S
    )
    assert [(v.metricName, v.metricValue, v.metricValueFloat) for v in values.metricValues] == [
        (DEFAULT_METRIC_NAME, 3, 3.0)
    ]

    served.scaler.scale_to(7, now_s=130.0)
    values = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref()), timeout=RPC_TIMEOUT_S)
    assert values.metricValues[0].metricValue == 7


def test_a_zero_decision_is_inactive_with_value_zero(served: Served) -> None:
    served.scaler.scale_to(0, now_s=0.0)
    assert served.stub.IsActive(ref(), timeout=RPC_TIMEOUT_S).result is False
    values = served.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref()), timeout=RPC_TIMEOUT_S)
    assert (values.metricValues[0].metricValue, values.metricValues[0].metricValueFloat) == (0, 0.0)


@pytest.mark.parametrize(
    ("current", "desired"),
    [
        pytest.param(4, 7, id="up"),
        pytest.param(7, 3, id="down"),
        pytest.param(1, 12, id="from-one"),
    ],
)
def test_metric_spec_is_one_average_value_per_replica(served: Served, current: int, desired: int) -> None:
    """The HPA under KEDA (External metric, AverageValue target) computes ceil(value / target) outside
    its 10 % tolerance band: with target 1 that is our decision whatever the current replicas are."""
    served.scaler.scale_to(desired, now_s=0.0)
    r = ref(metricName="llm-replicas")
    spec = served.stub.GetMetricSpec(r, timeout=RPC_TIMEOUT_S).metricSpecs[0]
    value = served.stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=r, metricName="llm-replicas"), timeout=RPC_TIMEOUT_S
    ).metricValues[0]
    assert spec.metricName == value.metricName == "llm-replicas"
    usage_ratio = value.metricValueFloat / (spec.targetSizeFloat * current)
    assert abs(1.0 - usage_ratio) > 0.1
    assert math.ceil(value.metricValueFloat / spec.targetSizeFloat) == desired


def test_no_decision_yet_is_unavailable_not_zero(served: Served) -> None:
    stub = served.stub
    code, details = code_of(stub.IsActive, ref())
    assert code == grpc.StatusCode.UNAVAILABLE and "no decision yet" in details
    code, _ = code_of(stub.GetMetrics, pb.GetMetricsRequest(scaledObjectRef=ref()))
    assert code == grpc.StatusCode.UNAVAILABLE
    # The spec does not depend on a decision: KEDA can build its HPA before the first tick.
    assert stub.GetMetricSpec(ref(), timeout=RPC_TIMEOUT_S).metricSpecs[0].targetSize == 1


@pytest.mark.parametrize(
    "r",
    [
        pytest.param(ref(name="other"), id="name"),
        pytest.param(ref(namespace="default"), id="namespace"),
        pytest.param(pb.ScaledObjectRef(), id="empty"),
    ],
)
def test_unknown_scaled_object_is_not_found(served: Served, r: pb.ScaledObjectRef) -> None:
    served.scaler.scale_to(2, now_s=0.0)
    stub = served.stub
    for fn, arg in [
        (stub.IsActive, r),
        (stub.GetMetricSpec, r),
        (stub.GetMetrics, pb.GetMetricsRequest(scaledObjectRef=r, metricName=DEFAULT_METRIC_NAME)),
    ]:
        code, details = code_of(fn, arg)
        assert code == grpc.StatusCode.NOT_FOUND
        assert f"ScaledObject {r.namespace}/{r.name} is not served" in details
        assert "serving: serving/llm" in details
    reader = StreamReader.open(stub, r)
    assert reader.ended.wait(WAIT_S)
    assert reader.final_code == grpc.StatusCode.NOT_FOUND and reader.messages.empty()


def test_unknown_metric_name_is_not_found(served: Served) -> None:
    served.scaler.scale_to(2, now_s=0.0)
    code, details = code_of(
        served.stub.GetMetrics, pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="queue-depth")
    )
    assert code == grpc.StatusCode.NOT_FOUND
    assert "'queue-depth'" in details and repr(DEFAULT_METRIC_NAME) in details


def test_one_server_serves_several_scaled_objects(make_served: MakeServed) -> None:
    chat, code_llm = KedaScaler("chat", "serving"), KedaScaler("code", "serving")
    s: Served = make_served([chat, code_llm])
    chat.scale_to(4, now_s=0.0)
    code_llm.scale_to(0, now_s=0.0)
    assert s.stub.IsActive(ref("chat"), timeout=RPC_TIMEOUT_S).result is True
    assert s.stub.IsActive(ref("code"), timeout=RPC_TIMEOUT_S).result is False
    values = s.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref("chat")), timeout=RPC_TIMEOUT_S)
    assert values.metricValues[0].metricValue == 4


# --- StreamIsActive ---------------------------------------------------------------------


def test_stream_follows_activity_zero_three_zero(make_served: MakeServed) -> None:
    s: Served = make_served(keepalive_s=60.0)
    s.scaler.scale_to(0, now_s=0.0)
    reader = StreamReader.open(s.stub, ref())
    assert reader.next() is False  # the current activity, at once
    s.scaler.scale_to(3, now_s=1.0)
    assert reader.next() is True
    s.scaler.scale_to(5, now_s=2.0)  # still active: nothing new to say
    reader.assert_silent(0.3)
    s.scaler.scale_to(0, now_s=3.0)
    assert reader.next() is False
    reader.cancel()


def test_stream_waits_for_the_first_decision(make_served: MakeServed) -> None:
    s: Served = make_served(keepalive_s=0.1)
    reader = StreamReader.open(s.stub, ref())
    reader.assert_silent(0.5)  # several keep-alive periods, and still no made-up "false"
    s.scaler.scale_to(2, now_s=0.0)
    assert reader.next() is True
    reader.cancel()


def test_stream_resends_as_keepalive(make_served: MakeServed) -> None:
    s: Served = make_served(keepalive_s=0.1)
    s.scaler.scale_to(1, now_s=0.0)
    reader = StreamReader.open(s.stub, ref())
    assert [reader.next() for _ in range(4)] == [True] * 4
    reader.cancel()


def test_stream_ends_when_the_client_cancels(make_served: MakeServed) -> None:
    s: Served = make_served(keepalive_s=60.0)
    s.scaler.scale_to(1, now_s=0.0)
    reader = StreamReader.open(s.stub, ref())
    assert reader.next() is True
    assert s.server.servicer.open_streams == 1
    reader.cancel()
    assert reader.ended.wait(WAIT_S) and reader.final_code == grpc.StatusCode.CANCELLED
    # The server side notices too: its worker thread is released well before the keep-alive.
    wait_for("no stream open", lambda: s.server.servicer.open_streams == 0, WAIT_S, every_s=0.02)


def test_stream_ends_cleanly_when_the_server_stops(make_served: MakeServed) -> None:
    s: Served = make_served(keepalive_s=60.0)
    s.scaler.scale_to(1, now_s=0.0)
    reader = StreamReader.open(s.stub, ref())
    assert reader.next() is True
    stopper = threading.Thread(target=s.server.stop, kwargs={"grace_s": 10.0})
    stopper.start()
    # Ends with OK well inside the 10 s grace: the streams are closed, not cancelled at the deadline.
    assert reader.ended.wait(WAIT_S) and reader.final_code == grpc.StatusCode.OK
    stopper.join(WAIT_S)
    assert not stopper.is_alive()
    code, _ = code_of(s.stub.IsActive, ref())
    assert code == grpc.StatusCode.UNAVAILABLE


def test_streams_beyond_the_limit_are_refused_and_unary_calls_still_answer(make_served: MakeServed) -> None:
    s: Served = make_served(keepalive_s=60.0, max_streams=2, max_workers=4)
    s.scaler.scale_to(1, now_s=0.0)
    readers = [StreamReader.open(s.stub, ref()) for _ in range(2)]
    assert [r.next() for r in readers] == [True, True]
    extra = StreamReader.open(s.stub, ref())
    assert extra.ended.wait(WAIT_S) and extra.final_code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert s.stub.IsActive(ref(), timeout=RPC_TIMEOUT_S).result is True
    for r in readers:
        r.cancel()


# --- concurrency ------------------------------------------------------------------------


def test_several_streams_all_see_each_change(make_served: MakeServed) -> None:
    # Five subscribers on one address (127.0.0.1): allowed here, beyond the default of 2 per client.
    s: Served = make_served(keepalive_s=60.0, max_streams_per_peer=5)
    s.scaler.scale_to(0, now_s=0.0)
    channels = [grpc.insecure_channel(f"127.0.0.1:{s.port}") for _ in range(5)]
    try:
        readers = [StreamReader.open(pb_grpc.ExternalScalerStub(c), ref()) for c in channels]
        assert [r.next() for r in readers] == [False] * 5
        s.scaler.scale_to(3, now_s=1.0)
        assert [r.next() for r in readers] == [True] * 5
        s.scaler.scale_to(0, now_s=2.0)
        assert [r.next() for r in readers] == [False] * 5
        for r in readers:
            r.cancel()
    finally:
        for c in channels:
            c.close()


def test_concurrent_clients_read_a_consistent_decision(served: Served) -> None:
    """A writer publishes 1, 2, ..., 60 while six clients (own channels) poll: every value read is
    one that was published, and no client ever sees the decision go backwards."""
    served.scaler.scale_to(1, now_s=0.0)
    last = 60
    stop = threading.Event()
    seen: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def client(i: int) -> None:
        values: list[int] = []
        try:
            with grpc.insecure_channel(f"127.0.0.1:{served.port}") as channel:
                stub = pb_grpc.ExternalScalerStub(channel)
                # until the last value is seen after the writer is done; bounded in case it never is
                for _ in range(20_000):
                    if stop.is_set() and values and values[-1] == last:
                        break
                    assert stub.IsActive(ref(), timeout=RPC_TIMEOUT_S).result is True
                    resp = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref()), timeout=RPC_TIMEOUT_S)
                    values.append(resp.metricValues[0].metricValue)
        except BaseException as e:
            errors.append(e)
        seen[i] = values

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    for n in range(2, last + 1):
        served.scaler.scale_to(n, now_s=float(n))
        stop.wait(0.005)
    stop.set()
    for t in threads:
        t.join(timeout=30.0)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert len(seen) == 6
    for values in seen.values():
        assert values[-1] == last
        assert all(1 <= v <= last for v in values)
        assert values == sorted(values)


# --- one client cannot lock KEDA out --------------------------------------------------------


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("ipv4:10.0.0.7:51234", "ipv4:10.0.0.7"),
        ("ipv6:[::1]:51234", "ipv6:[::1]"),
        ("ipv6:%5B::1%5D:51234", "ipv6:[::1]"),  # as grpcio 1.85 writes it
        ("ipv6:[fe80::1%eth0]:8", "ipv6:[fe80::1%eth0]"),
        ("unix:/run/keda.sock", "unix:/run/keda.sock"),
    ],
)
def test_peer_host_drops_the_port_only(peer: str, host: str) -> None:
    assert peer_host(peer) == host


def _open_until_refused(
    stub: pb_grpc.ExternalScalerStub, at_most: int
) -> tuple[list[StreamReader], StreamReader]:
    """Open streams one by one (each confirmed by its first message) until one is refused."""
    opened: list[StreamReader] = []
    for _ in range(at_most):
        r = StreamReader.open(stub, ref())
        try:
            assert r.next() is True
        except queue.Empty:
            assert r.ended.wait(WAIT_S), "a stream neither answered nor ended"
            return opened, r
        opened.append(r)
    raise AssertionError(f"{at_most} streams opened, none refused")


def test_a_client_flooding_streams_cannot_lock_keda_out(make_served: MakeServed) -> None:
    """Found from outside: any client could open the 8 StreamIsActive slots and KEDA got none.
    The flooder here connects over ::1, KEDA over 127.0.0.1: two client addresses on loopback."""
    s: Served = make_served(address="localhost:0", keepalive_s=60.0)  # both loopbacks, one port
    s.scaler.scale_to(2, now_s=0.0)
    flooder_channel = grpc.insecure_channel(f"[::1]:{s.port}")
    keda_channel = grpc.insecure_channel(f"127.0.0.1:{s.port}")
    try:
        flood, refused = _open_until_refused(pb_grpc.ExternalScalerStub(flooder_channel), at_most=8)
        assert len(flood) == 2, "the per-client limit (2) let more through"
        assert refused.final_code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert s.server.servicer.open_streams_of("ipv6:[::1]") == 2
        # KEDA still gets its stream and hears the decision, and a change of it.
        keda = StreamReader.open(pb_grpc.ExternalScalerStub(keda_channel), ref())
        assert keda.next() is True
        s.scaler.scale_to(0, now_s=1.0)
        assert keda.next() is False
        # The flooder's slots come back when its streams end.
        for r in flood:
            r.cancel()
        wait_for(
            "no stream of ::1 open",
            lambda: s.server.servicer.open_streams_of("ipv6:[::1]") == 0,
            WAIT_S,
            every_s=0.02,
        )
        again = StreamReader.open(pb_grpc.ExternalScalerStub(flooder_channel), ref())
        assert again.next() is False
        again.cancel()
        keda.cancel()
    finally:
        flooder_channel.close()
        keda_channel.close()


def test_the_total_limit_holds_across_clients(make_served: MakeServed) -> None:
    s: Served = make_served(address="localhost:0", keepalive_s=60.0, max_streams=3, max_workers=5)
    s.scaler.scale_to(1, now_s=0.0)
    v6 = grpc.insecure_channel(f"[::1]:{s.port}")
    v4 = grpc.insecure_channel(f"127.0.0.1:{s.port}")
    try:
        first, _ = _open_until_refused(pb_grpc.ExternalScalerStub(v6), at_most=3)
        assert len(first) == 2
        second = StreamReader.open(pb_grpc.ExternalScalerStub(v4), ref())
        assert second.next() is True
        third = StreamReader.open(pb_grpc.ExternalScalerStub(v4), ref())  # within its share, over the total
        assert third.ended.wait(WAIT_S) and third.final_code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert s.server.servicer.open_streams == 3
        for r in (*first, second):
            r.cancel()
    finally:
        v6.close()
        v4.close()


def test_the_per_client_limit_is_validated() -> None:
    with pytest.raises(ConfigError, match=r"max_streams_per_peer = 9, must be in 1\.\.max_streams"):
        serve(KedaScaler("llm", "serving"), max_streams=8, max_streams_per_peer=9)


def test_requests_held_at_the_activator_make_the_scaled_object_active_at_zero(served: Served):
    """At 0 replicas a request held at the front door is demand KEDA must see at once: IsActive and
    the stream turn true on it, before the policy's next decision, and false once none is held."""
    served.scaler.scale_to(0, 10.0)
    stream = StreamReader.open(served.stub, ref())
    try:
        assert stream.next() is False
        assert served.stub.IsActive(ref(), timeout=RPC_TIMEOUT_S).result is False
        served.scaler.set_held_requests(1)
        assert stream.next() is True
        assert served.stub.IsActive(ref(), timeout=RPC_TIMEOUT_S).result is True
        # still active when the decision follows; the replica count served is the decision's
        served.scaler.scale_to(1, 11.0)
        stream.assert_silent(0.3)
        served.scaler.set_held_requests(0)  # served: nothing held, one replica still decided
        stream.assert_silent(0.3)
        served.scaler.scale_to(0, 20.0)
        assert stream.next() is False
        served.scaler.set_held_requests(None)  # unknown holds nothing up: still inactive
        assert served.stub.IsActive(ref(), timeout=RPC_TIMEOUT_S).result is False
    finally:
        stream.cancel()


def test_held_requests_before_the_first_decision_serve_nothing(served: Served):
    served.scaler.set_held_requests(3)
    with pytest.raises(grpc.RpcError) as e:
        served.stub.IsActive(ref(), timeout=RPC_TIMEOUT_S)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    served.scaler.scale_to(0, 1.0)
    assert served.stub.IsActive(ref(), timeout=RPC_TIMEOUT_S).result is True
