"""What runs a notebook's cells in the worker: IPython's own InteractiveShell, set up as ipykernel
sets up a notebook's kernel, less what must not happen while grading.

Part of the worker (worker.py loads it by path; standard library and IPython only).  Each
cell goes through the path a kernel's `execute_request` takes (ipykernel's `do_execute`):
IPython transforms it (magics, `!`, `?`), runs it with `run_cell`, inside a running asyncio
event loop (so top-level `await` works and `asyncio.run()` fails, as in Jupyter), with
`_`, `__`, `Out[n]`, `In[n]`, `display()`, `get_ipython()` and every magic as IPython has
them.  As in a kernel started by nbclient (allow_stdin=False): `input()` and `getpass()`
raise StdinNotImplementedError, the kernel's own magics exist (`%autosave`, `%store`, ...),
matplotlib draws with the inline backend (Agg), a `?` help page goes to no pager, and an
error in a displayed value's repr fails the cell.

Not run while grading, each reported to the judge as a skipped line with its reason
(`skipped(text, reason)`): shell commands (`!cmd`, `%%bash`, `%sx`, aliases such as `%ls`),
installs (`%pip`, `%conda`), debuggers (`%debug`, `%pdb`, `breakpoint()`, `set_trace()`, any
debugger prompt), what needs the network (`%load URL`, `%pastebin`) and programs a front end
would start (`%qtconsole`).  docs/notebooks.md's table lists every magic and what it does here.
"""

from builtins import Exception, int, len, list, next, print, set, str  # noqa: I001, UP029
import ast
import asyncio
import bdb
import builtins
import getpass
import linecache
import os
import pdb
import sys

from IPython.core.compilerop import CachingCompiler
from IPython.core.error import StdinNotImplementedError, UsageError
from IPython.core.interactiveshell import InteractiveShell, _asyncio_runner
from IPython.utils.text import LSString, SList
from traitlets.config import Config

SHELL, INSTALL, DEBUGGER, NETWORK, PROGRAM = "shell", "install", "debugger", "network", "program"
SKIPPED_LINE_MAGICS = {
    "sx": SHELL, "system": SHELL,
    "pip": INSTALL, "conda": INSTALL, "mamba": INSTALL, "micromamba": INSTALL, "uv": INSTALL,
    "debug": DEBUGGER, "pdb": DEBUGGER,
    "pastebin": NETWORK,
    "qtconsole": PROGRAM,
}
SKIPPED_CELL_MAGICS = {
    "bash": SHELL, "sh": SHELL, "script": SHELL, "perl": SHELL, "ruby": SHELL, "python": SHELL,
    "python2": SHELL, "python3": SHELL, "pypy": SHELL, "sx": SHELL, "system": SHELL, "!": SHELL,
    "debug": DEBUGGER,
}
INSTALLERS = ("pip", "pip3", "conda", "mamba", "micromamba", "uv", "apt", "apt-get")
MAX_SKIPPED = 50  # reported lines per grading (a skipped line in a loop is reported once anyway)
INPUT_MESSAGE = "raw_input was called, but this frontend does not support input requests."
GETPASS_MESSAGE = "getpass was called, but this frontend does not support input requests."
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
NO_EVENT_LOOP = (None, "inline", "nbagg", "webagg", "notebook", "ipympl", "widget")  # ipykernel's eventloops.loop_map


class CellCompiler(CachingCompiler):
    """Names each cell's code `<cell N>` (N: the notebook's code cell) for the judge's reports.

    The body of a cell magic (`%%capture`) is run as a cell of its own by IPython: its lines
    are counted from the cell's first line, so that a line number is the cell's."""

    def __init__(self, shell):
        super().__init__()
        self.shell = shell

    def get_code_name(self, raw_code, transformed_code, number):
        index = self.shell.cell_index
        return super().get_code_name(raw_code, transformed_code, number) if index is None else f"<cell {index}>"

    def ast_parse(self, source, filename="<unknown>", symbol="exec"):
        tree = super().ast_parse(source, filename, symbol)
        offset = self.shell.body_offset
        if offset and filename.startswith("<cell "):
            ast.increment_lineno(tree, offset)
        return tree

    def cache(self, transformed_code, number=0, raw_code=None):
        name = super().cache(transformed_code, number, raw_code)
        offset = self.shell.body_offset
        if offset and name.startswith("<cell ") and name in linecache.cache:  # its lines where they are numbered
            size, mtime, lines, fullname = linecache.cache[name]
            linecache.cache[name] = (size, mtime, ["\n"] * offset + list(lines), fullname)
        return name


class GradingShell(InteractiveShell):
    """InteractiveShell with a kernel's behaviour and without shell commands."""

    cell_index = None  # the notebook cell running now (None: not a cell, e.g. a graded call)
    cell_source = ""
    body_offset = 0
    shown_error = None  # the first exception a traceback was shown for while the cell ran
    on_skip = None  # called with (cell, line, text, reason) for each skipped line while the cells run

    def __init__(self, **kwargs):
        self.skipped_seen = set()
        self.skipped_count = 0
        super().__init__(**kwargs)

    def init_instance_attrs(self):
        super().init_instance_attrs()
        self.compile = CellCompiler(self)

    def init_hooks(self):
        super().init_hooks()
        # A kernel sends help pages (`x?`, %pdoc, %pycat) to the front end's pager, not to the output.
        self.set_hook("show_in_pager", lambda *args, **kwargs: None, 99)

    def _showtraceback(self, etype, evalue, stb):
        # A kernel sends each shown traceback to the notebook as an error output, also when the
        # cell itself goes on (a %%capture body that raised, a displayed value whose repr raised).
        if self.cell_index is not None and self.shown_error is None:
            self.shown_error = evalue
        return super()._showtraceback(etype, evalue, stb)

    # -- what is skipped ---------------------------------------------------------------
    def skipped(self, text, reason):
        """Report a line that did not run, with the line of the cell it came from (the cell's frame
        calling into IPython), as the cell has it.  Outside the cells (a graded call) nothing is said."""
        if self.cell_index is None or self.on_skip is None:
            return
        line = None
        frame = sys._getframe(1)
        name = f"<cell {self.cell_index}>"
        while frame is not None:
            if frame.f_code.co_filename == name:
                line = frame.f_lineno
                break
            frame = frame.f_back
        lines = self.cell_source.split("\n")
        if line is not None and 0 < line <= len(lines) and lines[line - 1].strip():
            text = lines[line - 1].strip()
        key = (self.cell_index, line, reason, text)
        if key in self.skipped_seen or self.skipped_count >= MAX_SKIPPED:
            return
        self.skipped_seen.add(key)
        self.skipped_count += 1
        self.on_skip(self.cell_index, line, str(text)[:300], reason)

    def system_piped(self, cmd):
        self.skipped("!" + str(cmd), _shell_reason(cmd))
        self.user_ns["_exit_code"] = 0

    system = system_piped
    system_raw = system_piped

    def getoutput(self, cmd, split=True, depth=0):
        self.skipped("!" + str(cmd), _shell_reason(cmd))
        return SList() if split else LSString("")

    def ask_exit(self):
        """`exit()` / `quit()`: a kernel asks its front end to close, which nbclient ignores; the cells go on."""
        self.exit_now = False

    def debugger(self, force=False):
        if force or self.call_pdb:
            self.skipped("%debug", DEBUGGER)

    def enable_gui(self, gui=None):
        """As ipykernel's: the inline and web backends need no event loop; a GUI toolkit's cannot run here."""
        if gui not in NO_EVENT_LOOP:
            raise UsageError(f"GUI event loop {gui!r} is not available while grading (no display)")
        self.active_eventloop = gui

    def run_cell_magic(self, magic_name, line, cell):
        """The body of a cell's own cell magic counts its lines from the cell's (the magic's line is 1)."""
        outer = self.body_offset
        if self.cell_index is not None and not outer:
            lines = self.cell_source.split("\n")
            self.body_offset = next((i + 1 for i, text in enumerate(lines) if text.startswith("%%")), 0)
        try:
            return super().run_cell_magic(magic_name, line, cell)
        finally:
            self.body_offset = outer


def _shell_reason(cmd):
    """`!pip install x` is an install; any other command a shell command."""
    words = str(cmd).split()
    while words and ("=" in words[0] or words[0] in ("sudo", "python", "python3", "-m", "-q")):
        words.pop(0)
    return INSTALL if words and words[0] in INSTALLERS else SHELL


def _skip_magic(shell, name, reason, cell=False):
    def line_magic(line):
        shell.skipped(("%%" if cell else "%") + name + (" " + line if line else ""), reason)
        return None

    def cell_magic(line, body):
        return line_magic(line)

    return cell_magic if cell else line_magic


def _kernel_magics(shell):
    """The line magics ipykernel adds (zmqshell.KernelMagics), as they behave under nbclient: the
    front end they talk to is not there, so they only print what the kernel prints."""

    def autosave(line):
        seconds = line.strip()
        if seconds.isdigit():
            print("Autosave disabled" if int(seconds) == 0 else f"Autosaving every {seconds} seconds")
        return None

    def connect_info(line):
        print("(no kernel connection while grading)")

    def nothing(line):
        return None

    for name, function in (("autosave", autosave), ("connect_info", connect_info), ("clear", nothing), ("less", nothing),
                           ("more", nothing), ("man", nothing), ("edit", nothing), ("ed", nothing), ("subshell", nothing)):
        shell.register_magic_function(function, "line", name)


def _load_magic(shell):
    """%load as IPython has it, except from a URL (no network while grading)."""
    original = shell.find_line_magic("load")

    def load(line):
        if "://" in line:
            shell.skipped("%load " + line, NETWORK)
            return None
        return original(line)

    shell.register_magic_function(load, "line", "load")


def _no_stdin(*args, **kwargs):
    raise StdinNotImplementedError(INPUT_MESSAGE)


def _no_getpass(*args, **kwargs):
    raise StdinNotImplementedError(GETPASS_MESSAGE)


def _no_debugger(shell):
    """breakpoint(), pdb.set_trace() and any debugger prompt return at once, reported."""

    def breakpointhook(*args, **kwargs):
        shell.skipped("breakpoint()", DEBUGGER)

    def set_trace(self, frame=None, *args, **kwargs):
        shell.skipped("set_trace()", DEBUGGER)

    def interaction(self, *args, **kwargs):
        shell.skipped("debugger prompt", DEBUGGER)

    sys.breakpointhook = breakpointhook
    bdb.Bdb.set_trace = set_trace
    pdb.Pdb.interaction = interaction


def make_shell(notebook=True):
    """The grading's shell (one per worker, made before the first cell).  `notebook` False (a .py
    submission): nothing is displayed for a cell's last expression, as a script shows nothing."""
    os.environ.setdefault("MPLBACKEND", INLINE_BACKEND)  # what ipykernel sets before any cell
    config = Config()
    config.HistoryManager.hist_file = ":memory:"  # a kernel started by nbclient keeps it in memory too
    config.InteractiveShell.colors = "nocolor"
    config.InteractiveShell.ast_node_interactivity = "last_expr" if notebook else "none"
    shell = GradingShell.instance(config=config)
    # Only the text of what is displayed is kept (output is feedback); richer formats would be
    # computed for nobody (a figure's PNG), and an error in one never fails a cell anyway.
    shell.display_formatter.active_types = ["text/plain"]
    _kernel_magics(shell)
    _load_magic(shell)
    for name, reason in SKIPPED_LINE_MAGICS.items():
        shell.register_magic_function(_skip_magic(shell, name, reason), "line", name)
    for name, reason in SKIPPED_CELL_MAGICS.items():
        shell.register_magic_function(_skip_magic(shell, name, reason, cell=True), "cell", name)
    try:
        shell.extension_manager.load_extension("storemagic")  # IPKernelApp's default extension
    except Exception:
        pass
    builtins.input = _no_stdin
    getpass.getpass = _no_getpass
    _no_debugger(shell)
    return shell


def add_working_directory():
    """'' on sys.path where IPython puts it (before the first site-packages: after the standard library)."""
    if "" in sys.path:
        return
    for index, path in enumerate(sys.path):
        if os.path.basename(path) in ("site-packages", "dist-packages"):
            sys.path.insert(index, "")
            return
    sys.path.insert(0, "")


async def execute(shell, index, source):
    """One cell, as ipykernel's do_execute runs it (awaited inside a running event loop).
    Returns the exception that failed the cell (the first one shown, as the notebook's first
    error output), or None."""
    shell.cell_index, shell.cell_source, shell.shown_error = index, source, None
    try:
        preprocessing = None
        try:
            transformed = shell.transform_cell(source)
        except Exception:
            transformed = source
            preprocessing = sys.exc_info()
        if shell.loop_runner is _asyncio_runner and shell.should_run_async(
            source, transformed_cell=transformed, preprocessing_exc_tuple=preprocessing
        ):
            result = None
            try:
                result = await shell.run_cell_async(
                    source, store_history=True, silent=False, transformed_cell=transformed, preprocessing_exc_tuple=preprocessing
                )
            finally:
                shell.events.trigger("post_execute")
                shell.events.trigger("post_run_cell", result)
        else:
            result = shell.run_cell(source, store_history=True, silent=False)
        await asyncio.sleep(0)  # what the cell left scheduled gets a turn, as between a kernel's requests
    finally:
        shell.cell_index, shell.cell_source = None, ""
    error = result.error_before_exec if result.error_before_exec is not None else result.error_in_exec
    return shell.shown_error if shell.shown_error is not None else error

