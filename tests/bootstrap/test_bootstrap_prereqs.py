"""scripts/prereqs.sh: bootstrap's check of the Debian prerequisites, run with a PATH that lacks them.

Each case runs the real shell function with a PATH holding only what the case allows, and asserts
the Debian package it names and the install command it prints (the issue's bare-Debian-12 set-up:
python3-venv, gcc, python3-dev).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PREREQS = REPO / "scripts" / "prereqs.sh"
BASH = "/bin/bash"


def _run(func: str, py: str, path_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``func PY`` from prereqs.sh with PATH = path_dir only (no gcc unless the case puts one there)."""
    environ = {"PATH": str(path_dir), "HOME": str(path_dir), **env}
    return subprocess.run(
        [BASH, "-c", f'. "{PREREQS}"; {func} "$PY"'],
        env={**environ, "PY": py},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _lines(out: str) -> dict[str, str]:
    return dict(line.split("|", 1) for line in out.splitlines() if line)


def _exe(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(0o755)
    return path


def _python(tmp_path: Path, *, include: Path | None = None, ensurepip: bool = True) -> Path:
    """A `python3` on PATH that is this interpreter, with sysconfig's include dir or ensurepip changed.

    A sitecustomize on PYTHONPATH does it, so the shell function sees exactly what a Debian python3
    without python3-dev (no Python.h) or without python3-venv (no ensurepip) would show it.
    """
    shadow = tmp_path / "shadow"
    shadow.mkdir(exist_ok=True)
    custom = ["import sysconfig"]
    if include is not None:
        custom += [
            "_paths = sysconfig.get_paths",
            f"sysconfig.get_paths = lambda *a, **k: {{**_paths(*a, **k), 'include': {str(include)!r}}}",
        ]
    (shadow / "sitecustomize.py").write_text("\n".join(custom) + "\n")
    if not ensurepip:
        (shadow / "ensurepip.py").write_text("raise ImportError('ensurepip is not in Debian python3')\n")
    return _exe(tmp_path / "python3", f'PYTHONPATH="{shadow}" exec "{sys.executable}" "$@"')


def _headers(tmp_path: Path) -> Path:
    include = tmp_path / "include"
    include.mkdir(exist_ok=True)
    (include / "Python.h").write_text("/* stand-in */\n")
    return include


def test_no_compiler_on_path_names_gcc(tmp_path: Path) -> None:
    # sysconfig's CC is "gcc" (Debian) or another compiler; neither is in an empty PATH.
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    found = _lines(_run("missing_prereqs", sys.executable, tmp_path).stdout)
    assert "gcc" in found, found
    assert f"no C compiler '{cc}' on PATH" in found["gcc"]
    assert "python3-venv" not in found  # the test's interpreter can make a venv


def test_compiler_on_path_is_not_reported(tmp_path: Path) -> None:
    cc = Path((sysconfig.get_config_var("CC") or "cc").split()[0]).name
    _exe(tmp_path / cc, "exit 0")
    assert "gcc" not in _lines(_run("missing_prereqs", sys.executable, tmp_path).stdout)


def test_pure_python_needs_no_compiler_or_headers(tmp_path: Path) -> None:
    found = _lines(_run("missing_prereqs", sys.executable, tmp_path, LLMSCALE_PURE_PYTHON="1").stdout)
    assert found == {}


def test_missing_headers_name_python3_dev(tmp_path: Path) -> None:
    py = _python(tmp_path, include=tmp_path / "no-include")
    found = _lines(_run("missing_prereqs", str(py), tmp_path).stdout)
    assert found["python3-dev"].startswith(f"no {tmp_path / 'no-include'}/Python.h (the headers")


def test_headers_present_are_not_reported(tmp_path: Path) -> None:
    py = _python(tmp_path, include=_headers(tmp_path))
    assert "python3-dev" not in _lines(_run("missing_prereqs", str(py), tmp_path).stdout)


def test_python_without_ensurepip_names_python3_venv(tmp_path: Path) -> None:
    # Debian's python3 without python3-venv has no ensurepip.
    py = _python(tmp_path, ensurepip=False)
    found = _lines(_run("missing_prereqs", str(py), tmp_path, LLMSCALE_PURE_PYTHON="1").stdout)
    assert found == {"python3-venv": f"{py} cannot create a virtual environment (no ensurepip module)"}


def test_old_python_is_refused(tmp_path: Path) -> None:
    py = _exe(tmp_path / "python3", 'case "$1" in --version) echo "Python 3.9.2";; *) exit 1;; esac')
    found = _lines(_run("missing_prereqs", str(py), tmp_path).stdout)
    assert list(found) == ["python3"]
    assert "Python 3.9.2, llmscale needs Python >= 3.11" in found["python3"]


def test_python_that_does_not_run(tmp_path: Path) -> None:
    # A python3 on PATH that cannot start (a pyenv shim without pyenv, a broken symlink target).
    py = _exe(tmp_path / "python3", "exit 127")
    found = _lines(_run("missing_prereqs", str(py), tmp_path).stdout)
    assert found == {
        "python3": f"{py} is an interpreter that does not run, llmscale needs Python >= 3.11 "
        "(Debian 12's python3 is 3.11)"
    }


def test_no_python_at_all(tmp_path: Path) -> None:
    found = _lines(_run("missing_prereqs", "python3", tmp_path).stdout)
    assert found == {"python3": "no Python interpreter 'python3' on PATH (llmscale needs Python >= 3.11)"}


def test_ensure_without_install_names_each_package_and_the_command(tmp_path: Path) -> None:
    # LLMSCALE_BOOTSTRAP_INSTALL=no: report only, as for a user without root or sudo.
    py = _python(tmp_path, include=_headers(tmp_path), ensurepip=False)
    done = _run("ensure_prereqs", str(py), tmp_path, LLMSCALE_BOOTSTRAP_INSTALL="no")
    assert done.returncode == 1
    assert "bootstrap: missing prerequisites:" in done.stderr
    assert "  python3-venv: " in done.stderr
    assert "  gcc: no C compiler" in done.stderr
    assert "apt-get update && apt-get install -y python3-venv gcc" in done.stderr
    assert "LLMSCALE_PURE_PYTHON=1" in done.stderr


def test_ensure_without_root_or_sudo_reports(tmp_path: Path) -> None:
    # apt-get is there, but `id -u` says 1000 and no sudo is on PATH: nothing may run apt-get; the
    # function names the packages and fails.
    _exe(tmp_path / "apt-get", "echo apt-get must not run >&2; exit 3")
    _exe(tmp_path / "id", "echo 1000")
    py = _python(tmp_path, include=_headers(tmp_path))
    done = _run("ensure_prereqs", str(py), tmp_path)
    assert done.returncode == 1
    assert "apt-get must not run" not in done.stderr
    assert "  gcc: no C compiler" in done.stderr
    assert "apt-get update && apt-get install -y gcc" in done.stderr


def test_ensure_installs_with_apt_get_as_root(tmp_path: Path) -> None:
    # A stand-in apt-get (first on PATH) records its arguments and "installs" the compiler; as root
    # the function calls it, checks again and finds nothing missing.
    if os.geteuid() != 0:
        pytest.skip("not root: the install path runs only as root or with passwordless sudo")
    log = tmp_path / "apt.log"
    cc = Path((sysconfig.get_config_var("CC") or "cc").split()[0]).name
    _exe(
        tmp_path / "apt-get",
        f'echo "$*" >> "{log}"; case "$1" in install) printf "#!/bin/bash\\nexit 0\\n" > "{tmp_path}/{cc}"; '
        f'/bin/chmod +x "{tmp_path}/{cc}";; esac',
    )
    _exe(tmp_path / "id", 'exec /usr/bin/id "$@"')
    py = _python(tmp_path, include=_headers(tmp_path))
    done = _run("ensure_prereqs", str(py), tmp_path)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == ["update -q", "install -y -q --no-install-recommends gcc"]
    assert "installing Debian packages: gcc" in done.stderr
