"""``EmulateCluster``: the :class:`~llmscale.cluster.base.Cluster` protocol over emulate's admin API."""

from __future__ import annotations

from typing import Any

import httpx

from llmscale.emulate.config import ADMIN_TOKEN_ENV
from llmscale.errors import ActuationError
from llmscale.types import Phase, ReplicaView

__all__ = ["EmulateCluster"]

_PHASES = {p.label: p for p in Phase}


class EmulateCluster:
    """Scale and list the replicas of a running ``llmscale emulate`` at ``base_url``.

    Replica times (``since_s``, ``created_s``) are on the emulator's own time
    line (seconds since it started), which is the one its ``now_s`` reports;
    ``scale_to`` acts at the emulator's present, whatever ``now_s`` says.
    Every failure (unreachable, non-2xx, malformed answer) is an ActuationError.
    ``token`` is the admin API's bearer token (see :func:`llmscale.emulate.config.admin_token`).
    """

    def __init__(self, base_url: str, *, timeout_s: float = 5.0, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, headers=headers)
        self._has_token = bool(token)

    def close(self) -> None:
        self._http.close()

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
        if n < 0:
            raise ActuationError(f"scale_to({n}): replicas must be >= 0")
        self._call("POST", "/admin/scale", {"replicas": n, "drain_until_idle": drain_until_idle})

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
