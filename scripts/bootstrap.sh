# Sourced by ./grade and ./run-tests: make .venv hold this project and its test tools.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PA_GRADER_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.installed-$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
    echo "setting up $VENV (first run only)..." >&2
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "${ROOT}[test]" >&2
    rm -f "$VENV"/.installed-*
    touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
