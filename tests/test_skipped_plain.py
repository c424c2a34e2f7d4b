"""The reverse reading of skipped lines (grader/skipped_plain.py): in a notebook with lines that do
not run while grading, a TODO is graded only where every statement its definitions depend on is
plain (the notebook's own names, the numeric modules less their file and system parts, constants).
The routes here are ones the reading of skipped values never named (docs/trust.md lists them as
not covered by it): each costs its TODO; plain notebooks around the same skipped lines cost nothing."""

from __future__ import annotations

import pytest

from grader import skipped_values
from grader.checks import REQUIRED_NAMES
from grader.submission import Cell

STUBS = "def paged_attention(q, k, v, b, s):\n    raise NotImplementedError"
RIGHT = "def paged_attention(q, k, v, b, s):\n    return q"


def _todos(*cells: str) -> list[str]:
    finding = skipped_values.analyse([Cell(i + 1, c) for i, c in enumerate(cells)])
    return skipped_values.affected_todos(finding, REQUIRED_NAMES)


def _branch(test: str, then: str, otherwise: str) -> str:
    indent = chr(10) + "    "
    return f"if {test}:\n    {then.replace(chr(10), indent)}\nelse:\n    {otherwise.replace(chr(10), indent)}"


@pytest.mark.parametrize(
    "cells",
    [
        ("import resource", "!true", _branch("resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime > 0", STUBS, RIGHT)),
        ("import os", "!true", _branch("os.times().children_user > 0", STUBS, RIGHT)),
        ("import torch", "!python -c 'import torch; torch.save(1, \"m.pt\")'", _branch("torch.load('m.pt')", STUBS, RIGHT)),
        ("import sys", "!true", _branch("'pexpect' in sys.modules", STUBS, RIGHT)),
        ("!echo ran", "class Helper:\n    pass", "probe = '{0.__init__.__globals__[_]}'.format(Helper)", _branch("probe", STUBS, RIGHT)),
        ("!touch m", "import pathlib\nMODE = pathlib.Path('m').exists()", "def paged_attention(q, k, v, b, s):\n    if MODE:\n        raise NotImplementedError\n    return q"),
        ("%%capture c\n!echo ran", "def paged_attention(q, k, v, b, s):\n    if c.stdout:\n        raise NotImplementedError\n    return q"),
        ("out = !echo ran", "class Cfg:\n    mode = [0]", "def paged_attention(q, k, v, b, s):\n    if Cfg.mode[0]:\n        raise NotImplementedError\n    return q",
         "Cfg.mode[0] = len(out)"),
        ("!true", RIGHT, "exec(bytes.fromhex('7061676564').decode() + '_attention = None')"),
        ("!true", "import operator", RIGHT, "probe = operator.attrgetter('__globals__')(paged_attention)", _branch("probe.get('_')", STUBS, RIGHT)),
        ("!true", "import torch", "torch.set_default_dtype(torch.float64) if len(_) else None",
         "def paged_attention(q, k, v, b, s):\n    return q + torch.zeros(1)"),  # a module's state the definition reads
        ("!true", "def paged_attention(q, k, v, b, s):\n    return q.new_tensor(len(get_ipython().user_ns.get('_', [])))"),
    ],
)
def test_definitions_that_depend_on_what_is_not_plain_cost_their_todo(cells: tuple[str, ...]) -> None:
    assert "todo5" in _todos(*cells)


@pytest.mark.parametrize(
    "cells",
    [
        ("!pip install tqdm", "import math\nimport torch", RIGHT, "q = torch.randn(2, 4, 8)\nout = paged_attention(q, q, q, None, None)\nprint(out.shape)"),
        ("!nvidia-smi", "import torch\nDEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'",
         "def paged_attention(q, k, v, b, s):\n    return q.to(DEVICE)"),
        ("%%capture\n%pip install numpy", "import numpy as np", "def paged_attention(q, k, v, b, s):\n    return q * float(np.sqrt(1.0))"),
        ("files = !ls\nprint(len(files))", RIGHT, "import time\nt = time.perf_counter()\npaged_attention(1, 2, 3, 4, 5)\nprint(time.perf_counter() - t)"),
        ("!true", "from IPython.display import display, Markdown\ndisplay(Markdown('**ok**'))", RIGHT),
        ("!true", "import torch\ntorch.manual_seed(0)", RIGHT, "%timeit paged_attention(1, 2, 3, 4, 5)"),
        ("!true", "import functools", "@functools.lru_cache(maxsize=None)\ndef scale_of(d):\n    return d ** -0.5",
         "def paged_attention(q, k, v, b, s):\n    return q * scale_of(4)"),
    ],
)
def test_plain_definitions_around_skipped_lines_cost_nothing(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == []


def test_a_notebook_without_skipped_lines_is_not_read_so() -> None:
    """No skipped line, nothing to vouch for: what Jupyter runs is what is graded, plain or not."""
    assert _todos("import os", _branch("os.path.exists('m')", STUBS, RIGHT)) == []


def test_the_card_says_which_statement_and_what_in_it() -> None:
    cells = [Cell(1, "!true"), Cell(2, "import resource\nMODE = resource.getpagesize() % 2"), Cell(3, "def paged_attention(q, k, v, b, s):\n    return q if MODE else None")]
    finding = skipped_values.analyse(cells)
    notes = " ".join(n.en for n in skipped_values.notes(finding, REQUIRED_NAMES))
    assert "code cell 2, line 1: `import resource`" in notes and "paged_attention" in notes and "`import resource`" in notes


def _plain_reading_alone(cells: tuple[str, ...]) -> list[str] | None:
    """The TODOs the reverse reading costs by itself, the reading of skipped values left out (None:
    nothing to read, no line that may not run)."""
    from grader.skipped_cells import _statements
    from grader.skipped_effects import _sources
    from grader.skipped_plain import first_skipped_line

    notebook = [Cell(i + 1, c) for i, c in enumerate(cells)]
    statements = _statements(notebook)
    sources = _sources(notebook, statements)
    if all(s.grader_line for s in sources) and first_skipped_line(statements) is None:
        return None
    found = skipped_values._unvouched(notebook, statements, sources, [set() for _ in sources], set())
    return skipped_values.affected_todos(skipped_values.Finding(found), REQUIRED_NAMES)


def test_the_reverse_reading_alone_finds_every_route_the_reading_of_values_found() -> None:
    """Every case of tests/test_skipped_values.py (red teams 9 to 36): each route that costs a TODO
    there costs one here too with no help, and no case that costs nothing there costs anything here."""
    from tests import test_skipped_values as cases

    routes, legitimate, missed, flagged = 0, 0, [], []
    for name in dir(cases):
        test = getattr(cases, name)
        for mark in getattr(test, "pytestmark", []) if name.startswith("test_") else []:
            if mark.name != "parametrize":
                continue
            for value in mark.args[1]:
                cells = value[0] if isinstance(value[0], tuple) else value
                if "nothing" in name or "only_shown" in name:
                    legitimate += 1
                    if _plain_reading_alone(cells):
                        flagged.append(cells)
                elif "cost" in name:
                    routes += 1
                    if not _plain_reading_alone(cells):
                        missed.append(cells)
    assert routes >= 90 and legitimate >= 20 and missed == [] and flagged == []
