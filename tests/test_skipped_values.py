"""What Jupyter runs is what is graded (grader/skipped_values.py): a line that does not run while
grading (`x = !cmd`, `%sx`, `!!`, `%%bash --out`, `_exit_code`) whose value the definitions may
depend on costs the TODOs that depend on it; one whose value is only shown costs nothing."""

from __future__ import annotations

import pytest

from grader import skipped_values
from grader.checks import REQUIRED_NAMES
from grader.results import FAILED, PASSED, ItemResult, Text
from grader.submission import Cell, load_submission
from tests.conftest import CORPUS


def _todos(*cells: str) -> list[str]:
    finding = skipped_values.analyse([Cell(i + 1, c) for i, c in enumerate(cells)])
    return skipped_values.affected_todos(finding, REQUIRED_NAMES)


def _read(*cells: str) -> list[tuple[str, list[tuple[int, int]]]]:
    return [(s.text, s.reads) for s in skipped_values.analyse([Cell(i + 1, c) for i, c in enumerate(cells)]).sources]


STUBS = "def paged_attention(q, k, v, b, s):\n    raise NotImplementedError"
RIGHT = "def paged_attention(q, k, v, b, s):\n    return q"


@pytest.mark.parametrize(
    "cells, todos",
    [
        # the red team's notebook: the branch Jupyter takes holds only stubs
        (("x = !echo hi", f"if not x:\n    {RIGHT.replace(chr(10), chr(10) + '    ')}\nelse:\n    {STUBS.replace(chr(10), chr(10) + '    ')}"), ["todo5"]),
        (("x = !echo hi", "fast = bool(x)", "def paged_attention(q, k, v, b, s):\n    if fast:\n        raise NotImplementedError\n    return q"), ["todo5"]),
        (("x = %sx echo hi", "table = {}", "table['k'] = x", "def estimate_kv_cache_bytes(*a):\n    return table"), ["todo1"]),
        (("x = !ls", "kept = []", "kept.append(x)", "class KVCacheManager:\n    options = kept"), ["todo2", "todo3", "todo4"]),
        (("!!echo hi", "mode = _", "class Request:\n    kind = mode"), ["todo2", "todo3", "todo4"]),
        (("%%bash --out code\necho 'def paged_attention(*a): return a[0]'", "exec(code)"), ["todo1", "todo2", "todo3", "todo4", "todo5"]),
        (("out = !cat solution.py", "globals().update({'paged_attention': out})"), ["todo1", "todo2", "todo3", "todo4", "todo5"]),
        (("def paged_attention(q, k, v, b, s):\n    found = !nvidia-smi\n    return q if found else None",), ["todo5"]),
        (("ready = [line for line in get_ipython().getoutput('ls') if line]", "if ready:\n    " + RIGHT.replace("\n", "\n    ")), ["todo5"]),
        # a later cell in a syntax of an earlier cell's `from __future__` (red team 13: `<>` hid the branch)
        (("from __future__ import barry_as_FLUFL", "out = !echo hi", "if out <> []:\n    pass\nelse:\n    " + RIGHT.replace("\n", "\n    ")), ["todo5"]),
        (("from __future__ import barry_as_FLUFL", "out = !echo hi\nif out <> []:\n    pass\nelse:\n    " + RIGHT.replace("\n", "\n    ")), ["todo5"]),
        # a displayed value read by another name than `_` or Out (red team 14)
        (("!!echo hi", "stub = bool(_1)", "def paged_attention(q, k, v, b, s):\n    if stub:\n        raise NotImplementedError\n    return q"), ["todo5"]),
        (("!!echo hi", "stub = bool(get_ipython().user_ns['_'])", "def paged_attention(q, k, v, b, s):\n    return None if stub else q"), ["todo5"]),
        (("!!echo hi", "stub = bool(globals()['_'])", "def paged_attention(q, k, v, b, s):\n    return None if stub else q"), ["todo5"]),
        (("!!echo hi", "import sys", "stub = bool(sys.modules['__main__']._)", "def paged_attention(q, k, v, b, s):\n    return None if stub else q"), ["todo5"]),
        (("!!echo hi", "stub = bool(eval('_1'))", "def paged_attention(q, k, v, b, s):\n    return None if stub else q"), ["todo5"]),
        (("!!echo hi", "stub = bool(get_ipython().displayhook.shell.history_manager.output_hist)", "def paged_attention(q, k, v, b, s):\n    return None if stub else q"), ["todo5"]),
    ],
)
def test_definitions_that_may_depend_on_a_skipped_value_cost_their_todo(cells: tuple[str, ...], todos: list[str]) -> None:
    assert _todos(*cells) == todos


@pytest.mark.parametrize(
    "cells",
    [
        ("files = !ls", "print(len(files), 'files here')", RIGHT),
        ("files = !ls", RIGHT),  # never read
        ("!pip install tqdm", "!nvidia-smi", "%pip install pandas", RIGHT),  # skipped, nothing read
        ("!make", "if _exit_code:\n    print('build failed')", RIGHT),
        ("%%bash\nls -la", RIGHT),
        ("gpu = !nvidia-smi -L", "display(gpu)", "for line in gpu:\n    print(line)", RIGHT),
        ("!!nvidia-smi -L", "x = 3", "_2 = x", RIGHT),  # a displayed value, and `_N` names bound, never read from it
    ],
)
def test_a_skipped_value_only_shown_costs_nothing(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == []


def test_code_nested_too_deep_to_walk_never_fails_the_analysis() -> None:
    """A chain of 1,500 `+` parses but is past Python's recursion limit for a recursive walk (red
    team 13: exit 3, a grader error): the analysis goes on, and still sees the value reach the
    definition (or, where it cannot walk the code, lets it reach everything)."""
    deep = " + ".join(["0"] * 1_500)
    cells = ("out = !echo hi", f"if out:\n    raise SystemExit({deep})", f"flag = bool(out) + ({deep})",
             "def paged_attention(q, k, v, b, s):\n    return q if flag else None")
    assert "todo5" in _todos(*cells)


def test_where_a_skipped_value_is_read_is_said() -> None:
    assert _read("files = !ls", "print(len(files))") == [("files = !ls", [(2, 1)])]
    assert _read("files = !ls", "x = 1") == []
    assert _read("!make", "if _exit_code:\n    print('failed')") == [("_exit_code", [(2, 1)])]
    assert _read("!!echo hi") == []  # displayed, nothing reads `_`


def test_the_items_of_a_dependent_todo_get_no_points() -> None:
    finding = skipped_values.analyse([Cell(1, "x = !echo hi"), Cell(2, f"if x:\n    pass\nelse:\n    {RIGHT.replace(chr(10), chr(10) + '    ')}")])
    items = [ItemResult(i, i.split(".")[0], Text(i, i), 5, PASSED) for i in ("todo1.a", "todo5.b", "todo5.c")]
    out = skipped_values.apply(items, finding, REQUIRED_NAMES)
    assert [i.status for i in out] == [PASSED, FAILED, FAILED]
    assert out[1].failure is not None and out[1].failure.kind == "skipped_value" and "x = !echo hi" in out[1].failure.message.en
    notes = skipped_values.notes(finding, REQUIRED_NAMES)
    assert notes and all(n.zh and n.en and n.zh != n.en for n in notes) and "todo5" in notes[-1].en


@pytest.mark.parametrize("name", ["nb14_shell_installs_debuggers.ipynb", "rt_nb_capture_and_shell_assign.ipynb", "rt_nb_pip_matplotlib.ipynb",
                                  "rt2_nb_writefile_raw_bash.ipynb"])
def test_the_correct_notebooks_with_shell_lines_cost_nothing(name: str) -> None:
    cells = load_submission(CORPUS / "correct" / name, 1 << 24).cells
    assert skipped_values.affected_todos(skipped_values.analyse(cells), REQUIRED_NAMES) == []


def test_the_red_team_notebook_costs_every_todo() -> None:
    cells = load_submission(CORPUS / "gaming" / "rt9_nb_shell_value_stubs.ipynb", 1 << 24).cells
    assert skipped_values.affected_todos(skipped_values.analyse(cells), REQUIRED_NAMES) == ["todo1", "todo2", "todo3", "todo4", "todo5"]


def _branch(test: str, then: str, otherwise: str) -> str:
    return f"if {test}:\n    {then.replace(chr(10), chr(10) + '    ')}\nelse:\n    {otherwise.replace(chr(10), chr(10) + '    ')}"


@pytest.mark.parametrize(
    "cells",
    [
        # red team 10: a marker file written by a line that runs in Jupyter only picks the stubs there
        ("import os", "!touch .done", _branch("not os.path.exists('.done')", RIGHT, STUBS)),
        ("%%bash\necho x > flag.txt", "from pathlib import Path", _branch("Path('flag.txt').is_file()", STUBS, RIGHT)),
        ("mkdir marker", "import os", _branch("os.path.isdir('marker')", STUBS, RIGHT)),  # an alias run by automagic
        ("!echo 1 > f", f"try:\n    open('f').read()\n    {STUBS.replace(chr(10), chr(10) + '    ')}\nexcept OSError:\n    {RIGHT.replace(chr(10), chr(10) + '    ')}"),
        ("!echo 'x = 1' > marker.py", f"try:\n    import marker\n    {STUBS.replace(chr(10), chr(10) + '    ')}\nexcept ImportError:\n    {RIGHT.replace(chr(10), chr(10) + '    ')}"),
        (STUBS, "!touch m", f"import os\nassert not os.path.exists('m')\n{RIGHT}"),  # the assert stops the cell in Jupyter
        ("!touch m", "import os\ndef paged_attention(q, k, v, b, s):\n    if os.path.exists('m'):\n        raise NotImplementedError\n    return q"),
        ("%alias mark touch %s", "mark m", "import glob", _branch("not glob.glob('m')", RIGHT, STUBS)),
        ("x = !echo hi", f"try:\n    x[0]\n    {STUBS.replace(chr(10), chr(10) + '    ')}\nexcept IndexError:\n    {RIGHT.replace(chr(10), chr(10) + '    ')}"),
        ("%sc -l x=echo hi", _branch("not x", RIGHT, STUBS)),
    ],
)
def test_definitions_that_may_depend_on_files_a_skipped_line_writes_cost_their_todo(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == ["todo5"]


@pytest.mark.parametrize(
    "cells",
    [
        ("!pip install tqdm", "!nvidia-smi", "%pip install pandas", RIGHT),  # writers, but no definition reads a file
        ("import json\nsizes = json.load(open('sizes.json'))", "def paged_attention(q, k, v, b, s):\n    return q * sizes['x']"),  # no writer
        ("import json\nsizes = json.load(open('sizes.json'))", "!pip install tqdm", "def paged_attention(q, k, v, b, s):\n    return q * sizes['x']"),
        ("!nvidia-smi", "import json\nprint(json.load(open('sizes.json')))", RIGHT),  # read, only shown
        ("files = !ls\nprint(len(files))\n" + RIGHT,),
    ],
)
def test_files_no_skipped_line_writes_into_a_definition_cost_nothing(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == []


def test_the_files_a_skipped_line_may_write_are_said() -> None:
    cells = [Cell(1, "import os"), Cell(2, "!touch .done"), Cell(3, _branch("not os.path.exists('.done')", RIGHT, STUBS))]
    finding = skipped_values.analyse(cells)
    assert [(s.text, s.reads) for s in finding.sources] == [("!touch .done", [(3, 1)])]
    items = skipped_values.apply([ItemResult("todo5.a", "todo5", Text("a", "a"), 5, PASSED)], finding, REQUIRED_NAMES)
    assert items[0].failure is not None and items[0].failure.kind == "skipped_value"
    assert "the files written by `!touch .done`" in items[0].failure.message.en
    assert "may write files" in skipped_values.notes(finding, REQUIRED_NAMES)[0].en


def test_the_side_effect_notebook_costs_every_todo() -> None:
    cells = load_submission(CORPUS / "gaming" / "rt10_nb_shell_side_effect_file.ipynb", 1 << 24).cells
    assert skipped_values.affected_todos(skipped_values.analyse(cells), REQUIRED_NAMES) == ["todo1", "todo2", "todo3", "todo4", "todo5"]


@pytest.mark.parametrize(
    "cells",
    [
        # red team 24: an alias of %sx, a magic named at run time, the shell reached through a name or a looked-up magic
        ("%alias_magic -l probe sx", "out = %probe echo ok", _branch("out", STUBS, RIGHT)),
        ("out = get_ipython().run_line_magic('s' + 'x', 'echo ok')", _branch("out", STUBS, RIGHT)),
        ("ip = get_ipython()", "out = ip.getoutput('echo ok')", _branch("out", STUBS, RIGHT)),
        ("run = get_ipython().find_line_magic('sx')", "out = run('echo ok')", _branch("out", STUBS, RIGHT)),
        # red team 24: the marker file read by a module that a cell writes and a later cell imports
        ("!touch .m", "%%writefile impl.py\nimport os\n" + _branch("os.path.exists('.m')", STUBS, RIGHT), "from impl import paged_attention"),
    ],
)
def test_skipped_values_reached_by_other_names_or_written_modules_cost_their_todo(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == ["todo5"]


def test_reading_which_modules_are_loaded_after_a_grader_call_taken_out_costs_its_todo() -> None:
    """Red team 24: `'grader' in sys.modules` is true in Jupyter after the template's lab cell and
    false while graded, which takes that cell out."""
    from grader.checkcalls import strip_check_calls

    def todos(*sources: str) -> list[str]:
        cells = strip_check_calls([Cell(i + 1, s) for i, s in enumerate(sources)])
        return skipped_values.affected_todos(skipped_values.analyse(cells), REQUIRED_NAMES)

    lab = "try:\n    import grader\n    grader.kv_lab()\nexcept ImportError:\n    pass"
    assert todos(lab, "import sys", _branch("'grader' in sys.modules", STUBS, RIGHT)) == ["todo5"]
    assert todos(lab, _branch("'grader' in globals()", STUBS, RIGHT)) == ["todo5"]
    assert todos(lab, "import sys\nprint(sorted(sys.modules)[:3])", RIGHT) == []  # read, only shown
    assert todos("import sys", _branch("'json' in sys.modules", STUBS, RIGHT)) == []  # no grader call taken out


@pytest.mark.parametrize(
    "cells",
    [
        # red team 30: a command's printed output, caught; empty here, the command's output in Jupyter
        ("%%capture _cap\n!echo ran", _branch("not _cap.stdout", RIGHT, STUBS)),
        ("import io, contextlib\n_buf = io.StringIO()", "with contextlib.redirect_stdout(_buf):\n    !echo ran", _branch("not _buf.getvalue()", RIGHT, STUBS)),
        ("import io, sys\n_buf = io.StringIO()\n_old, sys.stdout = sys.stdout, _buf", "!echo ran", "sys.stdout = _old", _branch("not _buf.getvalue()", RIGHT, STUBS)),
        ("import io, sys\nsys.stdout = io.StringIO()", "!echo ran", "seen = sys.stdout.getvalue()\nsys.stdout = sys.__stdout__", _branch("seen", STUBS, RIGHT)),
        ("from IPython.utils.capture import capture_output", "with capture_output() as c:\n    %pip install tqdm", _branch("c.outputs or c.stdout", STUBS, RIGHT)),
        ("import contextlib\nclass Seen:\n    def write(self, s):\n        global seen\n        seen = True\n    def flush(self):\n        pass",
         "seen = False\nwith contextlib.redirect_stderr(Seen()), contextlib.redirect_stdout(Seen()):\n    !echo ran", _branch("seen", STUBS, RIGHT)),
        ("import builtins\nkeep = []\nold = builtins.print\nbuiltins.print = lambda *a, **k: keep.append(a)", "!echo ran", "builtins.print = old",
         _branch("keep", STUBS, RIGHT)),
        ("import sys, io\ndef run():\n    !echo ran", "buf = io.StringIO()\nsetattr(sys, 'stdout', buf)\nrun()\nsys.stdout = sys.__stdout__", _branch("buf.getvalue()", STUBS, RIGHT)),
    ],
)
def test_definitions_that_may_depend_on_a_skipped_lines_caught_output_cost_their_todo(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == ["todo5"]


@pytest.mark.parametrize(
    "cells",
    [
        ("%%capture\n!pip install tqdm", RIGHT),  # the usual quiet install: nothing kept
        ("%%capture log\n%pip install tqdm", "print(log.stdout[-200:])", RIGHT),  # caught, only shown
        ("import io, contextlib\nbuf = io.StringIO()\nwith contextlib.redirect_stdout(buf):\n    print('quiet')", RIGHT),  # no skipped line
        ("import sys\n!nvidia-smi", "def paged_attention(q, k, v, b, s):\n    sys.stdout.write('x')\n    sys.stdout.flush()\n    return q"),  # nothing caught
        ("import io, sys\n!echo ran", "def paged_attention(q, k, v, b, s):\n    print('step', file=sys.stderr)\n    return q",
         "buf = io.StringIO()\nsys.stdout, old = buf, sys.stdout\nprint('hidden')\nsys.stdout = old"),  # caught, never read by a definition
    ],
)
def test_output_caught_but_not_read_into_a_definition_costs_nothing(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == []


def test_the_capture_notebook_costs_todo5() -> None:
    cells = load_submission(CORPUS / "gaming" / "rt30_nb_capture_shell_output.ipynb", 1 << 24).cells
    assert skipped_values.affected_todos(skipped_values.analyse(cells), REQUIRED_NAMES) == ["todo5"]


def test_the_raise_on_error_notebook_costs_todo5() -> None:
    cells = load_submission(CORPUS / "gaming" / "rt32_nb_raise_on_error.ipynb", 1 << 24).cells
    finding = skipped_values.analyse(cells)
    assert skipped_values.affected_todos(finding, REQUIRED_NAMES) == ["todo5"]
    items = skipped_values.apply([ItemResult("todo5.a", "todo5", Text("a", "a"), 5, PASSED)], finding, REQUIRED_NAMES)
    assert items[0].failure is not None and "whether an exception was raised by `!nvidia-smi`" in items[0].failure.message.en
    assert any("it raises when the command fails" in n.en and "抛出" in n.zh for n in skipped_values.notes(finding, REQUIRED_NAMES))


def test_a_caught_output_is_said() -> None:
    cells = [Cell(1, "%%capture cap\n!echo ran"), Cell(2, _branch("cap.stdout", STUBS, RIGHT))]
    finding = skipped_values.analyse(cells)
    assert [(s.text, s.output) for s in finding.sources] == [("!echo ran", True)]
    items = skipped_values.apply([ItemResult("todo5.a", "todo5", Text("a", "a"), 5, PASSED)], finding, REQUIRED_NAMES)
    assert items[0].failure is not None and "the captured printed output of `!echo ran`" in items[0].failure.message.en
    note = skipped_values.notes(finding, REQUIRED_NAMES)[0]
    assert "catches printed output" in note.en and "捕获" in note.zh


@pytest.mark.parametrize(
    "cells",
    [
        # the same catchers, reached by other names than an attribute assignment
        ("import io, sys\nbuf = io.StringIO()\nvars(sys)['stdout'] = buf", "!echo ran", "vars(sys)['stdout'] = sys.__stdout__", _branch("buf.tell()", STUBS, RIGHT)),
        ("import io, sys\nbuf = io.StringIO()\nname = 'std' + 'out'\nold = getattr(sys, name)\nsetattr(sys, name, buf)", "!echo ran", "setattr(sys, name, old)",
         _branch("buf.getvalue()", STUBS, RIGHT)),
        ("import io, sys\nbuf = io.StringIO()\nsys.__dict__.update(stdout=buf)", "!echo ran", "sys.__dict__.update(stdout=sys.__stdout__)\nbuf.seek(0)",
         _branch("buf.read()", STUBS, RIGHT)),
        ("class Tally:\n    count = 0\n    def write(self, s):\n        Tally.count += len(s)", "import sys\nsys.stdout, old = Tally(), sys.stdout", "!echo ran", "sys.stdout = old",
         _branch("Tally.count", STUBS, RIGHT)),
        ("import io, sys\nsys.stdout = io.StringIO()", "!echo ran", "for line in sys.stdout:\n    pass\ntext = list(sys.stdout)\nsys.stdout = sys.__stdout__",
         _branch("text", STUBS, RIGHT)),
    ],
)
def test_catchers_reached_by_other_names_cost_their_todo(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == ["todo5"]


@pytest.mark.parametrize(
    "cells",
    [
        # red team 32: a skipped line's effects reached by routes the first reading missed
        ("!false", _branch("globals().get('_exit_code')", STUBS, RIGHT)),  # _exit_code through the namespace
        ("!!echo ran", _branch("any(get_ipython().ns_table['user_global']['Out'].values())", STUBS, RIGHT)),
        ("!make", "import sys", _branch("sys._getframe().f_globals['_exit_code']", STUBS, RIGHT)),
        ("import sys", "!echo ran", _branch("'pexpect' in sys.modules", STUBS, RIGHT)),  # what running a command imports
        ("%config InteractiveShell.system_raise_on_error = True", "try:\n    !nvidia-smi\n    no_gpu = False\nexcept Exception:\n    no_gpu = True",
         _branch("no_gpu", RIGHT, STUBS)),  # raises in Jupyter when the command fails, never here
        ("get_ipython().system_raise_on_error = True", f"!nvidia-smi\n{STUBS}"),  # the rest of the cell, only where it did not raise
        ("try:\n    get_ipython().run_cell_magic('bash', '', 'false')\n    ok = True\nexcept Exception:\n    ok = False", _branch("ok", STUBS, RIGHT)),
        ("import io\nfrom contextlib import redirect_stdout as grab\nbuf = io.StringIO()", "with grab(buf):\n    !echo ran", _branch("buf.getvalue()", STUBS, RIGHT)),
        ("import io, contextlib, sys\ngrab = getattr(contextlib, 'redirect_stdout')\nbuf = io.StringIO()", "with grab(buf):\n    !echo ran",
         _branch("buf.getvalue()", STUBS, RIGHT)),
        ("import io, sys\nbuf = io.StringIO()\nsys.__setattr__('stdout', buf)", "!echo ran", "sys.__setattr__('stdout', sys.__stdout__)", _branch("buf.getvalue()", STUBS, RIGHT)),
        ("%alias_magic cap capture", "%%cap c\n!echo ran", _branch("c.stdout", STUBS, RIGHT)),  # an alias of %%capture
        ("%alias_magic -c t time", "%%t\nx = !echo ran", _branch("x", STUBS, RIGHT)),  # the body of an aliased cell magic
    ],
)
def test_skipped_effects_reached_by_other_routes_cost_their_todo(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == ["todo5"]


@pytest.mark.parametrize(
    "cells",
    [
        ("%alias_magic t time", "%%t\nx = 1", RIGHT),  # an aliased magic's body, no skipped line
        ("%%bash\nls", RIGHT),  # a shell cell may raise in Jupyter: it is the whole cell, and nothing depends on it
        ("%config InteractiveShell.system_raise_on_error = True", "!pip install tqdm", RIGHT),  # may raise: nothing else in its cell
        ("!nvidia-smi", "import sys\nprint(sorted(sys.modules)[:3])", RIGHT),  # modules read, only shown
        ("!nvidia-smi", "class KVCacheManager:\n    def __repr__(self):\n        return repr(self.__dict__)"),  # an object's own attributes
    ],
)
def test_other_routes_not_reaching_a_definition_cost_nothing(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == []


@pytest.mark.parametrize(
    "cells",
    [
        # red team 33: the kernel's own state, and streams swapped by other statements
        ("%pdb on", _branch("get_ipython().call_pdb", STUBS, RIGHT)),  # a skipped debugger magic's setting
        ("%%script bash --bg\nsleep 30", "ip = get_ipython()", _branch("ip.magics_manager.registry['ScriptMagics'].bg_processes", STUBS, RIGHT)),
        ("import io, sys\nbuf = io.StringIO()\nold = sys.stdout\nfor sys.stdout in [buf]:\n    pass", "!echo ran", "for sys.stdout in [old]:\n    pass",
         _branch("buf.getvalue()", STUBS, RIGHT)),
        ("import io, sys, functools\nbuf = io.StringIO()\nfunctools.partial(setattr, sys, 'stdout')(buf)", "!echo ran", _branch("buf.getvalue()", STUBS, RIGHT)),
        ("import io, sys\nbuf = io.StringIO()\nsys.stdout.echo = buf", "!echo ran", "sys.stdout.echo = None", _branch("buf.getvalue()", STUBS, RIGHT)),
    ],
)
def test_the_kernel_state_and_other_stream_swaps_cost_their_todo(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == ["todo5"]


@pytest.mark.parametrize(
    "cells",
    [
        ("%pdb on", "get_ipython().run_line_magic('matplotlib', 'inline')", RIGHT),  # a magic run, no state read into a definition
        ("!nvidia-smi", "import sys\nold = sys.stdout\nprint('ready', file=sys.stderr)", RIGHT),  # streams only written or kept
        ("import sys, setuptools", "!pip install tqdm", "def paged_attention(q, k, v, b, s):\n    sys.stdout.write('.')\n    print(q.shape, file=sys.stderr)\n    return q"),
    ],
)
def test_kernel_and_stream_uses_not_reaching_a_definition_cost_nothing(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == []


def test_a_kernel_state_read_is_said() -> None:
    finding = skipped_values.analyse([Cell(1, "%pdb on"), Cell(2, _branch("get_ipython().call_pdb", STUBS, RIGHT))])
    items = skipped_values.apply([ItemResult("todo5.a", "todo5", Text("a", "a"), 5, PASSED)], finding, REQUIRED_NAMES)
    assert items[0].failure is not None and "the kernel state changed by `%pdb on`" in items[0].failure.message.en
    assert "the kernel's state differs from Jupyter's" in skipped_values.notes(finding, REQUIRED_NAMES)[0].en


@pytest.mark.parametrize(
    "cells",
    [
        ("%pdb on", "from IPython.core.interactiveshell import InteractiveShell", _branch("InteractiveShell.instance().call_pdb", STUBS, RIGHT)),
        ("import IPython", "%pdb on", _branch("IPython.get_ipython().call_pdb", STUBS, RIGHT)),
        ("import sys\nseen = []\nsys.displayhook = seen.append", "!!echo ran", _branch("seen and seen[0]", STUBS, RIGHT)),  # a displayed value caught
    ],
)
def test_the_shell_and_display_by_other_names_cost_their_todo(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == ["todo5"]


@pytest.mark.parametrize(
    "cells",
    [
        # red team 34: attributes reached through getattr, the shell reached or named otherwise, IPython's threads
        ("_out = getattr(get_ipython(), 'getoutput')('echo ran')", _branch("_out", STUBS, RIGHT)),
        ("import os", "getattr(get_ipython(), 'system')('touch marker')", _branch("os.path.exists('marker')", STUBS, RIGHT)),
        ("_out = get_ipython().magics_manager.magics['line']['sx']('echo ran')", _branch("_out", STUBS, RIGHT)),
        ("%pdb on", _branch("getattr(get_ipython(), 'call_pdb')", STUBS, RIGHT)),
        ("import sys", "%pdb on", _branch("sys.displayhook.shell.call_pdb", STUBS, RIGHT)),
        ("for ip in [get_ipython()]:\n    pass", "%pdb on", _branch("ip.call_pdb", STUBS, RIGHT)),
        ("def pdb_on(ip=get_ipython()):\n    return ip.call_pdb", "%pdb on", _branch("pdb_on()", STUBS, RIGHT)),
        ("!false", _branch("getattr(get_ipython(), 'user_ns')['_exit_code']", STUBS, RIGHT)),
        ("import threading\nbefore = threading.active_count()", "%%bash\necho ran", _branch("threading.active_count() > before", STUBS, RIGHT)),
    ],
)
def test_red_team_34s_routes_cost_their_todo(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == ["todo5"]


def test_using_the_shell_for_magics_only_costs_nothing() -> None:
    """The transformer's own forms (`%matplotlib inline`, `%load_ext`), a name bound to the shell
    to run magics with, and the shell's state read only to show it, beside a skipped line."""
    assert _todos("!pip install tqdm", "%matplotlib inline", "ip = get_ipython()\nip.run_line_magic('load_ext', 'autoreload')",
                  "print(get_ipython().call_pdb)", RIGHT) == []


def test_an_objects_own_attributes_are_not_the_notebooks_names() -> None:
    """`vars(self)`, `dir(self)` in a correct class, beside a skipped command or the template's
    lab cell (taken out while grading): not a read of the namespace or the loaded modules."""
    from grader.checkcalls import strip_check_calls

    lab = "try:\n    import grader\n    grader.kv_lab()\nexcept ImportError:\n    pass"
    manager = "class KVCacheManager:\n    def __repr__(self):\n        return repr(vars(self)) + repr(dir(self))"
    for first in (lab, "!pip install tqdm", "!ls"):
        cells = strip_check_calls([Cell(1, first), Cell(2, manager)])
        assert skipped_values.affected_todos(skipped_values.analyse(cells), REQUIRED_NAMES) == [], first
    assert _todos("!ls", "class KVCacheManager:\n    names = vars()") == ["todo2", "todo3", "todo4"]  # the namespace itself


def test_taking_the_shell_or_storing_into_it_does_not_stop_a_cell() -> None:
    """A correct notebook that keeps a flag in the shell's namespace before its definition, beside a
    skipped line (the corpus's rt_nb_display_get_ipython, with an install first); computing with
    the shell's state still may stop the cell (in Jupyter only, where `%pdb on` ran)."""
    cell = "ip = get_ipython()\nip.user_ns['_attention_cell_ran'] = True\n" + RIGHT
    assert _todos("!pip install tqdm", cell) == []
    assert _todos("%pdb on", "x = 1 / (1 - int(get_ipython().call_pdb))\n" + RIGHT) == ["todo5"]


def test_storing_into_an_empty_skipped_value_stops_the_cell_here_only() -> None:
    """`lst[0] = 'x'` raises while graded (`lst` is empty) and not in Jupyter: the definitions after it
    in the cell are Jupyter's alone."""
    assert _todos("lst = !echo ran", f"lst[0] = 'x'\n{STUBS}") == ["todo5"]


# Reads the loaded modules at top level, and defines code by what it finds there (red team 4's handle
# hunt): after a command, which loads modules of IPython's in Jupyter, that may differ.
READS_THE_LOADED_MODULES = {"rt4_hunts_the_handle_code.py"}


def test_every_correct_submission_with_skipped_lines_around_it_costs_nothing() -> None:
    """The over-approximation's other side: each correct file of the corpus (every style), behind an
    install, a quiet `%%capture` install, a command and a debugger magic, and before the template's
    lab cell (taken out while grading), depends on none of them."""
    from grader.checkcalls import strip_check_calls

    lab = "try:\n    import grader\n    grader.kv_lab()\nexcept ImportError:\n    pass"
    costs = {}
    paths = sorted(p for p in (CORPUS / "correct").iterdir() if p.suffix in (".py", ".ipynb") and p.name not in READS_THE_LOADED_MODULES)
    for path in paths:
        cells = load_submission(path, 1 << 24).cells
        before = [Cell(1, "!pip install tqdm"), Cell(2, "%%capture\n%pip install numpy"), Cell(3, "!nvidia-smi"), Cell(4, "%pdb off")]
        notebook = before + [Cell(c.index + 4, c.source) for c in cells] + [Cell(len(cells) + 5, lab)]
        todos = skipped_values.affected_todos(skipped_values.analyse(strip_check_calls(notebook)), REQUIRED_NAMES)
        if todos:
            costs[path.name] = todos
    assert len(paths) >= 100 and costs == {}


@pytest.mark.parametrize(
    "cells",
    [
        # red team 35: names bound by imports, the shell's singleton, threads by frames, file probes
        ("from IPython.core.interactiveshell import InteractiveShell as S", "%pdb on", _branch("S.instance().call_pdb", STUBS, RIGHT)),
        ("from IPython.core.interactiveshell import InteractiveShell", "%pdb on", _branch("InteractiveShell._instance.call_pdb", STUBS, RIGHT)),
        ("!false", "from __main__ import _exit_code as ec", _branch("ec", STUBS, RIGHT)),
        ("from sys import modules", "!true", _branch("'pexpect' in modules", STUBS, RIGHT)),
        ("import threading as th\nbefore = th.active_count()", "%%bash\necho ran", _branch("th.active_count() > before", STUBS, RIGHT)),
        ("import sys\nbefore = len(sys._current_frames())", "%%bash\necho ran", _branch("len(sys._current_frames()) > before", STUBS, RIGHT)),
        ("import os", "!mkdir made", f"try:\n    os.rmdir('made')\n    {STUBS.replace(chr(10), chr(10) + '    ')}\nexcept OSError:\n    {RIGHT.replace(chr(10), chr(10) + '    ')}"),
        ("import contextlib", "!echo 'X = 1' > probe.py", "found = False\nwith contextlib.suppress(ImportError):\n    import probe\n    found = True",
         _branch("found", STUBS, RIGHT)),
    ],
)
def test_red_team_35s_routes_cost_their_todo(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == ["todo5"]


def test_environment_and_paths_are_not_files_a_command_writes() -> None:
    """A watermark read from the environment, paths joined: beside an install, in a correct definition."""
    manager = ("import os\nclass KVCacheManager:\n    def __init__(self):\n        self.watermark = float(os.environ.get('WATERMARK', '0.01'))\n"
               "        self.threads = os.cpu_count()\n        self.where = os.path.join('a', 'b')")
    assert _todos("!pip install tqdm", manager) == []


@pytest.mark.parametrize(
    "cells",
    [
        # red team 36: what IPython runs that the reading missed, and reads it missed
        ("sx echo ran", _branch("_", STUBS, RIGHT)),  # automagic: a one-line cell is a line magic
        ("pdb on", _branch("get_ipython().call_pdb", STUBS, RIGHT)),
        ("%ls /nowhere", _branch("_exit_code", STUBS, RIGHT)),  # an alias sets _exit_code
        (f"try:\n    %pastebin -z 1\n    {RIGHT.replace(chr(10), chr(10) + '    ')}\nexcept Exception:\n    {STUBS.replace(chr(10), chr(10) + '    ')}",),
        (RIGHT, f"%conda list\n{STUBS}"),  # %conda raises outside conda: the rest of the cell is Jupyter's alone... or not
        ("\n%%capture c\n!echo ran", _branch("c.stdout", STUBS, RIGHT)),  # a blank line before a cell magic
        ("!touch marker", "\n%%writefile probe_rt36.py\nimport os\nHIT = os.path.exists('marker')", "import probe_rt36", _branch("probe_rt36.HIT", STUBS, RIGHT)),
        ("len(get_ipython().getoutput('echo ran'))", "probe = _", _branch("probe", STUBS, RIGHT)),  # shown as part of an expression
        ("import os\n!touch marker", "probe = any(map(os.path.exists, ['marker']))", _branch("probe", STUBS, RIGHT)),  # a function taken
        ("import os\nprobe = (os.path.exists('marker') for _ in range(1))", "!touch marker", "hit = next(probe)", _branch("hit", STUBS, RIGHT)),
        ("!echo 'x = 1' > helper_rt36.py", f"{RIGHT}\nimport helper_rt36\n{STUBS}"),  # an import that fails here stops the cell
        ("import subprocess\n!touch marker", "probe = subprocess.run(['test', '-e', 'marker']).returncode == 0", _branch("probe", STUBS, RIGHT)),
        ("go = get_ipython().getoutput\nout = go('echo ran')", _branch("out", STUBS, RIGHT)),  # a shell method taken, called later
        ("%time out = !echo ran", _branch("out", STUBS, RIGHT)),  # the statement of a %time line
    ],
)
def test_red_team_36_reads_of_skipped_lines_cost_their_todo(cells: tuple[str, ...]) -> None:
    assert _todos(*cells) == ["todo5"]


def test_a_script_run_after_a_command_may_bind_any_name() -> None:
    """`%run m.py` after a command that may have written m.py: any name may be the script's (red team 36)."""
    cells = ("!echo 'probe = True' > setup_rt36.py", "probe = False\n%run setup_rt36.py", _branch("probe", STUBS, RIGHT))
    assert _todos(*cells) == ["todo1", "todo2", "todo3", "todo4", "todo5"]
    assert _todos("%run setup_rt36.py", RIGHT) == []  # no command before it: the script is the notebook's own


@pytest.mark.parametrize(
    "cells",
    [
        # red team 39: an expansion in a skipped line, a module changed under a test, a name in a string, more readers of files
        ("CFG = {'bug': False}", "!echo preparing {CFG.update(bug=True)}", _branch("CFG['bug']", STUBS, RIGHT)),
        ("import math", "r = !echo hi\nif r:\n    setattr(math, 'sqrt', float)", "def paged_attention(q, k, v, b, s):\n    return q * math.sqrt(4)"),
        ("import math", "r = !echo hi\nif r:\n    [math][0].sqrt = float", "def paged_attention(q, k, v, b, s):\n    return q * math.sqrt(4)"),
        ("!nvidia-smi -L", "import typing\ndef _probe(x: '_exit_code'): pass\nBUG = typing.get_type_hints(_probe)['x'] != 0", _branch("BUG", STUBS, RIGHT)),
        ("!echo 1 > flag", "import traceback\nBUG = bool(traceback.FrameSummary('flag', 1, 'x').line)", _branch("BUG", STUBS, RIGHT)),
        ("!echo 1 > flag", "import logging\ntry:\n    BUG = bool(logging.FileHandler('flag', mode='r').stream.read())\nexcept OSError:\n    BUG = False",
         _branch("BUG", STUBS, RIGHT)),
        ("!echo 1 > flag", "import pandas\nBUG = len(pandas.read_table('flag', header=None)) > 0", _branch("BUG", STUBS, RIGHT)),
        ("%pylab inline", "!echo 1 > flag", "BUG = fromregex('flag', r'(\\d)', [('a', int)]).size > 0", _branch("BUG", STUBS, RIGHT)),
        ("%config InteractiveShell.system_raise_{'on'}_error = True", "BUG = True\n!nvidia-smi -L\nBUG = False", _branch("BUG", STUBS, RIGHT)),
    ],
)
def test_red_team_39s_routes_cost_their_todo(cells: tuple[str, ...]) -> None:
    assert "todo5" in _todos(*cells)


def test_realistic_definitions_beside_a_command_cost_nothing() -> None:
    """Red team 39's correct notebooks that a stricter reading failed: nonlocal helpers, a message
    template, contextlib, logging, a global counter, a SimpleNamespace config, beside `!nvidia-smi`."""
    body = ("import contextlib, logging, types\nlog = logging.getLogger('kv')\nCFG = types.SimpleNamespace(eps=0.0)\nTEMPLATE = 'need {} blocks'\n"
            "COUNT = 0\ndef paged_attention(q, k, v, b, s):\n    global COUNT\n    COUNT += 1\n    total = 0\n    def add(x):\n        nonlocal total\n"
            "        total += x\n    add(1)\n    with contextlib.nullcontext():\n        log.debug(TEMPLATE.format(total))\n    return q + CFG.eps")
    assert _todos("!nvidia-smi", body) == []
    assert _todos("%pip install einops", "!echo {1 + 1}", RIGHT) == []  # an expansion that names nothing


def test_the_solution_notebook_with_its_own_cells_behind_skipped_lines_costs_nothing() -> None:
    """The notebook's own cells (the self-checks format a failure's traceback, the lab cell imports
    the grader) around a student's install, command and debugger lines cost nothing."""
    from grader.checkcalls import strip_check_calls

    cells = load_submission(CORPUS.parent.parent / "notebooks" / "paged_attention_solution.ipynb", 1 << 24).cells
    before = [Cell(1, "!pip install tqdm"), Cell(2, "%%capture\n%pip install numpy"), Cell(3, "!nvidia-smi"), Cell(4, "%pdb off")]
    notebook = strip_check_calls(before + [Cell(c.index + 4, c.source) for c in cells])
    assert skipped_values.affected_todos(skipped_values.analyse(notebook), REQUIRED_NAMES) == []
