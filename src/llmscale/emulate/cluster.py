"""``EmulateCluster``: the :class:`~llmscale.cluster.base.Cluster` protocol over emulate's admin API,
and :class:`~llmscale.cluster.base.StandbyCapable` over its replicas' vLLM sleep mode."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from llmscale.emulate.config import ADMIN_TOKEN_ENV
from llmscale.errors import ActuationError
from llmscale.types import Phase, ReplicaView

__all__ = ["EmulateCluster", "Wake"]

_PHASES = {p.label: p for p in Phase}
#: phases of a replica in service or on its way (what the spec counts)
_ACTIVE = frozenset(p.label for p in (Phase.PENDING, Phase.LOADING, Phase.WARMUP, Phase.READY))
_STARTING = frozenset(p.label for p in (Phase.PENDING, Phase.LOADING, Phase.WARMUP))


@dataclass(frozen=True, slots=True)
class Wake:
    """One replica woken through its ``POST /wake_up``: the wall time the call took and the wake time
    the replica reported (``x-llmscale-wake-s``, simulated seconds; None when it sent none)."""

    replica: str
    wall_s: float
    reported_s: float | None


class EmulateCluster:
    """Scale and list the replicas of a running ``llmscale emulate`` at ``base_url``.

    Replica times (``since_s``, ``created_s``) are on the emulator's own time
    line (seconds since it started), which is the one its ``now_s`` reports;
    ``scale_to`` acts at the emulator's present, whatever ``now_s`` says.
    Every failure (unreachable, non-2xx, malformed answer) is an ActuationError.
    ``token`` is the admin API's bearer token (see :func:`llmscale.emulate.config.admin_token`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 5.0,
        token: str | None = None,
        sleep_timeout_s: float = 60.0,
    ) -> None:
        """``sleep_timeout_s``: the longest one replica's ``/sleep`` or ``/wake_up`` may take (a sleep
        waits for the replica's requests to finish; a wake, for the weights to come back)."""
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, headers=headers)
        self._has_token = bool(token)
        self._replica_http = httpx.Client(timeout=sleep_timeout_s)  # the replicas' own ports: no token
        host = httpx.URL(self.base_url).host
        self._host = f"[{host}]" if ":" in host else host  # an IPv6 front door's replicas
        #: the pool asked for by the last set_standby (None: never asked; a shrink then deletes)
        self.standby_target: int | None = None
        #: every wake through /wake_up, oldest first
        self.wakes: list[Wake] = []

    def close(self) -> None:
        self._http.close()
        self._replica_http.close()

    def __enter__(self) -> EmulateCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            resp = self._http.request(method, path, json=body)
        except httpx.HTTPError as e:
            raise ActuationError(f"emulate admin API {method} {self.base_url}{path}: {e}") from e
        if resp.status_code >= 300:
            hint = ""
            if resp.status_code == 401:
                hint = (
                    f" (no token sent: set {ADMIN_TOKEN_ENV} or the config's token file)"
                    if not self._has_token
                    else " (the token is not the one emulate was started with)"
                )
            raise ActuationError(
                f"emulate admin API {method} {path} answered {resp.status_code}: {resp.text[:300]}{hint}"
            )
        try:
            return resp.json()
        except ValueError as e:
            raise ActuationError(f"emulate admin API {method} {path}: the answer is not JSON") from e

    def document(self) -> dict[str, Any]:
        """The raw ``/admin/replicas`` document (spec, now_s, replicas with ports)."""
        doc = self._call("GET", "/admin/replicas")
        if not isinstance(doc, dict) or not isinstance(doc.get("replicas"), list):
            raise ActuationError(f"emulate admin API: unexpected document {str(doc)[:200]}")
        return doc

    @property
    def spec_replicas(self) -> int:
        return int(self.document()["spec_replicas"])

    def scale_to(self, n: int, now_s: float, *, drain_until_idle: bool = False) -> None:
        """Ask for ``n`` replicas in service. With emulate's sleep mode, a scale-up first wakes sleeping
        replicas through their ``/wake_up`` (1.6 s instead of a 108 s cold start for Llama-3-8B on an
        H100) and a scale-down puts ready replicas to sleep through their ``/sleep`` while the pool is
        short of :attr:`standby_target`; the admin API's scale does the rest."""
        if n < 0:
            raise ActuationError(f"scale_to({n}): replicas must be >= 0")
        doc = self.document()
        if "standby_replicas" in doc:
            self._through_the_pool(n, doc["replicas"])
        self._call("POST", "/admin/scale", {"replicas": n, "drain_until_idle": drain_until_idle})

    # -- StandbyCapable (emulate --enable-sleep-mode) ------------------------------------------

    @property
    def standby_replicas(self) -> int:
        """Replicas asleep now (phase ``sleeping`` in ``/admin/replicas``)."""
        return sum(1 for r in self.document()["replicas"] if r.get("phase") == Phase.SLEEPING.label)

    def set_standby(self, n: int, now_s: float) -> None:
        """Keep ``n`` replicas asleep beside the spec; pre: n >= 0. Raises ActuationError.

        A surplus is deleted and a shortfall started, each replica put to sleep once it serves
        (``POST /admin/standby``: creating and deleting replicas is the orchestrator's); replicas
        leaving service on a later scale-down fill the pool first (:meth:`scale_to`), and a
        scale-up wakes them. Acts at emulate's present, whatever ``now_s`` says.
        """
        if n < 0:
            raise ActuationError(f"set_standby({n}): replicas must be >= 0")
        doc = self.document()
        if "standby_replicas" not in doc:
            raise ActuationError(
                f"emulate at {self.base_url} runs without sleep mode: start it with --enable-sleep-mode"
            )
        self.standby_target = n
        if doc.get("standby_target") != n or doc["standby_replicas"] + doc["standby_starting"] != n:
            self._call("POST", "/admin/standby", {"replicas": n})

    def _through_the_pool(self, n: int, replicas: list[dict[str, Any]]) -> None:
        """The share of a scale to ``n`` that sleeping and waking carry (see :meth:`scale_to`)."""
        active = [r for r in replicas if r.get("phase") in _ACTIVE]
        sleeping = [r for r in replicas if r.get("phase") == Phase.SLEEPING.label]
        if n > len(active) and sleeping:
            self._each("/wake_up", sleeping[: n - len(active)])
        elif n < len(active) and self.standby_target is not None:
            # Replicas not serving yet go first (the admin scale cancels them), as on any shrink.
            starting = sum(1 for r in active if r.get("phase") in _STARTING)
            ready = sorted(
                (r for r in active if r.get("phase") == Phase.READY.label),
                key=lambda r: -float(r.get("created_s", 0.0)),
            )
            k = min(len(active) - n - starting, self.standby_target - len(sleeping), len(ready))
            if k > 0:
                self._each("/sleep?level=1", ready[:k])
                # Replicas still starting for the pool give their places to these (deleted now).
                self._call("POST", "/admin/standby", {"replicas": self.standby_target})

    def _each(self, path: str, replicas: list[dict[str, Any]]) -> None:
        """POST ``path`` on each replica's own port, concurrently (a wake takes seconds); every
        failure is an ActuationError naming the replica."""

        def one(r: dict[str, Any]) -> Wake:
            url = f"http://{self._host}:{r.get('port')}{path}"
            t0 = time.monotonic()
            try:
                resp = self._replica_http.post(url)
            except httpx.HTTPError as e:
                raise ActuationError(f"replica {r.get('name')}: POST {url}: {e}") from e
            if resp.status_code != 200:
                raise ActuationError(
                    f"replica {r.get('name')}: POST {url} answered {resp.status_code}: {resp.text[:300]}"
                )
            took_s = time.monotonic() - t0
            reported = resp.headers.get("x-llmscale-wake-s")
            return Wake(str(r.get("name")), took_s, None if reported is None else float(reported))

        with ThreadPoolExecutor(max_workers=min(8, len(replicas))) as pool:
            done = list(pool.map(one, replicas))
        if path.startswith("/wake_up"):
            self.wakes.extend(done)

    def replicas_view(self) -> tuple[ReplicaView, ...]:
        views = []
        for r in self.document()["replicas"]:
            try:
                views.append(
                    ReplicaView(
                        str(r["name"]), _PHASES[r["phase"]], float(r["since_s"]), float(r["created_s"])
                    )
                )
            except (KeyError, TypeError, ValueError) as e:
                raise ActuationError(f"emulate admin API: malformed replica entry {r!r}") from e
        return tuple(views)
