"""One mistake, one item: how many single-mistake corpus files lose more than their mistake breaks.

    .venv/bin/python benchmarks/one_mistake.py [--jobs 2] [--json out.json] [FILE ...]
    .venv/bin/python benchmarks/one_mistake.py --from-json before.json    # the figure of a saved run
    .venv/bin/python benchmarks/one_mistake.py --json out.json --declare  # write the missing `# breaks:` lines

Run it from the checkout whose grader you measure.  It grades every file of
tests/corpus/buggy (or the files given) with the public seed and prints, per file, the items
it lost and how.  The items a file's mistake breaks are declared in its header, `# breaks:
item, ...` (the second line): the items that fail on a case of their own property, with a
reproduction of their own.  A file *over-fails* when it loses any other item: one lost as
"not exercised" or "too slow" (another item's failure kept its cases from being checked;
the card says which, `blocked_by`), one an ablation wrongly blamed, one outside its TODO.
Without a declaration, an item counts as broken when it failed on a case of its own
(kind wrong or error) inside the file's TODO.  `--declare` writes that set as the file's
declaration where it has none (review it: the declaration is the corpus's claim, the grader
is measured against it).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
from pathlib import Path

ROOT = Path.cwd()  # the grader under test: run from the checkout whose grader you measure
sys.path.insert(0, str(ROOT))

COLLATERAL = ("not_exercised", "too_slow")


def header(path: Path) -> list[str]:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        source = next(c["source"] for c in cells if c["cell_type"] == "code")
        text = "".join(source) if isinstance(source, list) else source
    else:
        text = path.read_text(encoding="utf-8")
    return text.splitlines()[:3]


def declared(path: Path) -> tuple[str, set[str] | None]:
    lines = header(path)
    todo = lines[0].removeprefix("# corpus: expect-fail ").split()[0]
    breaks = next((line.removeprefix("# breaks:").strip() for line in lines[1:] if line.startswith("# breaks:")), None)
    return todo, ({item.strip() for item in breaks.split(",")} if breaks else None)


def files(given: list[str]) -> list[Path]:
    if given:
        return [Path(p).resolve() for p in given]
    buggy = ROOT / "tests" / "corpus" / "buggy"
    found = [p for p in buggy.iterdir() if p.suffix in (".py", ".ipynb")] + [nb for d in buggy.iterdir() if d.is_dir() for nb in d.glob("*.ipynb")]
    return sorted(p for p in found if not declared(p)[0].endswith("cuda") and "cuda" not in header(p)[0].split())


def grade_one(path: Path) -> tuple[str, list[dict]]:
    from grader.config import load_config
    from grader.grade import grade_path

    alone = path.parent.parent.name == "corpus"
    result = grade_path(path, load_config(), "cpu", alone=alone)
    lost = [
        {"id": i.id, "todo": i.todo, "kind": i.failure.kind if i.failure else "", "message": i.failure.message.en[:200] if i.failure else "",
         "blocked_by": getattr(i, "blocked_by", "") or ""}
        for i in result.items if i.status == "failed"
    ]
    return str(path), lost


def over_fails(path: Path, lost: list[dict]) -> list[str]:
    """The items this file loses that its mistake does not break (see the module's docstring)."""
    todo, breaks = declared(path)
    if breaks is None:
        breaks = {i["id"] for i in lost if i["kind"] not in COLLATERAL and i["todo"] == todo}
    return [i["id"] for i in lost if i["id"] not in breaks]


def declare(path: Path, lost: list[dict]) -> bool:
    """Write `# breaks:` (the items lost on cases of their own) as the file's second line, if it has none."""
    todo, breaks = declared(path)
    own = sorted(i["id"] for i in lost if i["kind"] not in COLLATERAL and i["todo"] == todo)
    if breaks is not None or not own:
        return False
    line = "# breaks: " + ", ".join(own)
    if path.suffix == ".ipynb":
        notebook = json.loads(path.read_text(encoding="utf-8"))
        cell = next(c for c in notebook["cells"] if c["cell_type"] == "code")
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        first, _, rest = source.partition("\n")
        text = f"{first}\n{line}\n{rest}"
        cell["source"] = text.splitlines(keepends=True) if isinstance(cell["source"], list) else text
        path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    else:
        first, _, rest = path.read_text(encoding="utf-8").partition("\n")
        path.write_text(f"{first}\n{line}\n{rest}", encoding="utf-8")
    return True


def report(results: dict[str, list[dict]]) -> dict[str, list[str]]:
    over = {name: over_fails(Path(name), lost) for name, lost in results.items()}
    bad = {name: items for name, items in over.items() if items}
    print(f"\n{len(bad)} of {len(results)} single-mistake files lose more than their mistake breaks ({100 * len(bad) / max(1, len(results)):.1f} %)")
    for name, items in sorted(bad.items()):
        kinds = {i["id"]: i["kind"] + (f" blocked by {i['blocked_by']}" if i["blocked_by"] else "") for i in results[name]}
        print(f"  {Path(name).name}: {', '.join(f'{item} ({kinds[item]})' for item in items)}")
    return over


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--from-json", type=Path, help="a saved run's results, judged against this checkout's declarations")
    parser.add_argument("--declare", action="store_true", help="write the missing `# breaks:` lines from the results")
    args = parser.parse_args()
    if args.from_json:
        saved = json.loads(args.from_json.read_text(encoding="utf-8"))["results"]
        here = {p.name: p for p in files([])}
        results = {str(here[Path(name).name]): lost for name, lost in saved.items() if Path(name).name in here}
    else:
        os.environ.pop("PA_GRADER_SECRET", None)
        os.environ["PA_GRADER_SECRET_FILE"] = os.devnull  # the public seed, as the tests grade
        results = {}
        with multiprocessing.get_context("fork").Pool(max(1, args.jobs)) as pool:
            for name, lost in pool.imap_unordered(grade_one, files(args.files)):
                results[name] = lost
                print(f"{Path(name).name}: " + ", ".join(f"{i['id']}({i['kind']})" for i in lost), flush=True)
    if args.declare:
        written = [name for name, lost in results.items() if declare(Path(name), lost)]
        print(f"declared the items broken in {len(written)} files")
    over = report(results)
    if args.json and not args.from_json:
        args.json.write_text(json.dumps({"results": results, "over": over}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
