#!/usr/bin/env bash
# Set up the project's virtual environment: scripts/setup-venv.sh [VENV [STAMP]]
# (scripts/bootstrap.sh runs it the first time ./grade or ./run-tests needs it).
#   [1/3] the virtual environment, with the Python that $PYTHON names (default python3);
#   [2/3] PyTorch, as pyproject.toml pins it.  On Linux without an NVIDIA GPU, the CPU build
#         from download.pytorch.org, as CI and Gradescope's setup.sh take it: PyPI's Linux
#         build carries gigabytes of CUDA libraries.  PA_TORCH_INDEX=URL names another index,
#         PA_TORCH_INDEX=pip leaves the choice to pip's own configuration;
#   [3/3] the grader, the course's packages and the test tools (pip install -e ".[test]").
# Each step prints a line and, while pip works, a status line (rewritten in place on a terminal,
# one every 10 s elsewhere); pip's whole output goes to VENV/setup.log.  Safe to run again, and
# twice at once (the second waits for the first).  STAMP is written last, when all went well.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv}"
STAMP="${2:-$VENV/.installed-$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)}"
PYTHON="${PYTHON:-python3}"
CPU_INDEX="https://download.pytorch.org/whl/cpu"
LOG="$VENV/setup.log"
STEPS=3
STARTED=$SECONDS
STEP_STARTED=$SECONDS
LAST_SHOWN=0
COLS="$(tput cols 2>/dev/null || echo 80)"

say() { printf '%s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

step() {  # step N TEXT: a step begins
    STEP_STARTED=$SECONDS
    say "[$1/$STEPS] $2"
}

step_done() {  # step_done TEXT: the step ended well
    [ -t 2 ] && printf '\r\033[K' >&2
    say "      done in $((SECONDS - STEP_STARTED)) s${1:+: $1}"
}

show() {  # show STATUS: what pip is doing now, with the step's seconds so far
    local text
    text="      $((SECONDS - STEP_STARTED)) s  $1"
    if [ -t 2 ]; then
        printf '\r\033[K%s' "${text:0:$((COLS - 1))}" >&2
    elif ((SECONDS - LAST_SHOWN >= 10)); then
        say "$text"
        LAST_SHOWN=$SECONDS
    fi
}

progress() {  # reads pip's output: all of it to the log, a status line to the terminal
    local chunk line="" status="starting pip" rc collected=0 eof=0
    while [ "$eof" = 0 ]; do
        if IFS= read -r -t 1 chunk; then
            line+="$chunk"
        else
            rc=$?
            if [ "$rc" -gt 128 ]; then  # a second of silence: keep what came, tick the clock
                line+="$chunk"
                show "$status"
                continue
            fi
            line+="$chunk"
            eof=1
            [ -n "$line" ] || break
        fi
        printf '%s\n' "$line" >>"$LOG"
        case "$line" in
            Collecting*) collected=$((collected + 1)); status="collecting $collected: ${line#Collecting }" ;;
            *Downloading*) status="downloading ${line#*Downloading }" ;;
            "Installing collected packages:"*) status="installing $(($(tr -cd , <<<"$line" | wc -c) + 1)) packages" ;;
            *"Building "* | *"Getting requirements"* | *"Preparing "*) status="${line#"${line%%[! ]*}"}" ;;
        esac
        line=""
        show "$status"
    done
}

pip_install() {  # pip_install ARGS...: pip install, its output through progress; pip's status
    "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input --progress-bar off "$@" 2>&1 | progress
    return "${PIPESTATUS[0]}"
}

failed() {  # failed WHAT: pip failed; show the end of its log
    [ -t 2 ] && printf '\r\033[K' >&2
    say "error: $1 failed; the last lines of $LOG:"
    tail -n 15 "$LOG" | sed 's/^/    /' >&2
    exit 1
}

has_nvidia_gpu() {
    [ -e /proc/driver/nvidia/version ] || { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }
}

reachable() {  # reachable URL: the index answers for torch within 10 s
    case "$1" in http://* | https://*) ;; *) return 0 ;; esac
    "$VENV/bin/python" - "$1" <<'EOF' 2>/dev/null
import sys
import urllib.request

urllib.request.urlopen(urllib.request.Request(sys.argv[1].rstrip("/") + "/torch/", method="HEAD"), timeout=10)
EOF
}

installed_torch() {  # the version of torch in the venv, and which build it is
    "$VENV/bin/python" - <<'EOF'
import importlib.metadata as md

version = md.version("torch")
cuda = any((d.metadata["Name"] or "").lower().startswith("nvidia-") for d in md.distributions())
print(version, "(CPU build)" if version.endswith("+cpu") or not cuda else "(CUDA build)")
EOF
}

# --- before anything is installed: the right Python, and one set-up at a time -----------------
command -v "$PYTHON" >/dev/null || die "no '$PYTHON' here: install Python 3.11 (or run with PYTHON=/path/to/python3)"
need="$(sed -n 's/^requires-python *= *">=\([0-9.]*\)".*/\1/p' "$ROOT/pyproject.toml")"
"$PYTHON" -c "import sys; sys.exit(sys.version_info[:2] < tuple(map(int, '${need:-3}'.split('.'))))" \
    || die "this project needs Python >= $need, and $PYTHON is $("$PYTHON" -V 2>&1); run with PYTHON=/path/to/python3.11"
mkdir -p "$VENV"
if command -v flock >/dev/null; then
    exec 9>"$VENV/.setup.lock"
    if ! flock -n 9; then
        say "waiting for another set-up of $VENV to finish..."
        flock 9
    fi
    [ -f "$STAMP" ] && exit 0  # the other one did it
fi
: >"$LOG"
say "setting up $VENV (first run only: a few minutes; pip's output goes to $LOG)"

# --- [1/3] the virtual environment ------------------------------------------------------------
step 1 "virtual environment ($("$PYTHON" -V 2>&1))"
if ! "$VENV/bin/python" -c "" 2>/dev/null; then
    "$PYTHON" -m venv "$VENV" >>"$LOG" 2>&1 \
        || { tail -n 5 "$LOG" >&2; die "$PYTHON -m venv failed (on Debian and Ubuntu: apt-get install python3-venv)"; }
fi
step_done

# --- [2/3] PyTorch --------------------------------------------------------------------------
torch_spec="$(grep -o '"torch[^"]*"' "$ROOT/pyproject.toml" | head -n 1 | tr -d '"')"
index="${PA_TORCH_INDEX:-auto}"
if [ "$index" = auto ]; then
    if [ "$(uname -s)" != Linux ]; then
        index=pip why="PyPI's build for $(uname -s)"
    elif has_nvidia_gpu; then
        index=pip why="an NVIDIA GPU is here: PyPI's CUDA build"
    else
        index="$CPU_INDEX" why="no NVIDIA GPU here: the CPU build"
    fi
else
    why="PA_TORCH_INDEX=$index"
fi
index_args=()
if [ "$index" != pip ]; then
    if reachable "$index"; then
        index_args=(--extra-index-url "$index")
        why+=", from $index"
    else
        why+=", but $index cannot be reached: from pip's own indexes"
    fi
fi
step 2 "PyTorch ($torch_spec; $why)"
pip_install "${index_args[@]}" "$torch_spec" || failed "installing PyTorch"
torch_build="$(installed_torch)"
step_done "torch $torch_build"
if [[ "$why" == "no NVIDIA GPU"* && "$torch_build" == *CUDA* ]]; then
    say "      note: a CUDA build runs on the CPU too, but takes gigabytes; for the CPU build:"
    say "      rm -r $VENV, then PA_TORCH_INDEX=<an index with CPU builds> ./grade --help"
fi

# --- [3/3] the grader, the course's packages and the test tools -----------------------------
step 3 "the grader, the course's packages and the test tools (pip install -e \".[test]\")"
pip_install -e "${ROOT}[test]" || failed "installing the project"
step_done

rm -f "$VENV"/.installed-*
touch "$STAMP"
say "ready in $((SECONDS - STARTED)) s; ./grade and ./run-tests reuse $VENV from now on"
