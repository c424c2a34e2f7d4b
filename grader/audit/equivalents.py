"""The reviewed list of equivalent mutants: changes that keep the behaviour the contract asks for.

No grader can kill such a mutant, so it is left out of the kill rate and shown apart, with
its reason.  The list lives next to the exercise's source (it quotes answer lines, and
nothing of the answer may enter the installed grader) and names mutants by their stable id.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tomllib

FILENAME = Path("notebooks/source/equivalent_mutants.toml")


@dataclass(frozen=True)
class Equivalent:
    id: str
    reason: str
    change: str = ""  # the change, for the reviewer; the id alone decides


def load(path: Path) -> dict[str, Equivalent]:
    """id -> entry; a missing file is an empty list.  Raises ValueError for a malformed one."""
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: {error}") from None
    entries: dict[str, Equivalent] = {}
    for index, raw in enumerate(data.get("equivalent", [])):
        where = f"{path}: [[equivalent]] #{index + 1}"
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not raw["id"]:
            raise ValueError(f"{where}: needs an id")
        reason = raw.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"{where} ({raw['id']}): needs a one-line reason")
        if raw["id"] in entries:
            raise ValueError(f"{where}: {raw['id']} is listed twice")
        entries[raw["id"]] = Equivalent(raw["id"], reason.strip(), str(raw.get("change", "")))
    return entries
