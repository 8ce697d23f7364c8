# Sourced by scripts/check and scripts/test: creates .venv (once) and installs anydevice with
# every backend distribution in this repository. Re-installs only when a pyproject.toml changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ANYDEVICE_VENV:-$ROOT/.venv}"
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating virtual environment $VENV" >&2
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
stamp="$VENV/.anydevice-installed"
want="$(cat "$ROOT"/pyproject.toml "$ROOT"/backends/*/pyproject.toml 2>/dev/null | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "installing anydevice and its backends into $VENV" >&2
  pkgs=(-e "$ROOT[test]")
  for b in "$ROOT"/backends/*/; do
    [ -f "$b/pyproject.toml" ] || continue
    case "$(basename "$b")" in
      opencl) pkgs+=(-e "${b%/}[pocl]") ;;
      *) pkgs+=(-e "${b%/}") ;;
    esac
  done
  "$VENV/bin/python" -m pip install -q "${pkgs[@]}"
  echo "$want" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
