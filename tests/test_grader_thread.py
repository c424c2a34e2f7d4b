"""The grader thread reads what the submission's calls return without running any of the
submission's code (grader/sandbox/readings.py, answers.py): lookups in dicts whose keys are not
exact strings, and class names that are str subclasses, went there by C before (red team 22).
Quick tests, no grading: each hook below would record that it ran."""

from __future__ import annotations

from typing import Any

from tests import machinery_kit

KIT = machinery_kit.machinery()
READINGS = KIT.MODULES["readings"]
ANSWERS = KIT.MODULES["answers"]
RAN: list[str] = []
WATCHING = [False]  # only the grader's readings are watched (making the objects runs their hooks too)


def _session(ns: dict[Any, Any] | None = None) -> dict[str, Any]:
    return {"caller": machinery_kit.caller(), "grave": [], "ns": ns or {}}


class Bell:
    """A key that hashes like a name the grader looks up; its __eq__ says it ran."""

    def __init__(self, name: str):
        self.name = name

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        if WATCHING[0]:
            RAN.append(f"eq {self.name}")
        return False


class LoudName(str):
    def __eq__(self, other: object) -> bool:
        RAN.append("name eq")
        return str.__eq__(self, other)

    __hash__ = str.__hash__

    def __add__(self, other: str) -> str:
        RAN.append("name add")
        return str.__add__(self, other)

    def __radd__(self, other: str) -> str:
        RAN.append("name radd")
        return other + str(self)

    def __getitem__(self, index: Any) -> str:
        RAN.append("name getitem")
        return str.__getitem__(self, index)

    def __format__(self, spec: str) -> str:
        RAN.append("name format")
        return str.__format__(self, spec)


def test_a_class_dict_with_a_key_that_is_not_a_string_is_read_on_the_caller_thread() -> None:
    class Plain:
        def __init__(self) -> None:
            self.free_blocks = [1, 2]

    Odd = type("Odd", (Plain,), {Bell("__getattribute__"): None, Bell("free_blocks"): None})
    odd, plain = Odd(), Plain()
    RAN.clear()
    WATCHING[0] = True
    try:
        assert READINGS.plain_attribute(odd, "free_blocks") == (False, None)  # not read here
        assert READINGS.plain_attribute(plain, "free_blocks") == (True, [1, 2])
        assert not READINGS.plain_assign(odd, "free_blocks", [])
        assert READINGS.bound_code(Odd, "__init__") == "a class whose dict has keys that are not strings"
    finally:
        WATCHING[0] = False
    assert RAN == []  # nothing of the class's ran to find that out
    assert READINGS.attribute(_session(), Odd(), "free_blocks") == [1, 2]  # asked of the caller thread


def test_no_lookup_on_the_grader_thread_runs_a_keys_eq() -> None:
    import threading

    here = threading.get_ident()
    seen: list[int] = []

    class Spy(Bell):
        def __eq__(self, other: object) -> bool:
            if WATCHING[0]:
                seen.append(threading.get_ident())
            return False

        __hash__ = Bell.__hash__

    Odd = type("Odd", (), {Spy("__getattribute__"): None, Spy("__setattr__"): None, Spy("__dict__"): None, Spy("x"): None})
    obj = Odd()
    ledger = {"kv_bytes_per_token": 4, Spy("kv_bytes_per_block"): 1, "kv_bytes_per_block": 8}
    cells = {Spy("paged_attention"): 1, "paged_attention": len}
    WATCHING[0] = True
    try:
        READINGS.plain_attribute(obj, "x")
        READINGS.plain_assign(obj, "x", 1)
        READINGS._module_of(Odd)
        READINGS.plain_reading(_session(), obj)
        READINGS.edit(_session(), ledger)
        found = ANSWERS.from_cells(_session(cells), "paged_attention")
    finally:
        WATCHING[0] = False
    assert here not in seen and seen  # the lookups ran, on the caller thread
    assert found is len
    assert [v for k, v in ledger.items() if type(k) is str] == [0, 0]  # edited all the same


def test_class_names_are_read_as_exact_strings() -> None:
    Named = type("Named", (RuntimeError,), {})
    Named.__name__ = LoudName("Named")
    Named.__qualname__ = LoudName("Named")
    RAN.clear()
    assert type(READINGS.TYPE_NAME(Named)) is str and READINGS.TYPE_NAME(Named) == "Named"
    assert type(READINGS.TYPE_QUALNAME(Named)) is str
    described = READINGS.student_error(_session(), Named("boom"))
    assert described["type"] == "Named" and "RuntimeError" in described["isa"]
    reading = READINGS.plain_reading(_session(), Named("x"))
    assert reading["__object__"].endswith(".Named")
    assert RAN == []


def test_a_code_constant_of_a_class_with_a_metaclass_eq_is_compared_by_identity() -> None:
    class Meta(type):
        def __eq__(cls, other: object) -> bool:
            RAN.append("meta eq")
            return False

        __hash__ = type.__hash__

    class Const(metaclass=Meta):
        pass

    RAN.clear()
    assert READINGS._const_text(Const()) is None and READINGS._const_text((1, "a")) == "(1, 'a')"
    assert RAN == []


def test_results_that_share_an_object_or_memory_are_found_at_one_moment() -> None:
    """Red team 23 changed a shared ledger between the two digests the judge compared (a racing
    thread); sharing is now read by identity and addresses, in one pass."""
    import torch

    ledger = {"kv_bytes_per_token": 4, "layout_shape": [1, 2]}
    layout = [3, 4]
    buffer = torch.zeros(8, 4)
    kept = {
        1: ledger, 2: ledger,  # the same dict twice (a cache)
        3: {"layout_shape": layout}, 4: {"layout_shape": layout},  # a list shared inside
        5: buffer[:4], 6: buffer[4:],  # one buffer, no overlap: not shared
        7: buffer[2:6],  # overlaps both
        8: {"kv_bytes_per_token": 4, "layout_shape": [1, 2]}, 9: torch.zeros(8, 4), 10: torch.zeros(0),
    }
    assert ANSWERS.shared_results(kept) == {1, 2, 3, 4, 5, 6, 7}
    assert ANSWERS.shared_results({1: dict(ledger), 2: dict(ledger, layout_shape=[1, 2]), 3: torch.ones(3), 4: torch.ones(3)}) == set()
