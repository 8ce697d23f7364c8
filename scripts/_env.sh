# Sourced by scripts/check and scripts/test: creates .venv (once), installs anydevice with every
# backend distribution in this repository (again only when a pyproject.toml, setup.py or a C source
# changed: the install builds the cpu backend's C kernels, the OpenCL launch and the dispatcher's C hit), and makes sure OpenCL has a
# working device (see opencl_setup below). Prints a few progress lines.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ANYDEVICE_VENV:-$ROOT/.venv}"
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
say() { echo "setup: $*" >&2; }
# pip -q, without setuptools' notice that every editable install prints
pip_q() { PYTHONWARNINGS="ignore:Editable installation:UserWarning" "$VENV/bin/python" -m pip install -q "$@"; }

if [ ! -x "$VENV/bin/python" ]; then
  say "creating virtual environment $VENV"
  "$PY" -m venv "$VENV"
  pip_q --upgrade pip
fi
stamp="$VENV/.anydevice-installed"
want="$(cat "$ROOT"/pyproject.toml "$ROOT"/setup.py "$ROOT"/backends/*/pyproject.toml "$ROOT"/backends/*/setup.py "$ROOT"/backends/*/anydevice_*/*.c "$ROOT"/core/anydevice/*/*.c 2>/dev/null | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  say "installing anydevice and its backends into $VENV (pip; about a minute the first time)"
  pkgs=(-e "$ROOT[test]")
  for b in "$ROOT"/backends/*/; do
    [ -f "$b/pyproject.toml" ] && pkgs+=(-e "${b%/}")
  done
  pip_q "${pkgs[@]}"
  echo "$want" > "$stamp"
fi

# A working OpenCL device: one that builds and runs a kernel (the backend's device probe).
opencl_works() {
  "$VENV/bin/python" -c 'import sys, anydevice as ad; sys.exit(0 if ad.device.device_count("opencl") else 1)' 2>/dev/null
}

# Without a working OpenCL device: as root with apt-get, install the distribution's PoCL
# (pocl-opencl-icd, PoCL 3.1 on Debian 12, which knows current CPUs); if there is still none, try
# PoCL's pip wheel (the [pocl] extra: PoCL 3.0 with LLVM 14, which cannot build kernels on CPUs
# newer than LLVM 14, e.g. AMD Zen 4/5). The wheel is not installed when a device already works:
# one PoCL gives one device per CPU. Without root, say once how to get one; OpenCL is then
# unavailable (or its device unusable), which the tests and the check report but do not fail on.
opencl_setup() {
  local ok="$VENV/.anydevice-opencl-ok" log="$VENV/.anydevice-apt.log"
  [ -f "$ok" ] && return 0
  if ! opencl_works && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "no working OpenCL device: installing the distribution's PoCL (apt-get install pocl-opencl-icd)"
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
           DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
             pocl-opencl-icd ocl-icd-libopencl1; } >"$log" 2>&1; then
      say "apt-get failed (last lines of $log):"; tail -n 5 "$log" >&2
    fi
  fi
  if ! opencl_works; then
    say "no working OpenCL device: installing PoCL's pip wheel (pocl-binary-distribution)"
    pip_q -e "$ROOT/backends/opencl[pocl]" || true
  fi
  if opencl_works; then
    touch "$ok"
  else
    say "OpenCL has no working device, so its tests are skipped; to get one:" \
        "sudo apt-get install pocl-opencl-icd, or conda install -c conda-forge pocl"
  fi
}
opencl_setup
export PATH="$VENV/bin:$PATH"
