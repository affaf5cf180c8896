"""``llmscale run``'s configuration file: pydantic models, validated once at load.

Every section forbids unknown keys, so a typo (``cooldwn_up_s``) is an error, not a silent
default. :func:`load_config` turns every validation failure into a :class:`ConfigError`
naming the file and the field path, e.g.
``llmscale.yaml: guards.cooldown_up_s: Input should be a valid number``; the CLI exits 2.

The models are frozen: past the edge the controller reads them as plain values.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.documents import validation_message
from llmscale.errors import ConfigError
from llmscale.guards import GUARD_RANGES, GuardConfig
from llmscale.metrics.names import ACTIVATOR
from llmscale.types import Mode

__all__ = [
    "ActuatorConfig",
    "Address",
    "DriftConfig",
    "HpaConfig",
    "LeaderElectionConfig",
    "LiveConfig",
    "MetricsConfig",
    "PolicySpec",
    "ShadowSpec",
    "TargetConfig",
    "TlsFiles",
    "check_run_files",
    "load_config",
    "parse_config",
    "replicas_from_metrics",
]


class _Section(BaseModel):
    # allow_inf_nan=False: YAML reads ``.inf`` and ``.nan`` as floats, and no setting here means
    # either (``tick_s: .inf`` passed ``gt=0`` and crashed the loop after its first tick).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _http_url(value: Any) -> Any:
    """An ``http(s)://host[:port][/path]`` URL, checked at load rather than failing at every tick."""
    if not isinstance(value, str):
        return value  # pydantic's type check words the error
    from urllib.parse import urlsplit

    text = value.strip()
    if text != value or any(c.isspace() for c in text):
        raise ValueError(f"{value!r} contains blanks")
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError for a port that is not a number in 0..65535
    except ValueError as e:
        raise ValueError(f"{value!r} is not a URL: {e}") from e
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{value!r} must start with http:// or https://")
    if not parts.hostname:
        raise ValueError(f"{value!r} has no host (e.g. http://127.0.0.1:8000)")
    if port == 0:
        raise ValueError(f"{value!r}: port 0 cannot be connected to")
    if parts.query or parts.fragment:
        raise ValueError(f"{value!r}: a base URL takes no ?query or #fragment")
    return text


#: a URL llmscale connects to (Prometheus, a replica's /metrics page, emulate's admin API)
HttpUrl = Annotated[str, AfterValidator(_http_url)]


class Address(_Section):
    """A ``host:port`` listen address; ``port`` 0 picks a free port (tests)."""

    host: str
    port: int = Field(ge=0, le=65535)

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def _parse_address(value: Any) -> Any:
    """``"127.0.0.1:9464"`` or ``"[::1]:9464"`` -> Address fields; mappings pass through."""
    if not isinstance(value, str):
        return value
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{value!r} is not host:port (e.g. 127.0.0.1:9464)")
    return {"host": host.strip("[]"), "port": int(port)}


class TargetConfig(_Section):
    namespace: str = "default"
    kind: Literal["Deployment", "StatefulSet"] = "Deployment"
    name: str = Field(min_length=1)
    #: the pods' label selector, e.g. {app: llama}
    selector: dict[str, str] = Field(default_factory=dict)
    backend: Literal["vllm", "tgi", "triton"] = "vllm"
    model: str = DEFAULT_DEPLOYMENT.model
    gpu: str = DEFAULT_DEPLOYMENT.gpu
    tp: int = Field(default=DEFAULT_DEPLOYMENT.tp, ge=1)
    #: seconds from a new pod's creation to Ready, as measured on this cluster; policies that plan
    #: ahead (slo, dynamo-sla) look this far. Default: the catalogue's published figure for the
    #: model and GPU (pod scheduling + image pull + weight loading + warm-up).
    cold_start_s: float | None = Field(default=None, gt=0)
    #: a calibration profile written by ``llmscale calibrate`` for the deployed engine: the `slo`
    #: capacity model and every capacity-model policy plan with it (default: the committed model)
    calibration: str | None = None
    #: the engine's scheduler settings, as the deployed vLLM runs (V1's defaults)
    max_num_seqs: int = Field(default=DEFAULT_DEPLOYMENT.max_num_seqs, ge=1)
    max_num_batched_tokens: int = Field(default=DEFAULT_DEPLOYMENT.max_num_batched_tokens, ge=1)
    #: the clients' time-out, seconds (a request unanswered this long is abandoned, e.g. the
    #: gateway's or the OpenAI client's ``timeout``): ``slo`` stops counting on a backlog older
    #: than it. None: the clients wait.
    client_timeout_s: float | None = Field(default=None, gt=0)
    #: the served model's number formats, as the deployed vLLM's ``--dtype``, ``--quantization``
    #: and ``--kv-cache-dtype`` (docs/fp8.md): the step-time model prices FP8 weights and KV with them
    dtype: str = DEFAULT_DEPLOYMENT.dtype
    quantization: str = DEFAULT_DEPLOYMENT.quantization
    kv_cache_dtype: str = DEFAULT_DEPLOYMENT.kv_cache_dtype

    @model_validator(mode="after")
    def _known_precision(self) -> TargetConfig:
        from llmscale.precision import precision_of

        try:
            precision_of(self.dtype, self.kv_cache_dtype, self.quantization)
        except ConfigError as exc:  # pydantic then names the section and the config file
            raise ValueError(str(exc)) from exc
        return self

    @field_validator("calibration")
    @classmethod
    def _profile_exists(cls, v: str | None) -> str | None:
        if v is not None:
            from llmscale.perf.profile import load_profile

            try:
                load_profile(v)
            except ConfigError as exc:  # pydantic then names the field path and the config file
                raise ValueError(str(exc)) from exc
        return v

    @model_validator(mode="after")
    def _profile_fits(self) -> TargetConfig:
        # whatever the policy: the drift monitor and every capacity model read the profile
        if self.calibration is not None:
            from llmscale.perf.profile import check_profile_target

            try:
                check_profile_target(self.calibration, self.model, self.gpu, self.tp)
            except ConfigError as exc:
                raise ValueError(str(exc)) from exc
        return self

    @property
    def label(self) -> str:
        """How the target is named in metrics labels and logs: ``namespace/name``."""
        return f"{self.namespace}/{self.name}"


class PrometheusConfig(_Section):
    url: HttpUrl
    timeout_s: float = Field(default=5.0, gt=0)
    #: the series label that names the replica (the pod)
    replica_label: str = "pod"
    #: label matchers for the engine's series, e.g. 'namespace="llm",job="vllm"' (default: the
    #: target's namespace on Kubernetes, none with emulate); series of pods the cluster does not
    #: list are dropped by the live loop anyway
    selector: str | None = None
    #: PromQL overrides per exporter metric name or histogram family (null removes one)
    queries: dict[str, str | None] = Field(default_factory=dict)
    #: a replica whose newest sample is older than this is unknown; one whose read series are all
    #: younger than this and unchanged since their first sample is undated (starts no rate)
    max_sample_age_s: float = Field(default=60.0, gt=0)
    #: read the fleet's waiting queue once a second between ticks (one range query a tick), for
    #: seed 004's queue entropy over 30 one-second lengths; needs the engines scraped every second
    queue_per_s: bool = False
    #: PromQL for the requests an activator holds while no replica is ready (one series; null: not
    #: read). Default ``sum(llmscale:activator_requests_held)``: emulate's front door exports it
    activator_query: str | None = f"sum({ACTIVATOR.REQUESTS_HELD})"


class StaticTarget(_Section):
    name: str = Field(min_length=1)
    url: HttpUrl


class ScrapeConfig(_Section):
    port: int = Field(default=8000, ge=1, le=65535)
    path: str = Field(default="/metrics", pattern=r"^/\S*$")
    timeout_s: float = Field(default=2.0, gt=0)
    dcgm_port: int | None = Field(default=None, ge=1, le=65535)
    #: fixed targets instead of pods found through the Kubernetes API
    static_targets: tuple[StaticTarget, ...] | None = None
    #: discover targets from emulate's ``/admin/targets`` on every tick
    emulate_url: HttpUrl | None = None
    #: the staleness limit: a replica whose page has not changed for longer than this, or whose
    #: samples carry timestamps older than this, is unknown (a frozen exporter, a cached page)
    max_sample_age_s: float = Field(default=60.0, gt=0)
    #: a file holding emulate's admin token (default: $LLMSCALE_EMULATE_ADMIN_TOKEN)
    emulate_token_file: str | None = None
    #: a page larger than this (compressed or inflated), or with more lines, is not read: its
    #: replica is unknown (a vLLM page is ~20 KiB; the bound keeps the controller in its 512Mi)
    max_page_bytes: int = Field(default=8 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    max_page_lines: int = Field(default=100_000, ge=1)
    #: a replica's redirect: refused ("never"), or followed within its scheme, host and port
    follow_redirects: Literal["never", "same-host"] = "never"
    #: a sample stamped further ahead of the controller's clock than this is not fresh: refused
    max_clock_ahead_s: float = Field(default=10.0, ge=0)
    #: the metrics page of an activator (a front door holding requests while no replica is ready),
    #: read into the gateway queue; default with emulate_url: emulate's front door, <emulate_url>/metrics
    activator_url: HttpUrl | None = None
    #: processes that scrape, parse and vet the pages beside the controller's (0: none, all in the
    #: controller's own process); a few thousand replicas need them (metrics/_shards.py)
    workers: int = Field(default=0, ge=0, le=64)


class MetricsConfig(_Section):
    source: Literal["prometheus", "scrape"] = "prometheus"
    prometheus: PrometheusConfig | None = None
    scrape: ScrapeConfig = Field(default_factory=ScrapeConfig)


class PolicySpec(_Section):
    name: str
    params: dict[str, Any] = Field(default_factory=dict)


class KubernetesConfig(_Section):
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    #: how a scale-down picks its pods (docs/kubernetes-drain.md): auto reads the server version
    #: (pod-deletion-cost from v1.22; deleting the least-loaded pods itself before); off leaves
    #: the choice to Kubernetes. Pods' loads come from metrics.scrape's port and path.
    scale_down_order: Literal["auto", "deletion-cost", "explicit", "annotate-only", "off"] = "auto"


class TlsFiles(_Section):
    """A server's certificate and key (PEM files) and, optionally, the CA its clients must present
    a certificate from (mTLS)."""

    cert_file: str = Field(min_length=1)
    key_file: str = Field(min_length=1)
    client_ca_file: str | None = Field(default=None, min_length=1)


class KedaConfig(_Section):
    listen: Address = Field(default_factory=lambda: Address(host="127.0.0.1", port=9090))
    #: TLS on the gRPC server (KEDA's trigger sets ``enableTLS`` and, from its TriggerAuthentication,
    #: ``caCert``; with ``client_ca_file`` also ``tlsClientCert``/``tlsClientKey``); null: plain text
    tls: TlsFiles | None = None
    #: where the replica count comes from: ``kubernetes`` (the target's scale spec and pods, needs
    #: credentials) or ``metrics`` (the replicas the metric source reports; no Kubernetes API is
    #: used, so ``run`` starts without credentials, e.g. to try the scaler beside ``emulate``)
    replicas_from: Literal["kubernetes", "metrics"] = "kubernetes"
    metric_name: str = "llmscale-desired-replicas"
    #: the ScaledObject that asks (default: the target's name)
    scaled_object: str | None = None
    #: open ``StreamIsActive`` calls allowed in total and per client address: KEDA opens one per
    #: ScaledObject trigger, so a client holding more is refused (RESOURCE_EXHAUSTED) instead of
    #: taking every stream slot and locking KEDA out
    max_streams: int = Field(default=8, ge=1, le=64)
    max_streams_per_peer: int = Field(default=2, ge=1, le=64)

    _addr = field_validator("listen", mode="before")(_parse_address)


class HpaConfig(_Section):
    """``actuator.kind: hpa``: the decision served as an external metric (docs/hpa-external-metrics.md)."""

    #: HTTPS listen address of the ``external.metrics.k8s.io`` server (the APIService's port)
    listen: Address = Field(default_factory=lambda: Address(host="127.0.0.1", port=6443))
    #: the serving certificate (its SAN must be the Service's name, <svc>.<namespace>.svc) and the
    #: request-header CA that signs the API server's front-proxy client certificate
    tls: TlsFiles
    #: common names the front-proxy certificate may carry (the API server's
    #: --requestheader-allowed-names); empty: any certificate the CA signed
    allowed_names: tuple[str, ...] = ()
    metric_name: str = Field(default="llmscale-desired-replicas", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    #: as actuator.keda.replicas_from
    replicas_from: Literal["kubernetes", "metrics"] = "kubernetes"

    _addr = field_validator("listen", mode="before")(_parse_address)


class EmulateConfig(_Section):
    url: HttpUrl
    #: a file holding emulate's admin token (default: $LLMSCALE_EMULATE_ADMIN_TOKEN); the token
    #: itself never goes in this file
    token_file: str | None = None


class ActuatorConfig(_Section):
    kind: Literal["kubernetes", "keda", "hpa", "emulate"] = "kubernetes"
    kubernetes: KubernetesConfig = Field(default_factory=KubernetesConfig)
    keda: KedaConfig = Field(default_factory=KedaConfig)
    hpa: HpaConfig | None = None
    emulate: EmulateConfig | None = None


class ServerConfig(_Section):
    listen: Address = Field(default_factory=lambda: Address(host="127.0.0.1", port=9464))

    _addr = field_validator("listen", mode="before")(_parse_address)


class DecisionLogConfig(_Section):
    #: a file to append JSON lines to; "-" is standard output
    path: str = "-"


class StateConfig(_Section):
    #: ``configmap``: the controller's own ConfigMap in the target's namespace (needs only get and
    #: update on that one ConfigMap, see deploy/rbac/role.yaml); ``file``: a local file
    store: Literal["configmap", "file", "none"] = "none"
    path: str | None = None
    #: the ConfigMap's name (default ``llmscale-state-<target name>``)
    configmap: str | None = Field(
        default=None, min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
    )

    @field_validator("store", mode="before")
    @classmethod
    def _annotation_is_gone(cls, value: Any) -> Any:
        if value == "annotation":
            raise ValueError(
                "annotation is no longer a state store: it needed `patch` on the target Deployment, "
                "which also lets the controller rewrite the pod template; use configmap (its own "
                "ConfigMap, see deploy/rbac/role.yaml)"
            )
        return value


class LeaderElectionConfig(_Section):
    """Two or more replicas of ``llmscale run``, one actor: a ``coordination.k8s.io/v1`` Lease.

    The defaults are client-go's (15 / 10 / 2 s): a standby takes over at most about
    ``lease_duration_s + retry_period_s`` = 17 s after the leader last renewed, and a leader
    that could not renew for ``renew_deadline_s`` = 10 s stops actuating, 5 s before any
    standby may take over (``cluster/leader.py`` explains the margin).
    """

    enabled: bool = False
    #: the Lease's name (default ``llmscale-leader-<target name>``); deploy/rbac/lease.yaml ships it
    lease_name: str | None = Field(
        default=None, min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
    )
    #: the Lease's namespace (default: the target's)
    namespace: str | None = Field(default=None, min_length=1)
    #: how long a standby waits, after it last saw the Lease change, before it takes the Lease
    lease_duration_s: float = Field(default=15.0, gt=0)
    #: how long a leader keeps actuating after its last successful renewal
    renew_deadline_s: float = Field(default=10.0, gt=0)
    #: how often every replica tries to acquire or renew
    retry_period_s: float = Field(default=2.0, gt=0)
    #: this replica's name in the Lease (default: $POD_NAME, else the hostname, each with a
    #: random suffix so two processes never share one)
    identity: str | None = Field(default=None, min_length=1, max_length=128)


class SloConfig(_Section):
    ttft_s: float = Field(default=2.0, gt=0)
    #: length-aware TTFT SLO: this many more seconds per 1,000 prompt tokens (as the backtest's
    #: --slo-ttft-per-1k-tokens-s); the live policies apply it to the observed mean prompt
    ttft_per_1k_tokens_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    tpot_s: float = Field(default=0.1, gt=0)


class DriftConfig(_Section):
    """The fleet against the step-time model (``llmscale.perf.drift`` explains each number)."""

    #: compare the fleet's mean ITL and TTFT with the model every tick: ratio signals, gauges,
    #: one warning when a ratio leaves 1 +- ``warn`` and one when it is back
    enabled: bool = True
    warn: float = Field(default=0.15, gt=0, lt=1)
    #: adjust the calibration's factors online from the ratios, so the capacity-model policies
    #: plan with the engine the fleet runs (bounded to [1/2, 2] x the profile's)
    adapt: bool = False
    #: the factors follow an EWMA of what each window asks, with this time constant
    time_constant_s: float = Field(default=600.0, gt=0)
    #: most a factor moves in one tick, relative
    max_step: float = Field(default=0.03, gt=0, le=0.5)
    #: a window's ITL is compared only with this many inter-token gaps and finished requests,
    #: its TTFT only with this many first tokens
    min_tokens: int = Field(default=2000, ge=1)
    min_requests: int = Field(default=20, ge=1)
    min_first_tokens: int = Field(default=50, ge=1)


def _guard_overrides_model() -> type[BaseModel]:
    """A model with every GuardConfig field, each optional: only the keys a user sets override."""
    hints = typing.get_type_hints(GuardConfig)
    spec: dict[str, Any] = {}
    for f in fields(GuardConfig):
        kind = hints[f.name]
        if f.name == "schedule":
            # the rules' own checks (llmscale.schedules) run when GuardConfig is built from them
            spec[f.name] = (list[dict[str, Any]], Field(default=None))
            continue
        numeric = kind in (int, float, int | None, float | None)
        limits = GUARD_RANGES.get(f.name, {"ge": 0}) if numeric else {}
        # The field's own type: null only where GuardConfig takes None (a limit switched off), so
        # ``min_replicas: null`` is an error, not a TypeError in the guards. The default (None, never
        # validated) only marks "not set": guard_overrides() dumps what the file set.
        spec[f.name] = (kind, Field(default=None, **limits))  # type: ignore[call-overload]
    model: type[BaseModel] = create_model(
        "GuardOverrides", __config__=ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False), **spec
    )
    return model


if typing.TYPE_CHECKING:
    GuardOverrides = BaseModel
else:
    # Built from GuardConfig's fields at import, so a new guard is configurable without an edit here.
    GuardOverrides = _guard_overrides_model()


class ShadowSpec(PolicySpec):
    #: the shadow policy's own guard overrides, over the top-level ``guards``
    guards: GuardOverrides = Field(default_factory=GuardOverrides)
    #: what the primary policy does in shadow mode: act (apply) or only log (dry-run)
    primary: Literal["apply", "dry-run"] = "apply"

    def guard_overrides(self) -> dict[str, Any]:
        """The shadow's own guard settings the file sets."""
        model: BaseModel = self.guards
        return model.model_dump(exclude_unset=True)


class NodeChecksConfig(_Section):
    """Seed 003 3.1's node checks before a scale-up (``controller/admission.py``)."""

    #: Prometheus that scrapes node-exporter and cAdvisor (default: metrics.prometheus.url)
    prometheus_url: HttpUrl | None = None
    #: the nodes a new replica may land on, each a label-selector body, e.g. 'instance="10.0.0.5:9100"'
    nodes: list[str] = Field(min_length=1)
    #: the range the throttling and disk rates are taken over
    window: str = Field(default="1m", pattern=r"^[1-9][0-9]*(ms|s|m|h)$")
    timeout_s: float = Field(default=5.0, gt=0)
    #: the seed's limits: free memory above, throttled share and disk busy share below
    min_free_memory_bytes: float = Field(default=2048 * 1024 * 1024, ge=0)
    max_cpu_throttled_ratio: float = Field(default=0.1, gt=0, le=1)
    max_disk_io_util: float = Field(default=0.7, gt=0, le=1)

    @field_validator("nodes")
    @classmethod
    def _selectors(cls, v: list[str]) -> list[str]:
        for node in v:
            if not node.strip() or "{" in node or "}" in node:
                raise ValueError(f'{node!r}: give a label-selector body, e.g. instance="10.0.0.5:9100"')
        return v


class MigQuotaConfig(_Section):
    """A tenant's MIG quota before a scale-up, from the tenants file ``llmscale tenants`` reads
    (``controller/admission.py``)."""

    #: the tenants file (its ``pool.gpu`` and ``tenants.<tenant>.profile`` / ``quota``)
    tenants_file: str = Field(min_length=1)
    #: the tenant this controller scales
    tenant: str = Field(min_length=1)


class AdmissionConfig(_Section):
    node_checks: NodeChecksConfig | None = None
    mig_quota: MigQuotaConfig | None = None


class LiveConfig(_Section):
    target: TargetConfig
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    policy: PolicySpec
    shadow: ShadowSpec | None = None
    guards: GuardOverrides = Field(default_factory=GuardOverrides)
    #: seconds between ticks; None (the default): the policy's own cadence, its ``tick_s``
    #: parameter (Knative's 2 s, HPA's 15 s), as the backtest ticks it. A number overrides it for
    #: every policy (a time-scaled run). At least 0.1 s: each tick reads the scale, lists the pods
    #: and scrapes every replica, and a tick of 1 ms would turn the controller into a load test of
    #: the API server
    tick_s: float | None = Field(default=None, ge=0.1)
    #: seconds a tick may run before ``run`` abandons it (recorded as failed, fenced from scaling);
    #: None (the default): the larger of three tick intervals and 30 s
    tick_deadline_s: float | None = Field(default=None, ge=1.0, le=3600.0)
    mode: Mode = Mode.DRY_RUN
    actuator: ActuatorConfig = Field(default_factory=ActuatorConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    decision_log: DecisionLogConfig = Field(default_factory=DecisionLogConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    slo: SloConfig = Field(default_factory=SloConfig)
    drift: DriftConfig = Field(default_factory=DriftConfig)
    leader_election: LeaderElectionConfig = Field(default_factory=LeaderElectionConfig)
    #: checks a scale-up must pass besides the policy and the guards (seed 003 3.1's resource layer)
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)

    def guard_overrides(self) -> dict[str, Any]:
        """The guard settings the file sets (an explicit ``null`` switches a limit off)."""
        model: BaseModel = self.guards
        return model.model_dump(exclude_unset=True)

    @property
    def primary_acts(self) -> bool:
        """Whether the primary policy's decision scales the target."""
        if self.mode is Mode.SHADOW:
            return self.shadow is not None and self.shadow.primary == "apply"
        return self.mode is Mode.APPLY


def load_config(path: str | Path, *, mode: str | None = None) -> LiveConfig:
    """Read and validate ``path``; ``mode`` overrides the file's mode. Raises ConfigError."""
    from llmscale.documents import read_yaml_file

    p = Path(path)
    data = read_yaml_file(p, "the config file", name=p.name)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p.name}: expected a mapping of sections (target, metrics, policy, ...)")
    if mode is not None:
        data = {**data, "mode": mode}
    return parse_config(data, source=p.name)


def check_run_files(cfg: LiveConfig, config_path: Path) -> None:
    """The files ``run`` will read and write, checked before it starts (ConfigError naming each).

    The decision log must be a file it can append to (a FIFO passed the old check, and the run
    then blocked on its first line, deaf to SIGTERM); the state file, when it exists, a regular
    file (its directory is made on the first save); the token files readable. No two of them,
    nor the config file, may be one file: a decision log pointed at the state file interleaved
    ticks with state and lost both.
    """
    from llmscale.edge import (
        MAX_DOCUMENT_BYTES,
        MAX_TOKEN_BYTES,
        check_distinct_paths,
        check_input_file,
        check_output_path,
        input_problem,
    )

    source = config_path.name
    log = None if cfg.decision_log.path == "-" else Path(cfg.decision_log.path)
    state = Path(cfg.state.path) if cfg.state.store == "file" and cfg.state.path else None
    tokens = [
        (where, Path(p))
        for where, p in (
            (
                "actuator.emulate.token_file",
                cfg.actuator.emulate.token_file if cfg.actuator.emulate else None,
            ),
            ("metrics.scrape.emulate_token_file", cfg.metrics.scrape.emulate_token_file),
        )
        if p is not None
    ]
    try:
        if log is not None:
            check_output_path("decision_log.path", log)
        if state is not None:
            problem = input_problem(state, MAX_DOCUMENT_BYTES)
            if problem is not None and problem != "file not found":
                raise ConfigError(f"state.path {state}: {problem}")
        for where, token in tokens:
            try:
                check_input_file(token, MAX_TOKEN_BYTES)
            except ConfigError as e:
                raise ConfigError(f"{where} {e}") from e
        calibration = Path(cfg.target.calibration) if cfg.target.calibration else None
        check_distinct_paths(
            [("decision_log.path", log), ("state.path", state)],
            [("--config", config_path), ("target.calibration", calibration), *tokens],
        )
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from e


def parse_config(data: Mapping[str, Any], *, source: str = "<config>") -> LiveConfig:
    """Validate a config document; errors name ``source`` and the field path."""
    try:
        cfg = LiveConfig.model_validate(dict(data))
    except ValidationError as e:
        raise ConfigError(validation_message(e, source)) from e
    _check_semantics(cfg, source)
    return cfg


def replicas_from_metrics(cfg: LiveConfig) -> bool:
    """True when the actuator publishes its decision (keda, hpa) and counts replicas from the
    metric source: no Kubernetes API is used at all."""
    a = cfg.actuator
    if a.kind == "keda":
        return a.keda.replicas_from == "metrics"
    return a.kind == "hpa" and a.hpa is not None and a.hpa.replicas_from == "metrics"


def _check_semantics(cfg: LiveConfig, source: str) -> None:
    """Cross-field rules pydantic's per-field validation cannot express."""

    def fail(where: str, msg: str) -> ConfigError:
        return ConfigError(f"{source}: {where}: {msg}")

    from llmscale.policies.base import POLICIES, policy_names, validate_params
    from llmscale.policies.params import PolicyParamError

    try:
        guards = GuardConfig().merged(cfg.guard_overrides())
    except ConfigError as e:
        raise fail("guards", str(e)) from e
    if cfg.shadow is not None:
        try:
            guards.merged(cfg.shadow.guard_overrides())
        except ConfigError as e:
            raise fail("shadow.guards", str(e)) from e
    known = policy_names()
    specs: list[tuple[str, PolicySpec]] = [("policy", cfg.policy)]
    if cfg.shadow is not None:
        specs.append(("shadow", cfg.shadow))
    for where, spec in specs:
        if spec.name not in known:
            raise fail(f"{where}.name", f"unknown policy {spec.name!r}; known policies: {', '.join(known)}")
    _check_step_model(cfg, specs, fail)
    # From the declarations alone (policies/params.py): no policy is built here, so a check of the
    # file neither runs a factory nor imports what a policy needs to run.
    for where, spec in specs:
        try:
            merged = validate_params(spec.name, spec.params)
        except PolicyParamError as e:
            raise fail(f"{where}.params.{e.param}", str(e)) from e
        except ConfigError as e:
            raise fail(f"{where}.params", str(e)) from e
        live_check = POLICIES[spec.name].live_check
        problem = live_check(merged) if live_check is not None else None
        if problem is not None:
            raise fail(f"{where}.params", f"{spec.name}: {problem}")
    if cfg.mode is Mode.SHADOW and cfg.shadow is None:
        raise fail("shadow", "required when mode is shadow (the second policy: name, params)")
    nc = cfg.admission.node_checks
    if nc is not None and nc.prometheus_url is None and cfg.metrics.prometheus is None:
        raise fail(
            "admission.node_checks.prometheus_url",
            "required unless metrics.prometheus.url is set (the Prometheus that scrapes node-exporter)",
        )
    if cfg.metrics.source == "prometheus" and cfg.metrics.prometheus is None:
        raise fail("metrics.prometheus", "required when metrics.source is prometheus (at least url)")
    scrape = cfg.metrics.scrape
    if scrape.static_targets is not None and scrape.emulate_url is not None:
        raise fail("metrics.scrape", "give static_targets or emulate_url, not both")
    if cfg.actuator.kind == "emulate" and cfg.actuator.emulate is None:
        raise fail("actuator.emulate", "required when actuator.kind is emulate (url)")
    pods_from_kube = (
        cfg.metrics.source == "scrape" and scrape.static_targets is None and not scrape.emulate_url
    )
    if cfg.actuator.kind == "hpa" and cfg.actuator.hpa is None:
        raise fail("actuator.hpa", "required when actuator.kind is hpa (at least tls: cert_file, key_file)")
    standalone = replicas_from_metrics(cfg)
    if standalone:
        if pods_from_kube:
            raise fail(
                f"actuator.{cfg.actuator.kind}.replicas_from",
                "metrics needs a source that finds replicas without Kubernetes: metrics.source "
                "prometheus, or metrics.scrape with static_targets or emulate_url",
            )
        if cfg.state.store == "configmap":
            raise fail(
                "state.store",
                "configmap needs the Kubernetes API; with replicas_from metrics use file or none",
            )
    kube_actuator = cfg.actuator.kind == "kubernetes" or (
        cfg.actuator.kind in ("keda", "hpa") and not standalone
    )
    if not cfg.target.selector and (kube_actuator or pods_from_kube):
        # An empty selector would count every pod of the namespace as a replica.
        raise fail("target.selector", "required to find the target's pods, e.g. {app: llama}")
    if pods_from_kube and cfg.actuator.kind == "emulate":
        raise fail("metrics.scrape", "with actuator emulate, give emulate_url or static_targets")
    if cfg.state.store == "file" and not cfg.state.path:
        raise fail("state.path", "required when state.store is file")
    if cfg.state.store == "configmap" and cfg.actuator.kind == "emulate":
        raise fail("state.store", "configmap needs a Kubernetes target; use file or none with emulate")
    k = cfg.actuator.kubernetes
    if k.in_cluster and (k.kubeconfig or k.context):
        raise fail("actuator.kubernetes", "in_cluster excludes kubeconfig and context")
    le = cfg.leader_election
    if le.enabled:
        if cfg.actuator.kind != "kubernetes":
            raise fail("leader_election", "needs actuator.kind kubernetes (the Lease lives in its API)")
        if le.renew_deadline_s >= le.lease_duration_s:
            # A leader must stop before a standby may start: equal times would let both act.
            raise fail(
                "leader_election.renew_deadline_s",
                f"{le.renew_deadline_s:g}, must be < lease_duration_s ({le.lease_duration_s:g})",
            )
        if le.retry_period_s >= le.renew_deadline_s:
            raise fail(
                "leader_election.retry_period_s",
                f"{le.retry_period_s:g}, must be < renew_deadline_s ({le.renew_deadline_s:g}): "
                "a leader must get at least one more try to renew before it gives up",
            )
    keda = cfg.actuator.keda
    if keda.max_streams_per_peer > keda.max_streams:
        raise fail(
            "actuator.keda.max_streams_per_peer",
            f"{keda.max_streams_per_peer}, must be <= max_streams ({keda.max_streams})",
        )


def _check_step_model(
    cfg: LiveConfig, specs: list[tuple[str, PolicySpec]], fail: Callable[[str, str], ConfigError]
) -> None:
    """The target's model must run on its GPUs when anything plans with the step-time model.

    ``slo`` and the capacity-model peers price the deployment's iterations with
    :mod:`llmscale.perf`: an unknown model or GPU, a TP the model's heads do not divide, or weights
    that do not fit would otherwise fail every tick after the first metrics arrive (found from
    outside: ``gpu: tpu-v5`` started and then failed each tick with a traceback). Other policies
    read only the engine's metrics, so a model the catalogue does not know is fine for them.
    """
    from llmscale.policies.base import POLICIES

    # The drift monitor also uses the model, but runs without it (it logs why) rather than stop.
    users = [f"{where} {spec.name}" for where, spec in specs if POLICIES[spec.name].needs_step_model]
    if not users:
        return
    t = cfg.target
    from llmscale.perf import get_perf_model, precision_of

    try:
        precision = precision_of(t.dtype, t.kv_cache_dtype, t.quantization)
        get_perf_model(
            t.model, t.gpu, t.tp, calibration=t.calibration, precision=precision
        ).kv_capacity_tokens(max_num_batched_tokens=t.max_num_batched_tokens, max_num_seqs=t.max_num_seqs)
    except ConfigError as e:
        raise fail(
            "target", f"{e} ({'; '.join(users)}: prices the replica with the step-time model of this target)"
        ) from e


def deployment_of(cfg: LiveConfig) -> Deployment:
    """The target's :class:`Deployment`: model, GPU, engine settings, client time-out, SLOs, bounds
    (from ``guards``), published cold start. The one the backtest builds is
    :meth:`llmscale.backtest.runner.BacktestSettings.deployment`."""
    bounds = GuardConfig().merged(
        {k: v for k, v in cfg.guard_overrides().items() if k in ("min_replicas", "max_replicas")}
    )
    t = cfg.target
    cold_s = t.cold_start_s if t.cold_start_s is not None else _published_cold_start_s(t)
    return Deployment(
        min_replicas=bounds.min_replicas,
        max_replicas=bounds.max_replicas,
        initial_replicas=bounds.min_replicas,
        slo_ttft_s=cfg.slo.ttft_s,
        slo_tpot_s=cfg.slo.tpot_s,
        slo_ttft_per_1k_tokens_s=cfg.slo.ttft_per_1k_tokens_s,
        model=t.model,
        gpu=t.gpu,
        tp=t.tp,
        cold_start_s=cold_s,
        calibration=t.calibration,
        max_num_seqs=t.max_num_seqs,
        max_num_batched_tokens=t.max_num_batched_tokens,
        client_timeout_s=t.client_timeout_s,
        dtype=t.dtype,
        quantization=t.quantization,
        kv_cache_dtype=t.kv_cache_dtype,
    )


def _published_cold_start_s(t: TargetConfig) -> float:
    try:
        from llmscale.perf import cold_start

        cs = cold_start(t.model, t.gpu, t.tp)
        cold_s = cs.pending_s + cs.loading_s + cs.warmup_s
    except ConfigError:
        # A model the catalogue does not know still runs; policies that plan ahead use 90 s.
        cold_s = Deployment.cold_start_s
    return float(cold_s)
