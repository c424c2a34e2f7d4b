"""Random cases a student cannot know in advance: the seed is the term's secret with the file's sha256."""

from __future__ import annotations

import fnmatch
import stat
import zipfile
from pathlib import Path

import pytest
import tomllib

from grader import gradescope_package, seeds
from grader.config import load_config
from grader.grade import with_seed
from tests.conftest import ROOT


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(seeds.SECRET_ENV, "term 2026 spring")


@pytest.fixture
def no_secret(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No secret anywhere this machine would look; returns the user's configuration folder."""
    monkeypatch.delenv(seeds.SECRET_ENV, raising=False)
    monkeypatch.delenv(seeds.SECRET_FILE_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr(seeds, "DEFAULT_FILE", tmp_path / "checkout" / "term_secret")
    return tmp_path / "config"


def test_no_secret_means_the_public_configured_seed(no_secret: Path) -> None:
    config = load_config()
    seeded, kind = seeds.seeded(config, "ab" * 32)
    assert kind == seeds.PUBLIC and seeded.hypothesis.seed == config.hypothesis.seed
    assert str(config.hypothesis.seed) in seeds.describe(kind, seeded, "en")


def test_a_secret_seed_is_the_same_for_a_file_and_different_across_files_and_terms(secret: None, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config()
    a, kind = seeds.seeded(config, "aa" * 32)
    again, _ = seeds.seeded(config, "aa" * 32)
    b, _ = seeds.seeded(config, "bb" * 32)
    assert kind == seeds.SECRET and a.hypothesis.seed == again.hypothesis.seed != b.hypothesis.seed
    assert a.hypothesis.seed != config.hypothesis.seed
    monkeypatch.setenv(seeds.SECRET_ENV, "another term")
    assert seeds.seeded(config, "aa" * 32)[0].hypothesis.seed != a.hypothesis.seed
    assert str(a.hypothesis.seed) not in seeds.describe(kind, a, "en") + seeds.describe(kind, a, "zh")  # never shown


def test_the_secret_may_come_from_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(seeds.SECRET_ENV, raising=False)
    path = tmp_path / "secret"
    path.write_text("from a file\n", encoding="utf-8")
    path.chmod(0o600)
    monkeypatch.setenv(seeds.SECRET_FILE_ENV, str(path))
    assert seeds.term_secret() == b"from a file"
    monkeypatch.setenv(seeds.SECRET_ENV, "from the environment")
    assert seeds.term_secret() == b"from the environment"


def test_a_seed_given_on_the_command_line_wins(secret: None) -> None:
    config = with_seed(load_config(), 7)
    seeded, kind = seeds.seeded(config, "aa" * 32)
    assert kind == seeds.GIVEN and seeded.hypothesis.seed == 7


def test_the_secret_travels_in_the_gradescope_zip_but_never_in_the_wheel(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    (root / "grader").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        (root / name).write_text((ROOT / name).read_text(encoding="utf-8"), encoding="utf-8")
    (root / "grader" / "__init__.py").write_text("", encoding="utf-8")
    (root / "grader" / "config.toml").write_text((ROOT / "grader" / "config.toml").read_text(encoding="utf-8"), encoding="utf-8")
    (root / "grader" / seeds.DEFAULT_FILE.name).write_text("the checkout's own", encoding="utf-8")
    # The zip carries the secret configured (and only that one), never the checkout's file as such.
    assert f"grader/{seeds.DEFAULT_FILE.name}" not in [name for name, _ in gradescope_package.members(root)]
    out = tmp_path / "zip.zip"
    assert f"grader/{seeds.DEFAULT_FILE.name}" in gradescope_package.build(root, out, "en", b"s3cret")
    with zipfile.ZipFile(out) as archive:
        assert archive.read(f"grader/{seeds.DEFAULT_FILE.name}") == b"s3cret\n"
    assert f"grader/{seeds.DEFAULT_FILE.name}" not in gradescope_package.build(root, out, "en", None)
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]["grader"]
    assert not any(fnmatch.fnmatch(seeds.DEFAULT_FILE.name, pattern) for pattern in package_data)
    assert "/grader/term_secret" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o660])
def test_a_secret_file_open_to_anyone_but_its_owner_is_refused(no_secret: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: int) -> None:
    path = tmp_path / "term_secret"
    path.write_text("s3cret-of-the-term\n")
    path.chmod(mode)
    monkeypatch.setenv(seeds.SECRET_FILE_ENV, str(path))
    with pytest.raises(seeds.SecretError) as refused:
        seeds.term_secret()
    message = str(refused.value)
    assert f"{mode:04o}" in message and f"chmod 600 {path}" in message and "s3cret" not in message
    with pytest.raises(seeds.SecretError):  # the grading stops there: never the public seed instead
        seeds.seeded(load_config(), "aa" * 32)
    path.chmod(0o600)
    assert seeds.term_secret() == b"s3cret-of-the-term"
    path.chmod(0o400)
    assert seeds.term_secret() == b"s3cret-of-the-term"


def test_a_named_secret_file_that_is_missing_or_empty_is_refused(no_secret: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(seeds.SECRET_FILE_ENV, str(tmp_path / "missing"))
    with pytest.raises(seeds.SecretError, match="does not exist"):
        seeds.term_secret()
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "empty").chmod(0o600)
    monkeypatch.setenv(seeds.SECRET_FILE_ENV, str(tmp_path / "empty"))
    with pytest.raises(seeds.SecretError, match="empty"):
        seeds.term_secret()


def test_the_secret_is_looked_for_in_the_checkout_then_in_the_users_configuration(no_secret: Path, tmp_path: Path) -> None:
    assert seeds.term_secret() is None and seeds.source() is None and seeds.secret_paths() == []
    user = seeds.user_file()
    assert user == no_secret / "pa-grader" / "term_secret"
    user.parent.mkdir(parents=True)
    user.write_text("from the user's configuration\n")
    user.chmod(0o600)
    assert seeds.term_secret() == b"from the user's configuration" and seeds.source() == str(user)
    assert seeds.secret_paths() == [str(user)]
    seeds.DEFAULT_FILE.parent.mkdir()
    seeds.DEFAULT_FILE.write_text("from the checkout\n")
    seeds.DEFAULT_FILE.chmod(0o600)
    assert seeds.term_secret() == b"from the checkout"
    assert seeds.secret_paths() == sorted([str(user), str(seeds.DEFAULT_FILE)])  # both kept from the sandbox


def test_the_seeds_identity_names_the_secret_without_giving_it_away(no_secret: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config()
    assert seeds.identity(config) == f"public:{config.hypothesis.seed}"
    assert seeds.identity(with_seed(config, 7)) == "given:7"
    monkeypatch.setenv(seeds.SECRET_ENV, "term 2026 spring")
    first = seeds.identity(config)
    assert first.startswith("secret:") and "2026" not in first and len(first) == len("secret:") + 16
    assert seeds.identity(config) == first  # the same secret, the same identity
    assert seeds.identity(seeds.public_seed(config)) == f"public:{config.hypothesis.seed}"  # --public-seed
    assert seeds.seeded(seeds.public_seed(config), "aa" * 32) == (seeds.public_seed(config), seeds.PUBLIC)
    assert seeds.public_seed(with_seed(config, 7)).seed_source == "command line"  # --seed wins
    monkeypatch.setenv(seeds.SECRET_ENV, "term 2026 autumn")
    assert seeds.identity(config) not in (first, f"public:{config.hypothesis.seed}")


def test_secret_create_rotate_and_status(no_secret: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from grader import cli

    assert cli.main(["secret"]) == 1 and "./grade secret --create" in capsys.readouterr().out
    assert cli.main(["secret", "--create"]) == 0
    user = seeds.user_file()
    value = user.read_bytes().strip()
    assert stat.S_IMODE(user.stat().st_mode) == 0o600 and len(value) == 64
    out = capsys.readouterr().out
    assert seeds.fingerprint(value) in out and value.decode() not in out
    assert cli.main(["secret", "--create"]) == 2 and user.read_bytes().strip() == value  # never overwritten
    assert cli.main(["secret"]) == 0 and seeds.fingerprint(value) in capsys.readouterr().out
    assert cli.main(["secret", "--rotate"]) == 0
    assert user.read_bytes().strip() != value
    old = [p for p in user.parent.iterdir() if p.name.startswith("term_secret.old-")]
    assert len(old) == 1 and old[0].read_bytes().strip() == value and stat.S_IMODE(old[0].stat().st_mode) == 0o600
    user.chmod(0o644)
    assert cli.main(["secret"]) == 2 and "chmod 600" in capsys.readouterr().err


def test_the_worker_never_sees_the_secret(secret: None) -> None:
    from grader.sandbox.client import worker_env

    assert not any("SECRET" in name for name in worker_env(False))
