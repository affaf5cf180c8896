"""Build ``llmscale run``'s parts from a validated :class:`LiveConfig`.

Each factory imports its concrete class lazily: a dry-run against emulate never imports
the ``kubernetes`` client, and the CLI starts fast. Everything built here that holds a
resource (a gRPC server, an HTTP client, a log file) is registered in
:attr:`Runtime.closers` and released by :meth:`Runtime.close`, last built first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from llmscale.clock import Clock, UnixClock
from llmscale.cluster.base import Cluster
from llmscale.config import LiveConfig, PolicySpec, deployment_of, replicas_from_metrics
from llmscale.controller.decision_log import DecisionLog, policy_version
from llmscale.controller.live import LiveController, PolicyRun
from llmscale.controller.persist import StateStore
from llmscale.controller.server import ControllerMetrics, ControllerServer
from llmscale.deployment import guard_config
from llmscale.errors import ConfigError
from llmscale.metrics.source import MetricSource

__all__ = [
    "Closeable",
    "ListsPods",
    "ObservedReplicas",
    "Runtime",
    "build_cluster",
    "build_drift",
    "build_elector",
    "build_external_metrics",
    "build_runtime",
    "build_source",
    "build_store",
    "policy_run",
]


@runtime_checkable
class ListsPods(Protocol):
    """An actuator that lists the target's pods (the Kubernetes one): the pod scraper's targets."""

    def pod_targets(self) -> list[tuple[str, str]]:
        """``(pod name, pod IP)`` of every unfinished pod with an IP."""
        ...


@runtime_checkable
class Closeable(Protocol):
    """A metric source holding connections (an HTTP client) to release when the run ends."""

    def close(self) -> None: ...


log = logging.getLogger(__name__)


@dataclass
class Runtime:
    controller: LiveController
    server: ControllerServer
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        _close_all(self.closers)


def _close_all(closers: list[Callable[[], None]]) -> None:
    for close in reversed(closers):
        try:
            close()
        except Exception:  # shutdown must release every resource, whatever one of them raises
            log.exception("error while shutting down")
    closers.clear()


def policy_run(cfg: LiveConfig, spec: PolicySpec, extra_guards: dict[str, Any] | None = None) -> PolicyRun:
    """The policy with its guards, merged as the backtest merges them (:func:`guard_config`)."""
    from llmscale.policies.base import create_policy

    deployment = deployment_of(cfg)
    policy = create_policy(spec.name, deployment, spec.params)
    user = {**cfg.guard_overrides(), **(extra_guards or {})}
    guards = guard_config(deployment, policy, user)
    return PolicyRun(policy, guards, policy_version(spec.name, spec.params, user))


class ObservedReplicas:
    """A MetricSource wrapper that remembers how many replicas its last observation reported.

    The KEDA scaler without a Kubernetes API (``actuator.keda.replicas_from: metrics``) takes its
    count before the first decision from here: 3 pods in Prometheus -> spec 3, so a first decision
    of 3 publishes nothing new and a guard compares 5 with 3, not with 0.
    """

    def __init__(self) -> None:
        self.source: MetricSource | None = None
        self.count = 0

    def observe(self, now_s: float) -> Any:
        assert self.source is not None  # wrap() ran before the first tick
        obs = self.source.observe(now_s)
        self.count = len(obs.replicas)
        return obs

    def wrap(self, source: MetricSource) -> MetricSource:
        self.source = source
        wrapped: MetricSource = self
        return wrapped

    def __call__(self) -> int:
        return self.count

    def __getattr__(self, name: str) -> Any:
        # errors_total, close, ...: what the loop reads from the source it wraps
        if name == "source":
            raise AttributeError(name)
        return getattr(self.source, name)


def build_cluster(
    cfg: LiveConfig,
    clock: Clock,
    closers: list[Callable[[], None]],
    observed: ObservedReplicas | None = None,
) -> tuple[Cluster, Any]:
    """The actuator, and the KubernetesCluster behind it (None with emulate, or KEDA whose replicas
    come from the metrics: then ``observed`` wraps the source and gives the count) for pods and state."""
    kind = cfg.actuator.kind
    if replicas_from_metrics(cfg):
        if observed is None:
            raise ConfigError(f"actuator.{kind}.replicas_from metrics: no observed-replicas counter given")
        published = _published(cfg, closers, initial_replicas=observed)
        return published, None
    if kind == "emulate":
        from llmscale.emulate.cluster import EmulateCluster
        from llmscale.emulate.config import admin_token

        e = cfg.actuator.emulate
        assert e is not None  # checked at load
        token = admin_token(e.token_file, what="actuator.emulate.token_file")
        emulate = EmulateCluster(e.url, token=token)
        closers.append(emulate.close)
        cluster: Cluster = emulate
        return cluster, None
    kube = _kubernetes_cluster(cfg, clock)
    # Read the server version now, so a target whose scale-downs llmscale cannot steer is
    # named in a warning at start, not at its first shrink.
    kube.check_scale_down(via_keda=kind in ("keda", "hpa"))
    if kind == "kubernetes":
        return kube, kube
    keda = _published(
        cfg,
        closers,
        # KEDA tells nothing about pods: the Kubernetes view counts them, and the scale spec
        # read at start is what the guards compare the first decision with.
        initial_replicas=kube.spec_replicas,
        replicas_view=kube.replicas_view,
        # The pods carry their deletion costs before KEDA can read a lower count.
        before_scale_down=lambda current, n: kube.prepare_scale_down(current, n, via_keda=True),
    )
    return keda, kube


def _published(cfg: LiveConfig, closers: list[Callable[[], None]], **scaler_kw: Any) -> Cluster:
    """The decision holder of a keda or hpa actuator; the KEDA gRPC server is started here, the
    external metrics server (which also reads the controller's signals) by :func:`build_runtime`."""
    if cfg.actuator.kind == "hpa":
        from llmscale.cluster.keda import KedaScaler

        # The same holder as KEDA's (a Cluster whose scale_to publishes the decision): the HPA
        # reads it through the external metrics API instead of KEDA's gRPC.
        assert cfg.actuator.hpa is not None  # checked at load
        hpa: Cluster = KedaScaler(
            cfg.target.name,
            cfg.target.namespace,
            metric_name=cfg.actuator.hpa.metric_name,
            role="external metric",
            **scaler_kw,
        )
        return hpa
    return _keda_scaler(cfg, closers, **scaler_kw)


def build_external_metrics(cfg: LiveConfig, published: Any, metrics: ControllerMetrics) -> Any:
    """The ``external.metrics.k8s.io`` server of ``actuator.kind: hpa`` (None otherwise), not started."""
    h = cfg.actuator.hpa
    if cfg.actuator.kind != "hpa" or h is None:
        return None
    from llmscale.controller.external_metrics import ExternalMetricsServer, MetricsSnapshot

    if h.tls.client_ca_file is None:
        log.warning(
            "actuator.hpa.tls.client_ca_file is not set: anyone who reaches %s may read the external "
            "metrics; set it to the API server's request-header CA",
            h.listen,
        )

    def snapshot() -> MetricsSnapshot:
        decision = published.decision
        if decision is None:
            return MetricsSnapshot(None, {}, 0.0)
        return MetricsSnapshot(decision[0], metrics.last_signals, decision[1])

    return ExternalMetricsServer(
        snapshot,
        namespace=cfg.target.namespace,
        target=cfg.target.label,
        metric_name=h.metric_name,
        host=h.listen.host,
        port=h.listen.port,
        cert_file=h.tls.cert_file,
        key_file=h.tls.key_file,
        client_ca_file=h.tls.client_ca_file,
        allowed_names=h.allowed_names,
    )


def _keda_scaler(cfg: LiveConfig, closers: list[Callable[[], None]], **scaler_kw: Any) -> Cluster:
    """The KEDA scaler for the target, served on actuator.keda.listen (with its TLS, if any)."""
    from llmscale.cluster.keda import KedaScaler, ServerTls, serve

    keda_cfg = cfg.actuator.keda
    scaler = KedaScaler(
        keda_cfg.scaled_object or cfg.target.name,
        cfg.target.namespace,
        metric_name=keda_cfg.metric_name,
        **scaler_kw,
    )
    t = keda_cfg.tls
    tls = None if t is None else ServerTls.from_files(t.cert_file, t.key_file, t.client_ca_file)
    server, port = serve(
        scaler,
        str(keda_cfg.listen),
        max_streams=keda_cfg.max_streams,
        max_streams_per_peer=keda_cfg.max_streams_per_peer,
        max_workers=max(16, keda_cfg.max_streams + 8),
        tls=tls,
    )
    mtls = "" if t is None else (" (TLS, client certificates required)" if t.client_ca_file else " (TLS)")
    log.info("KEDA external scaler on %s:%d%s", keda_cfg.listen.host, port, mtls)
    closers.append(server.stop)
    keda: Cluster = scaler
    return keda


def _kubernetes_cluster(cfg: LiveConfig, clock: Clock) -> Any:
    from llmscale.cluster.kubernetes import KubernetesCluster, KubeScaleTarget

    t = cfg.target
    target = KubeScaleTarget(
        namespace=t.namespace,
        kind=t.kind,
        name=t.name,
        selector=",".join(f"{k}={v}" for k, v in sorted(t.selector.items())),
    )
    k = cfg.actuator.kubernetes
    return KubernetesCluster.from_config(
        target,
        kubeconfig=k.kubeconfig,
        context=k.context,
        clock=clock,
        pod_load=_pod_load(cfg),
        scale_down_order=k.scale_down_order,
    )


def _pod_load(cfg: LiveConfig) -> Any:
    """What reads each pod's load before a scale-down: its /metrics at metrics.scrape's port/path."""
    from llmscale.cluster.scale_down import ScrapePodLoad
    from llmscale.metrics.promql import BACKENDS

    if cfg.actuator.kubernetes.scale_down_order == "off":
        return None
    s = cfg.metrics.scrape
    names = BACKENDS[cfg.target.backend][0]
    return ScrapePodLoad(port=s.port, path=s.path, timeout_s=s.timeout_s, names=names)


def build_source(cfg: LiveConfig, kube: Any) -> MetricSource:
    """The metric source; ``kube`` (a KubernetesCluster or None) lists the pods to scrape."""
    m = cfg.metrics
    if m.source == "prometheus":
        return _prometheus_source(cfg)
    from llmscale.metrics.scrape import PodScrapeSource

    s = m.scrape
    targets: Callable[[], list[Any]]
    activator = None if s.activator_url is None else str(s.activator_url)
    if s.static_targets is not None:
        fixed = [(t.name, t.url) for t in s.static_targets]
        targets = lambda: fixed  # noqa: E731 (a constant provider)
    elif s.emulate_url:
        from llmscale.emulate.config import admin_token

        token = admin_token(s.emulate_token_file, what="metrics.scrape.emulate_token_file")
        targets = EmulateTargets(s.emulate_url, s.path, s.timeout_s, token=token)
        if activator is None:  # emulate's front door is the activator of its fleet
            activator = str(s.emulate_url).rstrip("/") + "/metrics"
    else:
        targets = _pod_targets(kube, s.port, s.path, s.dcgm_port)
    scrape: MetricSource = PodScrapeSource(
        targets,
        timeout_s=s.timeout_s,
        max_sample_age_s=s.max_sample_age_s,
        max_page_bytes=s.max_page_bytes,
        max_page_lines=s.max_page_lines,
        follow_redirects=s.follow_redirects,
        max_clock_ahead_s=s.max_clock_ahead_s,
        activator_url=activator,
        workers=s.workers,
    )
    return scrape


def _prometheus_source(cfg: LiveConfig) -> MetricSource:
    """PrometheusSource with the backend's default queries, narrowed and overridden by the file."""
    from llmscale.metrics.prometheus import PrometheusSource
    from llmscale.metrics.promql import default_queries, with_overrides

    p = cfg.metrics.prometheus
    assert p is not None  # checked at load
    selector = p.selector
    if selector is None:
        selector = "" if cfg.actuator.kind == "emulate" else f'namespace="{cfg.target.namespace}"'
    base = default_queries(cfg.target.backend, replica_label=p.replica_label, selector=selector)
    values = {k: v for k, v in p.queries.items() if k not in base.histograms}
    histograms = {k: v for k, v in p.queries.items() if k in base.histograms}
    queries = with_overrides(base, values=values, histograms=histograms)
    source: MetricSource = PrometheusSource(
        p.url,
        backend=cfg.target.backend,
        queries=queries,
        selector=selector,
        max_sample_age_s=p.max_sample_age_s,
        timeout_s=p.timeout_s,
        queue_per_s=p.queue_per_s,
        activator_query=p.activator_query,
    )
    return source


def _pod_targets(kube: Any, port: int, path: str, dcgm_port: int | None) -> Callable[[], list[Any]]:
    """Each tick, the target's pods from the Kubernetes API as scrape targets (pod IP, port, path)."""
    from llmscale.metrics.scrape import ScrapeTarget

    if not isinstance(kube, ListsPods):
        raise ConfigError(
            "metrics.scrape: this actuator cannot list pods; give static_targets or emulate_url"
        )

    def provider() -> list[Any]:
        return [
            ScrapeTarget(
                name,
                f"http://{ip}:{port}{path}",
                dcgm_url=None if dcgm_port is None else f"http://{ip}:{dcgm_port}/metrics",
            )
            for name, ip in kube.pod_targets()
        ]

    return provider


class EmulateTargets:
    """Scrape targets from emulate's ``/admin/targets`` (Prometheus http_sd format), per tick.

    A failure raises: PodScrapeSource counts it as a ``targets`` error and keeps scraping the
    last list, whose replicas then read as unknown if they are gone.
    """

    def __init__(self, base_url: str, path: str, timeout_s: float, *, token: str | None = None) -> None:
        self.url = base_url.rstrip("/") + "/admin/targets"
        self.path = path
        self.timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    def __call__(self) -> list[tuple[str, str]]:
        import httpx

        resp = httpx.get(self.url, timeout=self.timeout_s, headers=self._headers)
        resp.raise_for_status()
        return [
            (str(g["labels"]["pod"]), f"http://{t}{self.path}")
            for g in resp.json()
            for t in g.get("targets", ())
        ]


def build_store(cfg: LiveConfig, kube: Any) -> StateStore | None:
    kind = cfg.state.store
    if kind == "none":
        return None
    if kind == "file":
        from llmscale.cluster.state_store import FileStateStore

        assert cfg.state.path is not None  # checked at load
        file_store: StateStore = FileStateStore(cfg.state.path)
        return file_store
    from llmscale.cluster.state_store import ConfigMapStateStore, state_configmap_name

    if kube is None:
        raise ConfigError("state.store configmap needs a Kubernetes target (actuator kubernetes or keda)")
    name = cfg.state.configmap or state_configmap_name(cfg.target.name)
    configmap: StateStore = ConfigMapStateStore(
        kube.api_client, cfg.target.namespace, name, target=cfg.target.label
    )
    return configmap


def build_elector(cfg: LiveConfig, kube: Any) -> Any:
    """The Lease elector when ``leader_election.enabled`` (None otherwise); not started yet."""
    le = cfg.leader_election
    if not le.enabled:
        return None
    from llmscale.cluster.leader import LeaseElector, LeaseSettings, default_identity, lease_name

    if kube is None:
        raise ConfigError("leader_election needs a Kubernetes target (actuator kubernetes)")
    settings = LeaseSettings(
        namespace=le.namespace or cfg.target.namespace,
        name=le.lease_name or lease_name(cfg.target.name),
        identity=le.identity or default_identity(),
        lease_duration_s=le.lease_duration_s,
        renew_deadline_s=le.renew_deadline_s,
        retry_period_s=le.retry_period_s,
        # a hung request must end before the renew deadline does
        request_timeout_s=min(5.0, le.renew_deadline_s / 2),
    )
    elector = LeaseElector(kube.api_client, settings)
    kube.may_write = elector.is_leader
    return elector


def build_drift(cfg: LiveConfig, runs: list[PolicyRun], registry: Any) -> tuple[Any, list[PolicyRun]]:
    """The model-drift hook (None when ``drift.enabled`` is off or the model is unknown to the
    catalogue), and ``runs`` with their policies made rebuildable around adjusted factors when
    ``drift.adapt`` is on."""
    d = cfg.drift
    if not d.enabled:
        return None, runs
    from llmscale.controller.drift import AdjustablePolicy, DriftMonitor, DriftSettings
    from llmscale.perf.drift import AdaptConfig, DriftLimits
    from llmscale.policies.base import create_policy

    t = cfg.target
    settings = DriftSettings(
        warn=d.warn,
        adapt=d.adapt,
        limits=DriftLimits(
            min_tokens=float(d.min_tokens),
            min_requests=float(d.min_requests),
            min_first_tokens=float(d.min_first_tokens),
        ),
        adapt_config=AdaptConfig(time_constant_s=d.time_constant_s, max_step=d.max_step),
    )
    try:
        monitor = DriftMonitor(
            settings,
            model=t.model,
            gpu=t.gpu,
            tp=t.tp,
            calibration=t.calibration,
            budget_tokens=t.max_num_batched_tokens,
            target=t.label,
            registry=registry,
            precision=deployment_of(cfg).precision,
        )
    except ConfigError as e:
        log.warning("model drift is off: %s", e)
        return None, runs
    if not d.adapt:
        return monitor, runs
    ctx = deployment_of(cfg)
    specs = [cfg.policy] + ([cfg.shadow] if cfg.shadow is not None else [])
    adjustable: list[AdjustablePolicy] = []
    for spec in specs:

        def build(scale: Any, spec: PolicySpec = spec) -> Any:
            return create_policy(spec.name, replace(ctx, perf_scale=scale), spec.params)

        adjustable.append(AdjustablePolicy(build))
    monitor.policies = tuple(adjustable)
    return monitor, [replace(run, policy=p) for run, p in zip(runs, adjustable, strict=True)]


def build_admission(cfg: LiveConfig) -> Any:
    """Seed 003 3.1's node checks before a scale-up, when configured (``controller/admission.py``)."""
    nc = cfg.admission.node_checks
    if nc is None:
        return None
    from llmscale.controller.admission import NodeAdmission
    from llmscale.tenancy.node_checks import NodeThresholds

    url = nc.prometheus_url
    if url is None:
        assert cfg.metrics.prometheus is not None  # config.py requires one or the other
        url = cfg.metrics.prometheus.url
    limits = NodeThresholds(nc.min_free_memory_bytes, nc.max_cpu_throttled_ratio, nc.max_disk_io_util)
    return NodeAdmission.from_prometheus(
        url, nc.nodes, window=nc.window, timeout_s=nc.timeout_s, limits=limits
    )


def build_quota(cfg: LiveConfig, config_name: str | None = None) -> Any:
    """The tenant's MIG quota before a scale-up, when configured: the tenants file is read and
    checked now, so a wrong file or tenant stops ``run`` before its first tick."""
    mq = cfg.admission.mig_quota
    if mq is None:
        return None
    from llmscale.backtest.tenants import load_tenant_quota

    try:
        return load_tenant_quota(Path(mq.tenants_file), mq.tenant)
    except ConfigError as e:
        where = f"{config_name}: " if config_name else ""
        raise ConfigError(f"{where}admission.mig_quota: {e}") from e


def build_runtime(cfg: LiveConfig, *, clock: Clock | None = None, config_name: str | None = None) -> Runtime:
    """Every part of ``llmscale run``, connected; the server is built, not started.

    ``config_name`` (the config file's name) prefixes start-up errors about its settings.
    """
    clock = clock or UnixClock()
    closers: list[Callable[[], None]] = []
    try:
        observed = ObservedReplicas()
        cluster, kube = build_cluster(cfg, clock, closers, observed)
        source = build_source(cfg, kube)
        if replicas_from_metrics(cfg):
            source = observed.wrap(source)
        if isinstance(source, Closeable):
            closers.append(source.close)
        store = build_store(cfg, kube)
        primary = policy_run(cfg, cfg.policy)
        shadow = policy_run(cfg, cfg.shadow, cfg.shadow.guard_overrides()) if cfg.shadow is not None else None
        metrics = ControllerMetrics(cfg.target.label, cfg.metrics.source)
        external = build_external_metrics(cfg, cluster, metrics)
        if external is not None:
            external.start()
            closers.append(external.stop)
            log.info("external.metrics.k8s.io served on %s:%d (HTTPS)", external.host, external.port)
        drift, runs = build_drift(cfg, [primary] + ([shadow] if shadow is not None else []), metrics.registry)
        primary, shadow = runs[0], (runs[1] if shadow is not None else None)
        decisions = DecisionLog(cfg.decision_log.path)
        closers.append(decisions.close)
        elector = build_elector(cfg, kube)
        if elector is not None:
            closers.append(elector.stop)
        controller = LiveController(
            source=source,
            cluster=cluster,
            primary=primary,
            shadow=shadow,
            mode=cfg.mode,
            primary_acts=cfg.primary_acts,
            target=cfg.target.label,
            metrics=metrics,
            tick_s=cfg.tick_s,
            clock=clock,
            decision_log=decisions,
            store=store,
            deployment=deployment_of(cfg),
            drift=drift,
            config_name=config_name,
            elector=elector,
            admission=build_admission(cfg),
            quota=build_quota(cfg, config_name),
        )
    except BaseException:
        _close_all(closers)
        raise
    controller.tick_deadline_s = cfg.tick_deadline_s
    listen = cfg.server.listen
    server = ControllerServer(listen.host, listen.port, metrics, controller.ready, controller.healthy)
    return Runtime(controller, server, closers)
