"""Which of a student's files is their submission: one rule for Gradescope and grade-batch.

1. the file the assignment names ([submission] file in config.toml, `paged_attention_student.ipynb`),
   exactly, else with another case (`Paged_Attention_Student.ipynb`); the shallowest if it lies
   in several folders (a repository with copies below);
2. otherwise the only notebook (.ipynb);
3. otherwise, when there is no notebook at all, the only Python file (.py);
4. otherwise none: the caller says what it found and what to hand in.

A notebook with a helper .py beside it is the notebook (rule 2), as a TA expects; a stray
`Untitled.ipynb` beside the named notebook changes nothing (rule 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

NOTEBOOK, SCRIPT = ".ipynb", ".py"
GRADABLE = (NOTEBOOK, SCRIPT)


@dataclass(frozen=True)
class Choice:
    path: Path | None  # None: no file is unambiguously the submission
    rule: str  # "named", "only notebook", "only script", or why none: "several", "none"


def choose(files: Sequence[Path], named: str) -> Choice:
    """The submission among `files` (regular files; non-gradable ones are ignored), by the rules above."""
    gradable = [p for p in files if p.suffix.lower() in GRADABLE]
    for same in (lambda p: p.name == named, lambda p: p.name.casefold() == named.casefold()):
        matches = [p for p in gradable if same(p)]
        if matches:
            depth = min(len(p.parts) for p in matches)
            shallowest = [p for p in matches if len(p.parts) == depth]
            if len(shallowest) == 1:
                return Choice(shallowest[0], "named")
            return Choice(None, "several")
    notebooks = [p for p in gradable if p.suffix.lower() == NOTEBOOK]
    if len(notebooks) == 1:
        return Choice(notebooks[0], "only notebook")
    scripts = [p for p in gradable if p.suffix.lower() == SCRIPT]
    if not notebooks and len(scripts) == 1:
        return Choice(scripts[0], "only script")
    return Choice(None, "several" if gradable else "none")


def notebook_in(folder: Path, named: str) -> str | None:
    """The notebook a kernel started in `folder` most likely runs, for a card's title when the
    front end does not say (nbclient, classic Jupyter set no JPY_SESSION_NAME): the assignment's
    file if it is there, else the only notebook there; None when that cannot be told."""
    try:
        notebooks = sorted(p for p in folder.iterdir() if p.suffix.lower() == NOTEBOOK and not p.name.startswith(".") and p.is_file())
    except OSError:
        return None
    choice = choose(notebooks, named)
    return choice.path.name if choice.path is not None and choice.rule in ("named", "only notebook") else None
