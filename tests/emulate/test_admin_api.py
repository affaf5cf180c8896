"""emulate's admin API is off by default and, when on, refuses what a stranger or a browser page
could send: no token, a wrong token, a foreign Origin, a body a form could post, too much at once.

Every refusal is checked against the fleet itself: the scale spec did not move.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from llmscale.emulate import EmulateConfig, EmulatorThread
from llmscale.emulate.admin_guard import MAX_BODY_BYTES
from llmscale.errors import ConfigError

TOKEN = "admin-test-token-6f1c2d9e"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CAP = 2  # replicas one call may add


@pytest.fixture(scope="module")
def fleet() -> Iterator[EmulatorThread]:
    # Replicas added here stay Pending for a long cold start: nothing but the spec changes.
    cfg = EmulateConfig(replicas=1, port=0, admin_api=True, admin_token=TOKEN, admin_max_scale_up=CAP)
    with EmulatorThread(cfg) as t:
        yield t


def spec(fleet: EmulatorThread) -> int:
    n: int = fleet.call(lambda s: s.emu.spec_replicas)
    return n


def scale(fleet: EmulatorThread, body: Any = None, **kw: Any) -> httpx.Response:
    if body is not None:
        kw["json"] = body
    return httpx.post(fleet.base_url + "/admin/scale", timeout=10.0, **kw)


def test_off_by_default() -> None:
    with EmulatorThread(EmulateConfig(replicas=1, port=0)) as t:
        for method, path in (("POST", "/admin/scale"), ("GET", "/admin/replicas"), ("GET", "/admin/targets")):
            resp = httpx.request(method, t.base_url + path, json={"replicas": 3}, headers=AUTH, timeout=10.0)
            assert resp.status_code == 404, (path, resp.text)
            assert "--admin-api" in resp.json()["error"]["message"]
        assert spec(t) == 1


def test_on_without_a_good_token_is_a_configuration_error() -> None:
    for token in (None, "short", f" {TOKEN} "):
        with pytest.raises(ConfigError, match="bearer token"):
            EmulateConfig(admin_api=True, admin_token=token)
    assert TOKEN not in repr(EmulateConfig(admin_api=True, admin_token=TOKEN))  # kept out of logs


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        pytest.param({}, 401, id="no-token"),
        pytest.param({"Authorization": "Bearer wrong-token-0000000000"}, 401, id="wrong-token"),
        pytest.param({"Authorization": f"Basic {TOKEN}"}, 401, id="not-bearer"),
        pytest.param({**AUTH, "Origin": "http://evil.example"}, 403, id="foreign-origin"),
        pytest.param({**AUTH, "Origin": "null"}, 403, id="opaque-origin"),
        pytest.param({**AUTH, "Sec-Fetch-Site": "cross-site"}, 403, id="cross-site-fetch"),
    ],
)
def test_scale_refused(fleet: EmulatorThread, headers: dict[str, str], status: int) -> None:
    before = spec(fleet)
    resp = scale(fleet, {"replicas": before + 1}, headers=headers)
    assert resp.status_code == status, resp.text
    assert set(resp.json()["error"]) >= {"message", "type", "code"}
    if status == 401:
        assert resp.headers["WWW-Authenticate"] == "Bearer"
    assert spec(fleet) == before


@pytest.mark.parametrize("path", ["/admin/replicas", "/admin/targets"])
def test_reads_need_the_token_too(fleet: EmulatorThread, path: str) -> None:
    assert httpx.get(fleet.base_url + path, timeout=10.0).status_code == 401
    assert httpx.get(fleet.base_url + path, headers=AUTH, timeout=10.0).status_code == 200


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
def test_bodies_a_browser_may_send_cross_site_are_refused(fleet: EmulatorThread, content_type: str) -> None:
    """A form or a fetch with a "simple" content type needs no CORS preflight, so it could be sent
    from any page: refused whatever it holds, even with the token."""
    before = spec(fleet)
    body = f'{{"replicas": {before + 1}}}'
    resp = scale(fleet, content=body, headers={**AUTH, "Content-Type": content_type})
    assert resp.status_code == 415, resp.text
    assert spec(fleet) == before


def test_more_than_the_cap_per_call_is_refused(fleet: EmulatorThread) -> None:
    before = spec(fleet)
    resp = scale(fleet, {"replicas": before + CAP + 1}, headers=AUTH)
    assert resp.status_code == 400
    assert f"at most {CAP}" in resp.json()["error"]["message"]
    assert spec(fleet) == before


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_oversized_bodies_are_refused(fleet: EmulatorThread, chunked: bool) -> None:
    before = spec(fleet)
    body = ('{"replicas": 1, "pad": "' + "x" * (2 * MAX_BODY_BYTES) + '"}').encode()
    content: Any = iter([body[:100], body[100:]]) if chunked else body  # an iterator goes out chunked
    resp = scale(fleet, content=content, headers={**AUTH, "Content-Type": "application/json"})
    assert resp.status_code == 413, resp.text
    assert spec(fleet) == before


def test_the_happy_path_scales_and_is_bounded_by_the_cap(fleet: EmulatorThread) -> None:
    before = spec(fleet)
    own_origin = fleet.base_url  # a page served by the front door itself would be same-origin
    resp = scale(fleet, {"replicas": before + CAP}, headers={**AUTH, "Origin": own_origin})
    assert resp.status_code == 200, resp.text
    assert resp.json()["spec_replicas"] == before + CAP == spec(fleet)
    down = scale(fleet, {"replicas": 1}, headers=AUTH)  # shrinking is not capped
    assert down.status_code == 200 and spec(fleet) == 1


def test_cli_refuses_the_admin_api_without_a_token() -> None:
    env = {k: v for k, v in os.environ.items() if k != "LLMSCALE_EMULATE_ADMIN_TOKEN"}
    proc = subprocess.run(
        [sys.executable, "-m", "llmscale.cli", "emulate", "--port", "0", "--admin-api", "--max-seconds", "5"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "LLMSCALE_EMULATE_ADMIN_TOKEN" in proc.stderr and "Traceback" not in proc.stderr
