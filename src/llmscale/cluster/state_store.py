"""Where the live controller keeps its small JSON state across restarts.

The state is the last decision and the cooldown/stabilization clocks. Without it
a restarted controller forgets that it scaled up ten seconds ago and may scale
again (or down) at once: a restart must not cost an extra scale action within
the cooldown.

* :class:`AnnotationStateStore` keeps it in the ``llmscale.io/state`` annotation
  of the target Deployment/StatefulSet: it lives and dies with the target and
  needs no extra object. Only a pod template change rolls the pods, so the
  annotation never restarts a replica (a Deployment does bump its generation and
  copies the annotation onto its ReplicaSet; see test_kube_state_store.py).
* :class:`FileStateStore` writes a local file atomically, for ``emulate`` and
  dry-run setups that have no API server.

``load()`` returns None for "no state yet" *and* for a state that cannot be read
(hand-edited, truncated): the controller then starts fresh, exactly as on its
first start, which is better than refusing to start. A failed ``save()`` raises,
so the caller can count it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from llmscale.cluster.kubernetes import ErrorReason, KubeActuationError, KubeScaleTarget
from llmscale.errors import ActuationError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["STATE_ANNOTATION", "AnnotationStateStore", "FileStateStore", "StateStore"]

log = logging.getLogger(__name__)

STATE_ANNOTATION = "llmscale.io/state"

#: annotations of one object share a 256 KiB limit; the state is a few hundred bytes,
#: so anything near this is a bug upstream, not something to store
_MAX_STATE_BYTES = 64 * 1024


class StateStore(Protocol):
    """Persists one JSON object (a dict of JSON values)."""

    def load(self) -> dict[str, Any] | None:
        """The last saved state, or None when there is none or it cannot be parsed."""
        ...

    def save(self, state: dict[str, Any]) -> None:
        """Replace the stored state; pre: ``state`` is JSON-serialisable. Raises ActuationError."""
        ...


def _encode(state: dict[str, Any]) -> str:
    # sort_keys: the same state always gives the same text, so an unchanged state
    # makes an idempotent write (and a readable diff when someone inspects it).
    text = json.dumps(state, sort_keys=True, separators=(",", ":"), allow_nan=False)
    if len(text.encode()) > _MAX_STATE_BYTES:
        raise ActuationError(f"controller state is {len(text)} bytes, over the {_MAX_STATE_BYTES} byte limit")
    return text


def _decode(text: str, where: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError as e:
        log.warning("ignoring unreadable controller state in %s: %s", where, e)
        return None
    if not isinstance(value, dict):
        log.warning("ignoring controller state in %s: a JSON object was expected, got %s", where, type(value))
        return None
    return value


class FileStateStore:
    """State in a local JSON file, replaced atomically (write a temp file, fsync, rename).

    A crash mid-save leaves either the old or the new file, never a torn one. The
    constructor touches nothing; the parent directory is created on the first save.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, Any] | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("cannot read controller state %s: %s", self.path, e)
            return None
        return _decode(text, str(self.path))

    def save(self, state: dict[str, Any]) -> None:
        text = _encode(state)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Same directory as the target: os.replace is atomic only within one file system.
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            _fsync_dir(self.path.parent)
        except OSError as e:
            raise ActuationError(f"cannot write controller state to {self.path}: {e}") from e


def _fsync_dir(path: Path) -> None:
    """Make the rename itself durable; not every platform can open a directory."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class AnnotationStateStore:
    """State in the ``llmscale.io/state`` annotation of the scale target.

    Saved with a JSON merge patch that touches only that one annotation, so it never
    conflicts with, or overwrites, a concurrent change to the spec or other metadata.
    Needs ``get`` and ``patch`` on the target itself (see deploy/rbac/role.yaml).
    """

    def __init__(
        self, api_client: ApiClient, target: KubeScaleTarget, *, request_timeout_s: float = 10.0
    ) -> None:
        from kubernetes import client

        self.target = target
        self._apps = client.AppsV1Api(api_client)
        self._timeout_s = request_timeout_s

    def _fail(self, verb: str, e: Exception) -> KubeActuationError:
        from kubernetes.client.exceptions import ApiException

        t = self.target
        status = e.status if isinstance(e, ApiException) else None
        hint = (
            f"; the ServiceAccount needs '{verb}' on {t.resource} named {t.name} (deploy/rbac/role.yaml)"
            if status == 403
            else ""
        )
        reason: ErrorReason = (
            "forbidden" if status == 403 else "server_error" if (status or 500) >= 500 else "other"
        )
        return KubeActuationError(f"cannot {verb} state annotation on {t}: {e}{hint}", reason=reason)

    def load(self) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        t = self.target
        read = (
            self._apps.read_namespaced_deployment
            if t.kind == "Deployment"
            else self._apps.read_namespaced_stateful_set
        )
        try:
            obj = read(t.name, t.namespace, _request_timeout=self._timeout_s)
        except (ApiException, HTTPError, OSError) as e:
            raise self._fail("get", e) from e
        annotations = (obj.metadata.annotations if obj.metadata is not None else None) or {}
        text = annotations.get(STATE_ANNOTATION)
        return None if text is None else _decode(text, f"{t} annotation {STATE_ANNOTATION}")

    def save(self, state: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        t = self.target
        body = {"metadata": {"annotations": {STATE_ANNOTATION: _encode(state)}}}
        patch = (
            self._apps.patch_namespaced_deployment
            if t.kind == "Deployment"
            else self._apps.patch_namespaced_stateful_set
        )
        try:
            patch(
                t.name,
                t.namespace,
                body,
                _request_timeout=self._timeout_s,
                _content_type="application/merge-patch+json",
            )
        except (ApiException, HTTPError, OSError) as e:
            raise self._fail("patch", e) from e
