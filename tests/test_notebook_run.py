"""Cells run as a Jupyter kernel runs them: through IPython's InteractiveShell (grader/sandbox/shell.py),
in a private copy of the notebook's folder (grader/folder.py), with shell commands, installs and
debuggers skipped and reported.

Each test loads cells in a real sandbox (forked from one warm template, as a batch does) and
reads what the cells observed from a last cell that prints it as JSON.  What a real kernel does
with the same cells is checked by tests/test_fidelity.py; here, what the grader does.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grader.config import load_config
from grader.folder import plan
from grader.sandbox import warm
from grader.sandbox.client import LoadReport, Sandbox, worker_env
from grader.submission import Cell

CONFIG = load_config()
MARK = "OBSERVED:"


@pytest.fixture(scope="module")
def template() -> Iterator[warm.Template]:
    made = warm.start(worker_env(False))
    made.wait_ready()
    warm.use(made)
    try:
        yield made
    finally:
        warm.use(None)
        made.close()


def run(tmp_path: Path, cells: list[str], files: dict[str, str] | None = None, notebook: bool = True) -> tuple[LoadReport, str, dict[str, Any]]:
    """Load `cells` next to `files` (in the notebook's folder); the report, the output and what the last cell printed."""
    folder = tmp_path / "course"
    folder.mkdir(exist_ok=True)
    for name, text in (files or {}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    submission = folder / "work.ipynb"
    submission.write_text("{}", encoding="utf-8")
    typed = [Cell(i, textwrap.dedent(source).strip("\n")) for i, source in enumerate(cells, start=1)]
    with Sandbox(typed, CONFIG.limits, folder=plan(submission, folder, CONFIG.notebook), notebook=notebook) as sandbox:
        report = sandbox.load()
    output = sandbox.output()[0]  # once the worker is gone: everything it printed has been read
    assert report.failed is None, (report.failed, output[-3000:])
    seen = [line[len(MARK):] for line in output.splitlines() if line.startswith(MARK)]
    return report, output, json.loads(seen[-1]) if seen else {}


def errors(report: LoadReport) -> dict[int, str]:
    return {c.index: (c.error or {}).get("type", c.status) for c in report.cells if c.status != "ok"}


def observe(expression: str) -> str:
    return f"import json as _json\nprint({MARK!r} + _json.dumps({expression}, default=repr))"


def test_files_the_notebook_writes_can_be_imported_and_run(tmp_path: Path, template: warm.Template) -> None:
    report, output, seen = run(tmp_path, [
        "%%writefile kv_manager.py\ndef blocks(n, size):\n    return -(-n // size)\n",
        "%%writefile -a kv_manager.py\nCONSTANT = 7\n",
        "from kv_manager import *\nfrom helpers import twice",
        "%%writefile attention.py\nSCRIPT_RESULT = blocks_seen * 2 if 'blocks_seen' in globals() else 'fresh namespace'\nRAN_AS = __name__",
        "blocks_seen = blocks(9, 4)\n%run attention.py\nfirst = SCRIPT_RESULT\n%run -i attention.py\nsecond = SCRIPT_RESULT",
        "with open('data/sizes.txt') as f:\n    sizes = [int(x) for x in f.read().split()]",
        observe("dict(blocks=blocks(9, 4), constant=CONSTANT, twice=twice(21), first=first, second=second, ran_as=RAN_AS, sizes=sizes)"),
    ], files={"helpers.py": "def twice(x):\n    return 2 * x\n", "data/sizes.txt": "3 5 8\n"})
    assert errors(report) == {}
    assert seen == {"blocks": 3, "constant": 7, "twice": 42, "first": "fresh namespace", "second": 6, "ran_as": "__main__", "sizes": [3, 5, 8]}


def test_magics_with_options_history_and_display_behave_as_in_ipython(tmp_path: Path, template: warm.Template) -> None:
    report, output, seen = run(tmp_path, [
        "x = 40",
        "%timeit -n 3 -r 3 sum(range(10))\nafter_timeit = x + 2",
        "x + 1",
        "last, before_last, out = _, __, Out[3]",
        "%%capture captured\nprint('hidden')\ncaptured_value = 5",
        "%%timeit -n 2 -r 1\ntimed = 1",  # timed in a function of its own: never in the namespace
        "from IPython.display import Markdown, display\ndisplay(Markdown('**shown**'), {'a': 1})\nshell = type(get_ipython()).__name__",
        "torch_help = 1\nimport math\nmath.sqrt?\nmath.sqrt??",
        "%who_ls int",
        "ints = _",
        observe("dict(after_timeit=after_timeit, last=last, out=out, captured=captured.stdout, value=captured_value, timed='timed' in dir(),"
                " shell=shell, ints=sorted(ints), first_in=In[1], count=len(In))"),
    ])
    assert errors(report) == {}
    assert seen["after_timeit"] == 42 and seen["last"] == 41 and seen["out"] == 41
    assert seen["captured"] == "hidden\n" and seen["value"] == 5 and seen["timed"] is False
    assert seen["shell"] == "GradingShell" and seen["first_in"] == "x = 40" and seen["count"] == 12
    assert {"x", "after_timeit", "captured_value", "torch_help"} <= set(seen["ints"])
    assert "loops each" in output and output.count("hidden") == 1  # only in what the last cell printed
    assert "<IPython.core.display.Markdown object>" in output and "{'a': 1}" in output


def test_reset_forgets_what_a_kernel_forgets(tmp_path: Path, template: warm.Template) -> None:
    report, _, seen = run(tmp_path, [
        "def paged_attention():\n    return 'old'",
        "%reset -f",
        "kept = 'paged_attention' in dir()",
        "x = 1",
        "%reset",  # no stdin: as under nbclient, the question is taken as yes
        observe("dict(kept=kept if 'kept' in dir() else 'forgotten', x='x' in dir())"),
    ])
    assert errors(report) == {}
    assert seen == {"kept": "forgotten", "x": False}


def test_extensions_matplotlib_config_env_and_cd(tmp_path: Path, template: warm.Template) -> None:
    report, output, seen = run(tmp_path, [
        "%load_ext autoreload\n%autoreload 2\n%matplotlib inline\n%config InlineBackend.figure_format = 'retina'\n%autosave 0",
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nimport matplotlib\nbackend = matplotlib.get_backend()",
        "from tqdm.auto import tqdm\ntotal = sum(i for i in tqdm(range(5)))\nimport pandas as pd\nframe = pd.DataFrame({'a': [1, 2]})\nframe",
        "%env GRADER_TEST_VAR=on\nimport os\nstart = os.getcwd()",
        "%cd sub\nhere = open('inside.txt').read().strip()",
        observe("dict(backend=backend, total=total, var=os.environ.get('GRADER_TEST_VAR'), start=os.path.basename(start), here=here,"
                " moved=os.path.relpath(os.getcwd(), start))"),
    ], files={"sub/inside.txt": "in the subfolder\n"})
    assert errors(report) == {}
    assert seen["backend"] in ("inline", "module://matplotlib_inline.backend_inline") and seen["total"] == 10 and seen["var"] == "on"
    assert seen["start"] == "course" and seen["here"] == "in the subfolder" and seen["moved"] == "sub"
    assert "Autosave disabled" in output and "<Figure size" in output


def test_shell_installs_debuggers_and_the_network_are_skipped_and_reported(tmp_path: Path, template: warm.Template) -> None:
    report, output, seen = run(tmp_path, [
        "!echo from-the-shell > shell.txt\nfiles = !ls\n%pip install tqdm\n!pip install numpy",
        "%%bash\necho from-bash > bash.txt",
        "import pdb\nbreakpoint()\npdb.set_trace()\nafter_debuggers = True\n%debug",
        "%load https://example.com/solution.py\n%sx ls\n%ls",
        "import os\n" + observe("dict(files=list(files), after=after_debuggers, made=sorted(n for n in os.listdir('.') if n.endswith('.txt')))"),
    ])
    assert errors(report) == {}
    assert seen == {"files": [], "after": True, "made": []}
    skipped = [(s.index, s.line, s.text, s.reason) for s in report.skipped]
    assert skipped == [
        (1, 1, "!echo from-the-shell > shell.txt", "shell"),
        (1, 2, "files = !ls", "shell"),
        (1, 3, "%pip install tqdm", "install"),
        (1, 4, "!pip install numpy", "install"),
        (2, 1, "%%bash", "shell"),
        (3, 2, "breakpoint()", "debugger"),
        (3, 3, "pdb.set_trace()", "debugger"),
        (3, 5, "%debug", "debugger"),
        (4, 1, "%load https://example.com/solution.py", "network"),
        (4, 2, "%sx ls", "shell"),
        (4, 3, "%ls", "shell"),
    ]


def test_input_and_getpass_raise_at_once_as_under_nbclient(tmp_path: Path, template: warm.Template) -> None:
    report, _, seen = run(tmp_path, ["name = input('your name? ')", "import getpass\ngetpass.getpass()", observe("'still running'")])
    assert errors(report) == {1: "StdinNotImplementedError", 2: "StdinNotImplementedError"}
    assert seen == "still running"


def test_async_cells_run_inside_an_event_loop_as_in_jupyter(tmp_path: Path, template: warm.Template) -> None:
    report, _, seen = run(tmp_path, [
        "import asyncio\nawait asyncio.sleep(0)\nawaited = True",
        "async def main():\n    return 1\nasyncio.run(main())",  # Jupyter: a loop is already running
        observe("dict(awaited=awaited, running=asyncio.get_event_loop().is_running())"),
    ])
    assert errors(report) == {2: "RuntimeError"}
    assert seen == {"awaited": True, "running": True}


def test_a_displayed_value_whose_repr_raises_fails_its_cell_and_sys_exit_stops(tmp_path: Path, template: warm.Template) -> None:
    report, output, _ = run(tmp_path, [
        "class Broken:\n    def __repr__(self):\n        return 1 / 0\nBroken()",
        "exit()\nquit()\nprint('exit() asks a front end to close; the cells go on')",
        "import sys\nsys.exit('stop here')",
        "never = 1",
    ])
    assert errors(report) == {1: "ZeroDivisionError", 3: "SystemExit", 4: "not_run"}
    assert "the cells go on" in output


def test_a_module_the_notebook_writes_cannot_reach_the_answer_key(tmp_path: Path, template: warm.Template) -> None:
    report, _, seen = run(tmp_path, [
        "%%writefile sneaky.py\nfrom reference import paged_attention\n",
        "try:\n    import sneaky\n    outcome = 'imported'\nexcept ImportError as error:\n    outcome = type(error).__name__",
        observe("outcome"),
    ])
    assert seen == "ImportError" and report.blocked_imports == ["reference"]


def test_a_script_shows_nothing_for_its_last_expression(tmp_path: Path, template: warm.Template) -> None:
    _, as_notebook, _ = run(tmp_path, ["6 * 7"])
    _, as_script, _ = run(tmp_path, ["6 * 7"], notebook=False)
    assert "Out[1]: 42" in as_notebook and "42" not in as_script


def test_tracebacks_point_at_the_cells_lines_and_the_notebooks_own_files(tmp_path: Path, template: warm.Template) -> None:
    report, _, _ = run(tmp_path, [
        "%%capture\nx = 1\ny = 1 / 0",
        "import helper\nhelper.fail()",
    ], files={"helper.py": "def fail():\n    raise ValueError('in a file next to the notebook')\n"})
    first, second = (c.error or {} for c in report.cells)
    assert first["type"] == "ZeroDivisionError" and 'File "<cell 1>", line 3' in first["traceback"]
    assert second["type"] == "ValueError" and 'File "helper.py", line 2, in fail' in second["traceback"]
    assert os.sep + "pa-grade-" not in second["traceback"]  # the private path is not shown
