"""Words shared by every report, in both languages."""

from __future__ import annotations

from grader.results import FAILED, NOT_RUN, PASSED

TODO_NAMES = {
    "todo1": ("TODO 1 容量账本", "TODO 1 capacity ledger"),
    "todo2": ("TODO 2 Prefill 原子分配", "TODO 2 atomic prefill"),
    "todo3": ("TODO 3 Decode 扩容", "TODO 3 decode growth"),
    "todo4": ("TODO 4 逻辑缓存恢复", "TODO 4 logical cache"),
    "todo5": ("TODO 5 分页注意力", "TODO 5 paged attention"),
}

STATUS = {
    PASSED: ("通过", "passed"),
    FAILED: ("未通过", "failed"),
    NOT_RUN: ("未运行", "not run"),
}

WORDS = {
    "score": ("得分", "Score"),
    "repro": ("最小复现（可粘贴到笔记本中运行）", "Smallest reproduction (paste it into your notebook)"),
    "expected": ("期望", "expected"),
    "actual": ("实际", "actual"),
    "traceback": ("你的代码中的调用栈", "traceback in your code"),
    "cells": ("运行出错的代码单元", "cells that raised"),
    "cell": ("代码单元", "cell"),
    "flags": ("学术诚信提示", "Integrity flags"),
    "tampering": ("触碰评分器自身的代码", "Touched the grader's own machinery"),
    "notes": ("说明", "Notes"),
    "unreadable": ("未评分", "Not graded"),
    "output": ("笔记本的输出（节选）", "what the notebook printed (excerpt)"),
    "fix_first": ("先修好这些：运行出错的代码单元", "Fix these first: cells that raised"),
    "given": ("给定代码（不属于任何 TODO）", "Given code (not part of a TODO)"),
    "isolation": ("隔离", "Isolation"),
    "random_cases": ("随机用例", "Random cases"),
    "skipped": ("评分时没有运行的行", "Lines not run while grading"),
}

# What kind of failure (Failure.kind), as a page shows it; the codes stay in JSON and the gradebook.
KINDS = {
    "wrong": ("结果错误", "wrong result"),
    "error": ("抛出了异常", "raised an exception"),
    "not_implemented": ("尚未实现", "not implemented yet"),
    "not_exercised": ("没有被真正检验到", "never actually checked"),
    "too_slow": ("太慢，随机用例不够", "too slow for enough random cases"),
    "not_run": ("未运行", "not run"),
    "missing": ("缺少定义", "not defined"),
    "integrity": ("学术诚信问题", "integrity"),
    "unreadable": ("文件无法评分", "file not gradable"),
    "crashed": ("进程崩溃", "crashed"),
    "timeout": ("超时", "timed out"),
    "budget": ("时间预算用完", "time budget used up"),
    "given": ("给定代码的行为改变了", "given code behaves differently"),
    "given_changed": ("给定代码被修改", "given code edited"),
    "internal": ("评分器自身出错", "the grader failed"),
    "grader_error": ("评分器出错", "grader error"),
    "grader_crash": ("评分进程出错", "the grading process failed"),
    "left_out": ("没有唯一的提交文件", "no single file to grade"),
    "no_submission": ("没有找到要评分的文件", "no file to grade found"),
    "skipped_value": ("依赖评分时不运行的行的值", "depends on a line that grading skips"),
}


def kind_word(kind: str, lang: str) -> str:
    """A failure kind in words; an unknown code (a result from a newer grader) as it is."""
    zh, en = KINDS.get(kind, (kind, kind))
    return zh if lang == "zh" else en


def not_graded(reason: str, lang: str) -> str:
    """The one sentence every output gives for a submission that was not graded."""
    return f"{word('unreadable', lang)}{colon(lang)}{reason}"


# Why a line of the notebook did not run while grading (GradeResult.skipped).
SKIP_REASONS = {
    "shell": ("shell 命令：评分时不运行任何 shell 命令", "a shell command: none runs while grading"),
    "install": ("安装包：课程用到的包已装好，评分时不安装任何东西", "an install: the course's packages are there already, and nothing is installed while grading"),
    "debugger": ("调试器：评分时没有人操作它，代码照常往下运行", "a debugger: nobody can type into it while grading, so the code goes on without it"),
    "network": ("需要网络：评分时没有网络", "it needs the network, which grading has none of"),
    "program": ("启动外部程序：评分时不启动", "it starts a program, which grading does not"),
}


def skip_reason(reason: str, lang: str) -> str:
    zh, en = SKIP_REASONS.get(reason, (reason, reason))
    return zh if lang == "zh" else en


def todo_name(todo: str, lang: str) -> str:
    zh, en = TODO_NAMES.get(todo, (todo, todo))
    return zh if lang == "zh" else en


def status_word(status: str, lang: str) -> str:
    zh, en = STATUS[status]
    return zh if lang == "zh" else en


def word(key: str, lang: str) -> str:
    zh, en = WORDS[key]
    return zh if lang == "zh" else en


# Counted nouns: Chinese takes a measure word and no plural; English "1 block", "2 blocks".
UNITS = {
    "block": ("个块", "block", "blocks"),
    "free_block": ("个空闲块", "free block", "free blocks"),
    "item": ("个评分项", "item", "items"),
    "cell": ("个代码单元", "cell", "cells"),
    "line": ("行", "line", "lines"),
    "case": ("个用例", "case", "cases"),
    "failure": ("项未通过", "failure", "failures"),
}


def plural(count: int, unit: str, lang: str) -> str:
    zh, one, many = UNITS[unit]
    if lang == "zh":
        return f"{count} {zh}"
    return f"{count} {one if count == 1 else many}"


def seconds(value: float, lang: str) -> str:
    return f"{value:.1f} 秒" if lang == "zh" else f"{value:.1f} s"


def colon(lang: str) -> str:
    return "：" if lang == "zh" else ": "


def paren(text: str, lang: str) -> str:
    return f"（{text}）" if lang == "zh" else f" ({text})"


def failed_heading(count: int, lang: str) -> str:
    if lang == "zh":
        return f"未通过的评分项（{count} 项）"
    return f"{count} failed item{'' if count == 1 else 's'}"


def blocked(blocker: str, lang: str) -> str:
    """What a failed item's heading adds when another failing item kept it from being judged."""
    if not blocker:
        return ""
    return f"（被 {blocker} 阻塞）" if lang == "zh" else f" (blocked by {blocker})"
