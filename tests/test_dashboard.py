"""The class dashboard in a real browser: headless Chromium driven over the DevTools protocol.

Chromium talks CDP over a pipe (--remote-debugging-pipe: fd 3 in, fd 4 out, NUL-separated
JSON), so no port is opened and nothing touches the network.  ./run-tests installs Debian's
chromium when it is missing; the tests skip only where no Chromium can be found at all.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

from grader import classfolder
from grader.config import load_config
from grader.gradebook import CI, ERROR, GRADESCOPE, LEFT_OUT, Gradebook
from grader.report import dashboard
from tests.test_batch import synthetic

HOSTILE_ID = '<img src=x onerror="document.title=\'pwned\'">'

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
)


def find_chromium() -> str | None:
    for name in filter(None, (os.environ.get("CHROMIUM"), "/usr/bin/chromium", *CANDIDATES)):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """Just enough of the DevTools protocol: one page, commands, and the events they cause."""

    def __init__(self, executable: str, profile: Path):
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()

        def wire_fds() -> None:  # in the child: our pipe ends become its fd 3 and 4
            a, b = os.dup(to_browser), os.dup(from_browser)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.log = open(profile / "chromium.log", "wb")
        self.process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe", "--window-size=1200,1600", "about:blank"],
            preexec_fn=wire_fds, close_fds=False, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._read], [], [], remaining)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise EOFError("Chromium exited: " + (Path(self.log.name).read_text(errors="replace")[-2000:]))
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw)

    def call(self, method: str, params: dict[str, Any] | None = None, session: bool = False, timeout: float = 30) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, event: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == event for e in self.events):
            self.events.append(self._message(deadline))

    def open(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait_for("Page.loadEventFired")

    def js(self, expression: str) -> Any:
        reply = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True)
        if "exceptionDetails" in reply:
            raise AssertionError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions and blocked resources (CSP) since the last open()."""
        out = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                out.append(str(params["exceptionDetails"]))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
                out.append(str(params.get("args")))
            elif method == "Log.entryAdded" and params["entry"].get("level") in ("error", "warning"):
                out.append(params["entry"].get("text", ""))
        return out

    def screenshot(self, path: Path) -> None:
        import base64

        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=True)["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (OSError, EOFError, TimeoutError, RuntimeError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = find_chromium()
    if executable is None:
        pytest.skip("no Chromium found (./run-tests installs Debian's chromium when run as root)")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        instance = Browser(executable, Path(profile))
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture(scope="module")
def class_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small class without grading: 100, 85, 80, 75 (three; one a hostile id); frank (grader error) and
    ivy (left out) without a grade; gina (100) and hal (85) imported."""
    out = tmp_path_factory.mktemp("class")
    students = [("alice", None), ("bob", "todo1"), ("carol", "todo2"), ("dave", "todo5"), (HOSTILE_ID, "todo3"), ("erin", "todo3")]
    with Gradebook.in_dir(out) as book:
        for number, (student, failing) in enumerate(students):
            result = synthetic(failing, submission=f"{student}.ipynb", sha=f"{number:02d}")
            book.add(student, result, sha256=result.sha256, source="batch", path=result.submission)
            classfolder.write_student_files(out, student, result, "en")
        broken = classfolder.error_result(Path("frank.ipynb"), load_config(), "timeout", "too slow", "太慢")
        book.add("frank", broken, sha256="f" * 64, source="batch", path="frank.ipynb", status=ERROR)
        classfolder.write_student_files(out, "frank", broken, "en")
        two = classfolder.error_result(Path("ivy"), load_config(), "left_out", "several notebooks in ivy", "多个笔记本")
        book.add("ivy", two, sha256="", source="batch", path="ivy", status=LEFT_OUT)
        classfolder.write_student_files(out, "ivy", two, "en")
        # Graded elsewhere: marked as imported, with where from and when.
        for student, failing, source, when in (("gina", None, CI, None), ("hal", "todo1", GRADESCOPE, "2026-11-01T10:00:00+00:00")):
            result = synthetic(failing, submission="results.json", sha="99")
            book.add(student, result, sha256=result.sha256, source=source, path="results.json", submitted_at=when)
            classfolder.write_student_files(out, student, result, "en")
    classfolder.write_dashboard(out, "en")
    return out


def test_dashboard_marks_imports_and_keeps_students_without_a_grade(class_dir: Path) -> None:
    """The page itself, without a browser: every student has a row; where each grade came from."""
    page = (class_dir / "dashboard.html").read_text(encoding="utf-8")
    rows = dict(re.findall(r'<tr data-student="([^"]*)"(.*?)</tr>', page))
    assert len(rows) == 10 and {"frank", "ivy", "gina", "hal"} <= set(rows)
    assert 'data-source="import:ci" class="imported"' in rows["gina"] and "imported: student&#x27;s CI run" in rows["gina"]
    assert 'data-source="import:gradescope" class="imported"' in rows["hal"] and "2026-11-01 10:00" in rows["hal"]
    assert 'class="imported"' not in rows["alice"] and "graded here" in rows["alice"]
    for student, reason in (("frank", "too slow"), ("ivy", "several notebooks in ivy")):
        assert '<td class="num" data-v="-1">–</td>' in rows[student] and reason in rows[student]
    assert 'id="imported-note"' in page and "2 current grades were imported" in page
    stats = dict((label, value) for value, label in re.findall(r'<div class="stat"><b>([^<]*)</b>([^<]*)</div>', page))
    assert stats["Students graded"] == "8" and stats["No grade (see reason)"] == "2" and stats["Imported grades"] == "2"


def _order(browser: Browser) -> list[str]:
    return browser.js("Array.from(document.querySelectorAll('#students tbody tr')).map(r => r.dataset.student)")


def test_dashboard_loads_clean_sorts_and_is_screenshotted(browser: Browser, class_dir: Path, tmp_path: Path) -> None:
    page = (class_dir / "dashboard.html").as_uri()
    browser.open(page + "?sort=score&dir=asc")
    assert browser.js("document.body.dataset.ready") == "1", browser.problems()  # the script ran (CSP allowed it)
    assert browser.problems() == []
    assert browser.js("document.getElementById('js-errors').hidden") is True
    assert browser.js("document.querySelectorAll('img, iframe').length") == 0 and browser.js("document.title") != "pwned"
    scores = browser.js("Array.from(document.querySelectorAll('#students tbody tr')).map(r => parseFloat(r.cells[1].dataset.v))")
    # ?sort=score&dir=asc; students without a grade (-1) sort below every score
    assert scores == sorted(scores) and scores[:3] == [-1, -1, 75] and scores[-1] == 100

    # Real clicks on the header buttons.
    browser.js("document.querySelector('th[data-key=student] button').click()")
    assert _order(browser) == sorted(_order(browser), key=str)
    assert browser.js("document.querySelector('th[data-key=student]').getAttribute('aria-sort')") == "ascending"
    browser.js("document.querySelector('th[data-key=student] button').click()")
    assert _order(browser) == sorted(_order(browser), key=str, reverse=True)
    browser.js("document.querySelector('th[data-key=score] button').click()")  # numbers sort high to low first
    first = browser.js("document.querySelector('#students tbody tr').dataset.student")
    assert first == "alice"
    assert browser.js("document.getElementById('students').dataset.sorted") == "score:desc"
    assert browser.problems() == []

    # Charts are inline SVG; each student links to a scorecard that exists.
    assert browser.js("document.querySelectorAll('#histogram rect').length") == 10
    assert browser.js("document.querySelectorAll('#todo-rates rect').length") == 10
    hrefs = browser.js("Array.from(document.querySelectorAll('#students a')).map(a => a.href)")
    assert len(hrefs) == 10 and all(Path(unquote(urlparse(href).path)).is_file() for href in hrefs)

    shot = tmp_path / "dashboard.png"
    browser.screenshot(shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    if os.environ.get("PA_SCREENSHOTS"):
        shutil.copy(shot, Path(os.environ["PA_SCREENSHOTS"]) / "dashboard.png")


def test_hostile_scorecard_runs_nothing(browser: Browser, class_dir: Path) -> None:
    card = class_dir / "students" / f"{classfolder.slug(HOSTILE_ID)}.html"
    browser.open(card.as_uri())
    assert browser.problems() == []
    assert browser.js("document.scripts.length") == 0 and browser.js("document.querySelectorAll('img').length") == 0
    assert HOSTILE_ID in browser.js("document.querySelector('h1').textContent")


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_dashboard_says_every_code_in_words(class_dir: Path, lang: str) -> None:
    """Failure kinds, statuses and sources in the page's language; the codes only in attributes."""
    with Gradebook.in_dir(class_dir) as book:
        page = dashboard.render(book.current(), lang, {})
    kinds = [unescape(k) for k in re.findall(r'<span class="kind" data-kind="wrong">([^<]*)</span>', page)]
    assert kinds and set(kinds) == {"（结果错误）" if lang == "zh" else " (wrong result)"}
    statuses = {unescape(s) for s in re.findall(r'<td data-v="(?:graded|not_gradable|grader_error|left_out)">([^<]*)<', page)}
    assert statuses == ({"已评分", "评分程序出错", "没有唯一的提交"} if lang == "zh" else {"graded", "grader error", "left out"})
    sources = {unescape(s) for s in re.findall(r'<span class="badge(?: imported)?">([^<]*)</span>', page)}
    assert sources == ({"本机评分", "导入：学生的 CI 运行", "导入：Gradescope"} if lang == "zh"
                       else {"graded here", "imported: student's CI run", "imported: Gradescope"})
    assert ("未评分：太慢" if lang == "zh" else "Not graded: too slow") in unescape(page)
