# Sourced by ./grade and ./run-tests: make .venv hold this project and its test tools.
# Sets it up on first use, and again only when pyproject.toml changed since the last set-up
# (scripts/setup-venv.sh says what it does, step by step).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PA_GRADER_VENV:-$ROOT/.venv}"
STAMP="$VENV/.installed-$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
    bash "$ROOT/scripts/setup-venv.sh" "$VENV" "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
