"""The term's grading configuration (grader/config.toml), read into typed, frozen objects."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import tomllib

DEFAULT_PATH = Path(__file__).with_name("config.toml")
DEFAULT_SUBMISSION_FILE = "paged_attention_student.ipynb"
TODOS = ("todo1", "todo2", "todo3", "todo4", "todo5")


@dataclass(frozen=True)
class HypothesisSettings:
    seed: int
    max_examples: int
    stateful_examples: int
    stateful_steps: int
    attention_examples: int


@dataclass(frozen=True)
class Evidence:
    """How many random cases an item must complete and check before it may pass."""

    min_random: int = 20
    max_rounds: int = 6
    per_item: tuple[tuple[str, int], ...] = ()

    def minimum(self, item_id: str) -> int:
        return dict(self.per_item).get(item_id, self.min_random)


@dataclass(frozen=True)
class Limits:
    cell_timeout_s: float
    call_timeout_s: float
    item_budget_s: float
    total_budget_s: float
    memory_mb: int
    output_kb: int
    max_file_mb: int
    pids: int = 128  # processes and threads of the whole submission
    open_files: int = 256  # descriptors per process
    file_mb: int = 64  # largest file the submission may write (also each tmpfs the sandbox mounts)
    disk_mb: int = 512  # all the submission may write in its directory together (a tmpfs)
    inodes: int = 10000  # files and folders it may make there
    wall_backstop: float = 3.0  # each CPU-time limit, times this, is also a limit in wall-clock time


@dataclass(frozen=True)
class Feedback:
    language: str
    max_repro_lines: int
    show_traceback: bool


@dataclass(frozen=True)
class NotebookEnvironment:
    """What a notebook finds around it while graded ([notebook] in config.toml)."""

    packages: tuple[str, ...] = ()  # pip requirements the course's notebooks may import (installed with the grader)
    folder_files: int = 500  # files of the notebook's folder copied next to it, at most
    folder_mb: int = 64  # their bytes, at most
    folder_depth: int = 8  # folder levels below the notebook's, at most

    def import_names(self) -> list[str]:
        """The module each package is imported as (`python-dateutil` -> `dateutil` is not guessed: name it so)."""
        names = []
        for requirement in self.packages:
            name = requirement.split(";")[0].strip()
            for stop in "<>=!~[ ":
                name = name.split(stop)[0]
            names.append(name.strip().lower().replace("-", "_"))
        return names


@dataclass(frozen=True)
class RubricItem:
    id: str
    todo: str
    weight: float
    zh: str
    en: str
    device: str = "cpu"

    def title(self, lang: str) -> str:
        return self.zh if lang == "zh" else self.en


@dataclass(frozen=True)
class Config:
    hypothesis: HypothesisSettings
    limits: Limits
    feedback: Feedback
    zero_on_flag: bool
    items: tuple[RubricItem, ...]
    digest: str  # identifies this configuration and the grader's code in gradebooks and caches
    evidence: Evidence = Evidence()
    seed_source: str = "config"  # "config", or "command line" (--seed): never replaced by a secret one
    notebook: NotebookEnvironment = NotebookEnvironment()
    # The file students hand in ([submission] file): where several are uploaded (Gradescope) or a
    # student's folder holds several notebooks (grade-batch), this one is graded.
    submission_file: str = DEFAULT_SUBMISSION_FILE
    tamper_policy: str = "zero_items"  # [integrity] tamper: what touching the grader's machinery costs (grader/tampering.py)

    def item(self, item_id: str) -> RubricItem:
        for item in self.items:
            if item.id == item_id:
                return item
        raise KeyError(item_id)


def load_config(path: Path | None = None) -> Config:
    raw_bytes = (path or DEFAULT_PATH).read_bytes()
    raw = tomllib.loads(raw_bytes.decode("utf-8"))
    items = tuple(RubricItem(**entry) for entry in raw["items"])
    ids = [item.id for item in items]
    if len(set(ids)) != len(ids):
        raise ValueError("rubric item ids must be unique")
    unknown = {item.todo for item in items} - set(TODOS)
    if unknown:
        raise ValueError(f"unknown TODO names in rubric: {sorted(unknown)}")
    return Config(
        hypothesis=HypothesisSettings(**raw["hypothesis"]),
        limits=Limits(**raw["limits"]),
        feedback=Feedback(**raw["feedback"]),
        zero_on_flag=bool(raw.get("integrity", {}).get("zero_on_flag", True)),
        items=items,
        digest=hashlib.sha256(raw_bytes + b"\0" + grader_fingerprint()).hexdigest()[:16],
        evidence=_evidence(raw.get("evidence", {})),
        notebook=_notebook(raw.get("notebook", {})),
        submission_file=_submission_file(raw.get("submission", {})),
        tamper_policy=_tamper_policy(raw.get("integrity", {})),
    )


@cache
def grader_fingerprint() -> bytes:
    """The grader's own code and data (every file of this package but caches): a grade made by
    another version of the grader is not kept by a batch as unchanged (batch.py)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".json", ".toml", ".js", ".css", ".html"):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.digest()


def _submission_file(raw: dict) -> str:
    name = raw.get("file", DEFAULT_SUBMISSION_FILE)
    if not isinstance(name, str) or not name.strip() or "/" in name or "\\" in name or name.strip() in (".", ".."):
        raise ValueError("[submission] file must be a file name, like paged_attention_student.ipynb")
    return name.strip()


def _tamper_policy(raw: dict) -> str:
    policy = raw.get("tamper", "zero_items")
    if policy not in ("zero_items", "zero_all", "flag"):
        raise ValueError('[integrity] tamper must be "zero_items", "zero_all" or "flag"')
    return str(policy)


def _evidence(raw: dict) -> Evidence:
    per_item = raw.get("per_item", {})
    return Evidence(
        min_random=int(raw.get("min_random", 20)),
        max_rounds=int(raw.get("max_rounds", 6)),
        per_item=tuple(sorted((str(k), int(v)) for k, v in per_item.items())),
    )


def _notebook(raw: dict) -> NotebookEnvironment:
    packages = raw.get("packages", [])
    if not isinstance(packages, list) or not all(isinstance(p, str) and p.strip() for p in packages):
        raise ValueError("[notebook] packages must be a list of pip requirements")
    return NotebookEnvironment(**{**raw, "packages": tuple(p.strip() for p in packages)})
