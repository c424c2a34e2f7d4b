"""The worker's grader code (grader/sandbox/hook.py, readings.py, answers.py, machinery.py), loaded in a test
process as worker.arm_machinery loads it: modules that stay out of sys.modules.  Nothing is
installed (no audit hook, no fork callback): a test drives `answer()` itself."""

from __future__ import annotations

import sys
import types
from functools import cache
from typing import Any

import grader.sandbox as sandbox_package

SANDBOX = sandbox_package.__path__[0]


@cache
def machinery() -> Any:
    """The machinery module (its companions loaded with it, as the worker loads them)."""
    modules = {}
    try:
        for name in ("hook", "readings", "answers", "machinery"):
            with open(f"{SANDBOX}/{name}.py", encoding="utf-8") as source:
                code = compile(source.read(), f"<grader {name}>", "exec", dont_inherit=True)
            module = types.ModuleType(f"_pa_grader_{name}")
            sys.modules[module.__name__] = module
            exec(code, module.__dict__)
            modules[name] = module
    finally:
        for name in ("hook", "readings", "answers", "machinery"):
            sys.modules.pop(f"_pa_grader_{name}", None)
    machinery = modules["machinery"]
    machinery.SETUP.update(zygote=-1, key=b"k" * 32)
    machinery.MODULES = modules
    return machinery


@cache
def caller() -> Any:
    """One caller thread for the test process (readings.start_caller)."""
    kit = machinery()
    return kit.start_caller(kit.make_guard())


def session(namespace: dict[str, Any]) -> dict[str, Any]:
    """A session's state over `namespace` (the cells' definitions), answered in this process."""
    import random

    import numpy
    import torch

    from grader.sandbox import wire

    return machinery().new_session(namespace, caller(), [random.seed, torch.manual_seed, numpy.random.seed], wire.traceback_text)
