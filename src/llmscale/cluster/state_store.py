"""Where the live controller keeps its small JSON state across restarts.

The state is the last decision and the cooldown/stabilization clocks. Without it
a restarted controller forgets that it scaled up ten seconds ago and may scale
again (or down) at once: a restart must not cost an extra scale action within
the cooldown.

* :class:`ConfigMapStateStore` keeps it in the controller's own ConfigMap
  (``llmscale-state-<target>``, key ``state.json``) in the target's namespace.
  The Role then needs only ``get`` and ``update`` on that one ConfigMap by name,
  besides ``get``/``update`` on the target's ``scale`` subresource. (It used to
  be an annotation on the target, which needed ``patch`` on the Deployment itself:
  RBAC cannot scope a verb to a field, so that also let the controller rewrite the
  pod template, e.g. its image.) ``create`` cannot be scoped by name (the object
  has no name when the request is authorised), so deploy/ ships the ConfigMap and
  the store creates it only where the Role allows that.
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

from llmscale.cluster.kubernetes import ErrorReason, KubeActuationError
from llmscale.errors import ActuationError, ConfigError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["STATE_KEY", "ConfigMapStateStore", "FileStateStore", "StateStore", "state_configmap_name"]

log = logging.getLogger(__name__)

#: the ConfigMap's data key holding the state document
STATE_KEY = "state.json"

#: a ConfigMap holds at most 1 MiB; the state is a few hundred bytes, so anything near this is a
#: bug upstream, not something to store
_MAX_STATE_BYTES = 64 * 1024


def state_configmap_name(target_name: str) -> str:
    """The state ConfigMap of the controller scaling ``target_name``: ``llmscale-state-<name>``."""
    return f"llmscale-state-{target_name}"


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
    from llmscale.documents import loads_json

    try:
        # strict: a duplicate key or thousands of nested brackets is no state we wrote
        value = loads_json(text, where)
    except ConfigError as e:
        log.warning("ignoring unreadable controller state: %s", e)
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
        from llmscale.edge import InputFileError, read_input_text

        try:
            # bounded like what save() writes; a binary file or a FIFO is refused, not read
            text = read_input_text(self.path, _MAX_STATE_BYTES, what="controller state")
        except InputFileError as e:
            if e.problem == "file not found":
                return None
            log.warning("cannot read controller state %s", e)
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


class ConfigMapStateStore:
    """State in the ``state.json`` key of the controller's own ConfigMap ``namespace/name``.

    ``load`` is a ``get`` (a missing ConfigMap is "no state yet"); ``save`` an ``update``
    (PUT) of the whole ConfigMap without a resourceVersion: the controller is its only
    writer, so last-writer-wins is the intent, and no read is needed before a write. A
    ConfigMap that does not exist yet is created (404 on the update), which needs ``create``
    on configmaps; deploy/ ships the ConfigMap so the shipped Role needs none.
    ``target`` (``namespace/name``) only labels the ConfigMap it creates.
    """

    def __init__(
        self,
        api_client: ApiClient,
        namespace: str,
        name: str,
        *,
        target: str = "",
        request_timeout_s: float = 10.0,
    ) -> None:
        from kubernetes import client

        self.namespace = namespace
        self.name = name
        self.target = target
        self._core = client.CoreV1Api(api_client)
        self._timeout_s = request_timeout_s

    def __str__(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    def _fail(self, verb: str, e: Exception) -> KubeActuationError:
        from kubernetes.client.exceptions import ApiException

        status = e.status if isinstance(e, ApiException) else None
        hint = (
            f"; the ServiceAccount needs '{verb}' on configmaps named {self.name} "
            "(deploy/rbac/role.yaml; deploy/rbac/state-configmap.yaml creates it)"
            if status == 403
            else ""
        )
        reason: ErrorReason = (
            "forbidden" if status == 403 else "server_error" if (status or 500) >= 500 else "other"
        )
        detail = _api_message(e)
        return KubeActuationError(
            f"cannot {verb} the controller state in {self}: {detail}{hint}", reason=reason
        )

    def load(self) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            cm = self._core.read_namespaced_config_map(
                self.name, self.namespace, _request_timeout=self._timeout_s
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise self._fail("get", e) from e
        except (HTTPError, OSError) as e:
            raise self._fail("get", e) from e
        text = (cm.data or {}).get(STATE_KEY)
        return None if text is None else _decode(text, f"{self} key {STATE_KEY}")

    def save(self, state: dict[str, Any]) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        labels = {"app.kubernetes.io/name": "llmscale", "app.kubernetes.io/component": "state"}
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace, labels=labels),
            data={STATE_KEY: _encode(state)},
        )
        try:
            self._core.replace_namespaced_config_map(
                self.name, self.namespace, body, _request_timeout=self._timeout_s
            )
            return
        except ApiException as e:
            if e.status != 404:
                raise self._fail("update", e) from e
        except (HTTPError, OSError) as e:
            raise self._fail("update", e) from e
        try:
            self._core.create_namespaced_config_map(self.namespace, body, _request_timeout=self._timeout_s)
        except (ApiException, HTTPError, OSError) as e:
            raise self._fail("create", e) from e


def _api_message(e: Exception) -> str:
    """The API server's own message of an ApiException (its JSON body), else the exception."""
    body = getattr(e, "body", None)
    if isinstance(body, str | bytes):
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and doc.get("message"):
            return f"{doc.get('code', getattr(e, 'status', ''))} {doc['message']}"
    return f"{type(e).__name__}: {e}"
