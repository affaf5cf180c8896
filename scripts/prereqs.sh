# Debian prerequisites of scripts/bootstrap.sh, sourced by it (and by tests/scripts/test_prereqs.py).
#
# On a bare Debian 12 the venv and the compiled simulator need three things that `python3` alone
# does not bring: python3-venv (Debian's python3 has no ensurepip, so `python3 -m venv` fails),
# a C compiler (mypyc's C goes through sysconfig's CC, `gcc` on Debian's python3) and python3-dev
# (Python.h). The last two only matter when the simulator is compiled (LLMSCALE_PURE_PYTHON unset).
#
# missing_prereqs PY   prints one line per missing prerequisite: "<debian package>|<what is missing>"
# ensure_prereqs PY    installs the missing packages with apt-get (as root, or through sudo) unless
#                      LLMSCALE_BOOTSTRAP_INSTALL=no; otherwise names each one and the command that
#                      installs it, and returns 1.

missing_prereqs() {
  local py="$1" cc include version
  if ! command -v "$py" >/dev/null 2>&1; then
    # Nothing else can be checked without an interpreter.
    echo "python3|no Python interpreter '$py' on PATH (llmscale needs Python >= 3.11)"
    return 0
  fi
  if ! "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
    version="$("$py" --version 2>&1)" || true
    version="${version%%$'\n'*}"
    echo "python3|$py is ${version:-an interpreter that does not run}, llmscale needs Python >= 3.11 (Debian 12's python3 is 3.11)"
    return 0
  fi
  if ! "$py" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    echo "python3-venv|$py cannot create a virtual environment (no ensurepip module)"
  fi
  if [ "${LLMSCALE_PURE_PYTHON:-0}" != "1" ]; then
    # setuptools compiles with $CC when set, else with the compiler Python was built with.
    cc="${CC:-$("$py" -c 'import sysconfig; print((sysconfig.get_config_var("CC") or "cc").split()[0])')}"
    cc="${cc%% *}"
    if ! command -v "$cc" >/dev/null 2>&1; then
      echo "gcc|no C compiler '$cc' on PATH (mypyc compiles the simulator to C)"
    fi
    include="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
    if [ ! -f "$include/Python.h" ]; then
      echo "python3-dev|no $include/Python.h (the headers the compiled simulator builds against)"
    fi
  fi
}

ensure_prereqs() {
  local py="$1" lines pkgs="" line sudo=""
  lines="$(missing_prereqs "$py")"
  [ -z "$lines" ] && return 0
  while IFS= read -r line; do
    pkgs="$pkgs ${line%%|*}"
  done <<<"$lines"
  pkgs="${pkgs# }"
  if [ "${LLMSCALE_BOOTSTRAP_INSTALL:-yes}" != "no" ] && command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" != "0" ]; then
      command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && sudo="sudo"
    fi
    if [ "$(id -u)" = "0" ] || [ -n "$sudo" ]; then
      echo "bootstrap: installing Debian packages: $pkgs" >&2
      # shellcheck disable=SC2086  # one word per package
      if $sudo apt-get update -q >&2 \
        && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends $pkgs >&2; then
        lines="$(missing_prereqs "$py")"
        [ -z "$lines" ] && return 0
      fi
    fi
  fi
  echo "bootstrap: missing prerequisites:" >&2
  while IFS= read -r line; do
    echo "  ${line%%|*}: ${line#*|}" >&2
  done <<<"$lines"
  echo "install them as root with:" >&2
  echo "  apt-get update && apt-get install -y $pkgs" >&2
  case " $pkgs " in
    *" gcc "* | *" python3-dev "*)
      echo "(or set LLMSCALE_PURE_PYTHON=1 to run the simulator uncompiled: no C compiler or headers needed)" >&2
      ;;
  esac
  return 1
}
