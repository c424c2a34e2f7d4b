"""`audit`: mutation testing of the grader.  Plant one small bug at a time in the exercise's
answer, grade each mutant, and report how many the grader caught, per TODO.

Exit status: 0 every TODO reaches the target kill rate (and no grading failed); 1 it does
not; 2 the audit cannot run here (outside a checkout, a malformed equivalents file);
130 interrupted.  `--list` only lists the mutants.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

EXIT_OK, EXIT_BELOW, EXIT_CANNOT, EXIT_INTERRUPTED = 0, 1, 2, 130


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("audit", help="mutation testing of the grader (needs the repository)")
    p.add_argument(
        "-j", "--jobs", type=int, default=os.cpu_count() or 1, help="mutants graded at once (default: all cores)"
    )
    p.add_argument("--todo", default=None, metavar="todoK", help="only the mutants of this TODO")
    p.add_argument(
        "--sample", type=int, default=None, metavar="N", help="grade a fixed sample of N mutants (TODOs take turns)"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="which sample --sample takes (default 0); not the hypothesis seed"
    )
    p.add_argument(
        "--id", action="append", default=None, metavar="ID", help="only this mutant (repeatable): re-check a survivor"
    )
    p.add_argument("--list", action="store_true", help="list the mutants (id, TODO, change) without grading")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the full report as JSON")
    p.add_argument("--root", type=Path, default=Path("."), help="the repository's root (default: current directory)")
    p.add_argument(
        "--equivalents",
        type=Path,
        default=None,
        help="reviewed equivalent mutants (default: ROOT/notebooks/source/equivalent_mutants.toml)",
    )
    p.add_argument("--config", type=Path, default=None, help="grading configuration (default: grader/config.toml)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where attention is checked (default: cpu)")
    p.add_argument(
        "--all-items", action="store_true", help="grade every rubric item for each mutant, not only its TODO's"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds one grading may take (default: the configured total budget + 120)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from grader.audit import equivalents, mutants, regions
    from grader.audit.report import Audit, render, to_json
    from grader.audit.run import Options, grade_all
    from grader.config import TODOS, load_config

    if args.todo is not None and args.todo not in (*TODOS, "given"):
        print(f"audit: --todo must be one of {', '.join(TODOS)}, given", file=sys.stderr)
        return EXIT_CANNOT
    try:
        source = regions.source_path(args.root)
        listed = equivalents.load(args.equivalents or args.root / equivalents.FILENAME)
    except (regions.NoRepository, ValueError) as error:
        print(f"audit: {error}", file=sys.stderr)
        return EXIT_CANNOT
    every = mutants.generate(source.read_text(encoding="utf-8"))
    chosen = mutants.select(every, args.todo)
    if args.id:
        unknown = sorted(set(args.id) - {m.id for m in chosen})
        if unknown:
            print(f"audit: no such mutant{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}", file=sys.stderr)
            return EXIT_CANNOT
        chosen = [m for m in chosen if m.id in args.id]
    if args.sample is not None:
        chosen = mutants.sample(chosen, args.sample, args.seed)
    if args.list:
        for m in chosen:
            flag = "  [equivalent]" if m.id in listed else ""
            print(f"{m.id:<28} {m.todo}  line {m.line:<4} {m.summary}{flag}")
        print(f"{len(chosen)} mutants", file=sys.stderr)
        return EXIT_OK

    config = load_config(args.config)
    timeout = args.timeout if args.timeout is not None else config.limits.total_budget_s + 120
    options = Options(
        jobs=args.jobs, timeout_s=timeout, device=args.device, config=args.config, all_items=args.all_items
    )
    done = 0

    def progress(outcome) -> None:
        nonlocal done
        done += 1
        detail = (
            f" ({', '.join(outcome.failed_items)})"
            if outcome.failed_items
            else f" ({outcome.reason})"
            if outcome.reason
            else ""
        )
        print(
            f"[{done}/{len(chosen)}] {outcome.mutant.id} {outcome.status}{detail[:120]} {outcome.seconds:.1f} s",
            file=sys.stderr,
            flush=True,
        )

    started = time.monotonic()
    try:
        outcomes = grade_all(chosen, options, progress)
    except KeyboardInterrupt:
        print("audit: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    parts = [f"{args.todo} only"] if args.todo else []
    if args.id:
        parts.append(f"{len(chosen)} chosen by id")
    if args.sample is not None:
        parts.append(f"sample of {args.sample}, seed {args.seed}")
    audit = Audit(outcomes, listed, time.monotonic() - started, args.jobs, ", ".join(parts))
    # Stale entries only mean something when every mutant was generated and looked at.
    stale = audit.stale({m.id for m in every}) if not parts else []
    sys.stdout.write(render(audit, stale))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(to_json(audit), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return EXIT_OK if audit.passed else EXIT_BELOW
