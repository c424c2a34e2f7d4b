"""What a graded notebook found around it, said on the scorecard: what of its folder was left
out, a course package the grading environment lacks, the lines that did not run.

The course's packages ([notebook] packages in config.toml) are installed with the grader; a
grading where one is missing is the machine's fault, not the student's, so the scorecard says so.
"""

from __future__ import annotations

import importlib.util
from functools import cache

from grader.config import NotebookEnvironment
from grader.folder import LEFT_OUT_REASONS, FolderCopy
from grader.results import SkippedLine, Text
from grader.sandbox.protocol import SkippedLine as ReportedLine


def folder_notes(copy: FolderCopy | None) -> list[Text]:
    """One note saying what of the notebook's folder was not copied next to it, if anything."""
    if copy is None or not copy.left_out:
        return []
    zh = "；".join(f"{LEFT_OUT_REASONS[r][0]} {n} 个" for r, n in sorted(copy.left_out.items()) if r in LEFT_OUT_REASONS)
    en = "; ".join(f"{n} {LEFT_OUT_REASONS[r][1]}" for r, n in sorted(copy.left_out.items()) if r in LEFT_OUT_REASONS)
    return [
        Text(
            f"笔记本所在文件夹中有些文件没有复制到评分环境里（{zh}）",
            f"some files of the notebook's folder were not copied next to it for grading ({en})",
        )
    ]


@cache
def _missing(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for name in names if importlib.util.find_spec(name) is None)


def package_notes(env: NotebookEnvironment) -> list[Text]:
    """A note naming the course packages this grading environment lacks (its set-up did not install them)."""
    missing = _missing(tuple(env.import_names()))
    if not missing:
        return []
    names = ", ".join(missing)
    return [
        Text(
            f"评分环境缺少课程用到的包：{names}（评分机器的安装问题，不是你的问题：导入它们的单元在这里会出错）",
            f"the grading environment lacks course packages: {names} (the grading machine's set-up, not your fault: cells importing them fail here)",
        )
    ]


def skipped_lines(reported: list[ReportedLine]) -> list[SkippedLine]:
    return [SkippedLine(line.index, line.line, line.text, line.reason) for line in reported]
