"""One mistake, one item: how many single-mistake corpus files lose more than their mistake breaks.

    .venv/bin/python benchmarks/one_mistake.py [--jobs 2] [--json out.json] [FILE ...]

Grades every file of tests/corpus/buggy (or the files given) with the public seed and prints,
per file, the items it lost and how.  A file *over-fails* when it loses an item that its
mistake does not break, which the grader itself shows in two ways:

- an item lost as "not exercised" or "too slow" (its property never seen broken: another
  item's failure kept its cases from being checked), while another item of the TODO failed
  on a case of its own;
- an item lost outside the TODO the file declares (`# corpus: expect-fail todoN`).

Items lost on a reproduction of their own (a wrong result, an error) are the mistake's: an
attention mistake wrong with every feature off costs every attention item on purpose
(docs/grading.md, ablation), and a file that declares `# breaks: item, ...` on its second or
third line is held to that list too (an item lost outside it over-fails).
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
    own = [i for i in lost if i["kind"] not in COLLATERAL]
    extra = [i["id"] for i in lost if i["todo"] != todo]
    if own:
        extra += [i["id"] for i in lost if i["kind"] in COLLATERAL and i["todo"] == todo]
    if breaks is not None:
        extra += [i["id"] for i in lost if i["id"] not in breaks and i["id"] not in extra]
    return extra


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ.pop("PA_GRADER_SECRET", None)
    os.environ["PA_GRADER_SECRET_FILE"] = os.devnull  # the public seed, as the tests grade
    paths = files(args.files)
    results: dict[str, list[dict]] = {}
    with multiprocessing.get_context("fork").Pool(max(1, args.jobs)) as pool:
        for name, lost in pool.imap_unordered(grade_one, paths):
            results[name] = lost
            print(f"{Path(name).name}: " + ", ".join(f"{i['id']}({i['kind']})" for i in lost), flush=True)
    over = {name: over_fails(Path(name), lost) for name, lost in results.items()}
    bad = {name: items for name, items in over.items() if items}
    print(f"\n{len(bad)} of {len(results)} single-mistake files lose more than their mistake breaks ({100 * len(bad) / max(1, len(results)):.1f} %)")
    for name, items in sorted(bad.items()):
        print(f"  {Path(name).name}: {', '.join(items)}")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "over": over}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
