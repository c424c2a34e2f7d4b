"""`kv-lab`: serve a request trace under four KV-cache policies and show where the memory goes.

Static reservation of max_model_len, reservation of the next power of two, reservation of the
true final length (an oracle) and paging through an allocator: the reference's from this
checkout, or with --submission a student's, run in the sandbox as grading runs it.  Prints
the figures; --json, --svg and --html write them (grader/kvlab/, docs/kv-lab.md).

Exit status: 0 served, the figures printed (and written); 1 the allocator under test failed
(raised, lost count of its blocks, left a TODO unfinished, or stopped answering): what ran until
then is printed and written, with the reason; 2 a trace or option that cannot be served, a
submission that cannot be read or defines no allocator, no reference allocator in reach
(outside a checkout: pass --submission), or an output that cannot be written.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

EXIT_FAILED, EXIT_USAGE = 1, 2
DEFAULT_RATES = {"sharegpt": 1.0, "alpaca": 10.0}  # requests per step: more than paging serves
DEFAULT_SIZES = (16, 8, 32, 64, 128)  # the first is served over time; all of them are swept


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("kv-lab", help="serve a trace under four KV-cache policies: why paging matters")
    p.add_argument("--submission", type=Path, default=None, help="a student's notebook or .py: page through its allocator, in the sandbox (default: the reference's)")
    p.add_argument("--trace", default="sharegpt", help="sharegpt, alpaca, or a CSV file of arrival,prompt_len,output_len rows (arrival in steps)")
    p.add_argument("--requests", type=int, default=1000, help="requests in a synthetic trace (default: 1000)")
    p.add_argument("--rate", type=float, default=None, help="arrivals per step, a Poisson process; 0: all at once (default: sharegpt 1, alpaca 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of a synthetic trace (default: 0)")
    p.add_argument("--block-size", default=None, help="tokens per block: one size, or a comma list to sweep, the first drawn over time "
                   "(default: 16, and a sweep over 8,16,32,64,128)")
    p.add_argument("--pool-blocks", type=int, default=2048, help="blocks in the pool at the first block size; a sweep keeps the pool's slots (default: 2048)")
    p.add_argument("--max-model-len", type=int, default=2048, help="the longest request, and what static reservation reserves (default: 2048)")
    p.add_argument("--max-running", type=int, default=256, help="most requests running at once, as vLLM's max_num_seqs (default: 256)")
    p.add_argument("--json", type=Path, default=None, help="write the figures here (policies.static/pow2/oracle/paged, sweep)")
    p.add_argument("--svg", type=Path, default=None, help="write the picture here: a self-contained SVG")
    p.add_argument("--html", type=Path, default=None, help="write a page with the picture and the figures here")
    p.add_argument("--lang", choices=("zh", "en"), default=None, help="language (default: the config's)")
    p.add_argument("--config", type=Path, default=None, help="grading configuration, for the sandbox's limits (default: grader/config.toml)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on the terminal")
    p.set_defaults(run=run)


def _sizes(text: str) -> list[int] | None:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        return None
    return sizes if sizes and all(s >= 1 for s in sizes) and len(set(sizes)) == len(sizes) else None


def _progress(enabled: bool) -> Any:
    if not enabled:
        return None
    shown = {"at": 0.0}

    def report(policy: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - shown["at"] < 0.1:
            return
        shown["at"] = now
        end = "\n" if done >= total else ""
        print(f"\r  {policy:<16} {done:>7} / {total} requests finished", end=end, file=sys.stderr, flush=True)

    return report


def reference_allocator() -> tuple[Any, Any] | None:
    """The reference's KVCacheManager and Request, from this checkout's reference/ (never
    installed with the grader: it is the answer key)."""
    path = Path(__file__).resolve().parents[2] / "reference" / "paged_attention.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("_kv_lab_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.KVCacheManager, module.Request


def run(args: argparse.Namespace) -> int:
    from grader.config import load_config
    from grader.kvlab.lab import LabConfig
    from grader.kvlab.trace import SHAPES, TraceError, read_csv, synthetic

    config = load_config(args.config)
    lang = args.lang or config.feedback.language
    sizes = list(DEFAULT_SIZES) if args.block_size is None else _sizes(args.block_size)
    if sizes is None:
        print(f"kv-lab: --block-size takes positive whole numbers, comma-separated, each once: {args.block_size!r}", file=sys.stderr)
        return EXIT_USAGE
    lab = LabConfig(block_size=sizes[0], pool_blocks=args.pool_blocks, max_model_len=args.max_model_len,
                    max_running=args.max_running, sweep=tuple(sorted(sizes)) if len(sizes) > 1 else ())
    try:
        if args.trace in SHAPES:
            rate = DEFAULT_RATES[args.trace] if args.rate is None else args.rate
            trace = synthetic(args.trace, args.requests, seed=args.seed, rate=rate, max_model_len=args.max_model_len)
        else:
            trace = read_csv(Path(args.trace))
        lab.check(trace)
    except TraceError as error:
        print(f"kv-lab: {error}", file=sys.stderr)
        return EXIT_USAGE
    progress = _progress(not args.quiet and sys.stderr.isatty())
    if args.submission is None:
        return _served(args, lang, lambda: _with_reference(trace, lab, progress))
    return _served(args, lang, lambda: _with_submission(args.submission, config, trace, lab, progress))


class _Unusable(Exception):
    pass


def _with_reference(trace: Any, lab: Any, progress: Any) -> Any:
    from grader.kvlab.drivers import LocalDriver
    from grader.kvlab.lab import run_lab

    classes = reference_allocator()
    if classes is None:
        raise _Unusable("no reference allocator here (reference/ is in a checkout of the repository): pass --submission FILE")
    manager, request = classes
    return run_lab(trace, lab, lambda blocks, size: LocalDriver(manager, request, blocks, size), allocator="reference", progress=progress)


def _with_submission(path: Path, config: Any, trace: Any, lab: Any, progress: Any) -> Any:
    from grader.kvlab.lab import run_lab
    from grader.kvlab.sandboxed import SubmissionUnusable, sandboxed_allocator

    try:
        with sandboxed_allocator(path, config) as driver:
            return run_lab(trace, lab, driver, allocator=f"submission {path.name}", progress=progress)
    except SubmissionUnusable as error:
        raise _Unusable(str(error)) from None


def _served(args: argparse.Namespace, lang: str, serve: Any) -> int:
    from grader.kvlab.svg import lab_html, lab_svg
    from grader.kvlab.words import table

    try:
        result = serve()
    except _Unusable as error:
        print(f"kv-lab: {error}", file=sys.stderr)
        return EXIT_USAGE
    summary = result.summary()
    print("\n".join(table(summary, lang)))
    outputs = [(args.json, lambda: json.dumps(summary, ensure_ascii=False, indent=1) + "\n"),
               (args.svg, lambda: lab_svg(result, lang)), (args.html, lambda: lab_html(result, lang))]
    for path, text in outputs:
        if path is None:
            continue
        try:
            path.write_text(text(), encoding="utf-8")
        except OSError as error:
            print(f"kv-lab: cannot write {path}: {error.strerror or error}", file=sys.stderr)
            return EXIT_USAGE
        print(f"wrote {path}")
    if result.error is not None:
        print(f"kv-lab: {result.error.text(lang)}", file=sys.stderr)
        return EXIT_FAILED
    return 0
