"""Every fenced code block of README.md and docs/**/*.md runs, is checked, or says why it cannot be.

Blocks are found by their fences and treated by the language the fence names:

- ``python``: run as written, each in a fresh interpreter (this one's), from an empty temporary
  directory, offline (the Hugging Face hub and transformers offline, every HTTP(S) proxy a
  closed local port), with a timeout. It must exit 0.
- ``bash`` / ``sh`` / ``shell``: checked without running anything. Each command (split on
  ``&&``, ``||``, ``;``, ``|`` and new lines; ``VAR=value`` prefixes and ``# comments`` dropped)
  must be one this test knows how to check: ``mediaref ...`` and ``python -m mediaref ...``
  are parsed by the command's own argparse parser, as are ``python benchmarks/X.py ...`` and
  ``python scripts/X.py ...`` (any interpreter: ``python``, ``python3``, ``"$VENV"/bin/python``;
  ``tests/_argparse_probe.py`` parses them all in one process and stops each program right
  after its parser returns); ``bash benchmarks/X.sh`` / ``scripts/X.sh`` must exist and name
  every flag used; ``pip install`` may name only extras ``pyproject.toml`` declares;
  ``python -m pytest`` only paths that exist; ``python -m venv``, ``. VENV/bin/activate``,
  ``cd`` and ``export`` pass. A bare ``...`` argument stands for arguments left out: the ones
  before it are checked. Any other command fails the block.
- ``text``, ``json``, ``output``: not code; skipped by their language.
- Anything else, a fence that names no language included, fails.

A block that can neither run nor be checked carries a marker on the line just above its fence,
naming why: ``<!-- docs-code: skip (needs a GPU) -->``. The README's two Quick start commands
(``<!-- quickstart:main -->``, ``<!-- quickstart:test -->``) are CI's: they create virtual
environments, so they are checked as shell blocks and for the shape CI relies on, never run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROBE = Path(__file__).resolve().parent / "_argparse_probe.py"

PYTHON_LANGS = frozenset({"python", "py", "python3"})
SHELL_LANGS = frozenset({"bash", "sh", "shell"})
TEXT_LANGS = frozenset({"text", "json", "output"})

SKIP_MARKER = re.compile(r"^<!--\s*docs-code:\s*skip\s*\((?P<reason>[^()]*\S[^()]*)\)\s*-->$")
QUICKSTART_MARKER = re.compile(r"^<!--\s*quickstart:(?P<name>main|test)\s*-->$")
_OPEN_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_CLOSE_FENCE = re.compile(r"^\s*(?P<fence>`{3,}|~{3,})\s*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_OPERATORS = frozenset({"&&", "||", ";", "|", "&", ";;"})


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # the opening fence's, 1-based
    lang: str  # the fence's first word, lower case; "" when it names none
    code: str
    marker: str  # the line just above the fence, stripped, when it is an HTML comment; else ""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.code.splitlines() if line.strip()), "")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    page = path.relative_to(ROOT).as_posix()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _OPEN_FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = _CLOSE_FENCE.match(lines[j])
            if closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence):
                break
            line = lines[j]
            body.append(line[indent:] if not line[:indent].strip() else line.lstrip())
            j += 1
        else:
            raise AssertionError(f"{page}:{i + 1}: a code fence that is never closed")
        above = lines[i - 1].strip() if i else ""
        words = opening["info"].split()
        found.append(
            Block(
                page=page,
                line=i + 1,
                lang=words[0].lower() if words else "",
                code="\n".join(body) + "\n",
                marker=above if above.startswith("<!--") else "",
            )
        )
        i = j + 1
    return found


@cache
def all_blocks() -> tuple[Block, ...]:
    return tuple(block for path in pages() for block in blocks_of(path))


# --- shell blocks ------------------------------------------------------------------------------


def commands_of(code: str) -> list[list[str]]:
    """The simple commands of a shell block, as words (quotes removed, comments dropped)."""
    commands: list[list[str]] = []
    for line in code.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        current: list[str] = []
        for word in lexer:
            if word in _OPERATORS:
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(word)
        if current:
            commands.append(current)
    return commands


@dataclass(frozen=True)
class Probe:
    """A command for ``_argparse_probe.py``: ``program`` is ``mediaref`` or a script's path."""

    program: str
    argv: tuple[str, ...]


@cache
def declared_extras() -> frozenset[str]:
    if sys.version_info >= (3, 11):
        import tomllib

        with (ROOT / "pyproject.toml").open("rb") as f:
            project = tomllib.load(f)["project"]
        return frozenset(project.get("optional-dependencies", {}))
    # Python 3.10 has no TOML reader: the installed distribution's metadata names the same extras.
    return frozenset(metadata.metadata("mediaref").get_all("Provides-Extra") or ())


def _is_python(word: str) -> bool:
    return re.fullmatch(r"python(3(\.\d+)?)?", word.rsplit("/", 1)[-1]) is not None


def _check_pip(args: list[str]) -> str | None:
    if not args or args[0] != "install":
        return f"pip {' '.join(args)}: only `pip install` is checked"
    words = iter(args[1:])
    for word in words:
        if word in ("-r", "--requirement"):
            requirements = next(words, "")
            if not (ROOT / requirements).is_file():
                return f"pip install -r {requirements}: no such file in the repository"
            continue
        if word in ("-e", "--editable") or word.startswith("-"):
            continue
        local = re.fullmatch(r"(?P<path>\.[^\[]*)(\[(?P<extras>[^\]]*)\])?", word)
        if local is None:  # a requirement from the index, e.g. torch==2.14.1
            continue
        if not (ROOT / local["path"] / "pyproject.toml").is_file():
            return f"pip install {word}: no project at {local['path']}"
        extras = {e.strip() for e in (local["extras"] or "").split(",") if e.strip()}
        unknown = sorted(extras - declared_extras())
        if unknown:
            return f"pip install {word}: pyproject.toml declares no extra {unknown}"
    return None


def _check_script_path(word: str, suffix: str) -> str | None:
    path = ROOT / word
    if Path(word).parts[:1] not in (("benchmarks",), ("scripts",)) or not word.endswith(suffix):
        return f"{word}: only benchmarks/*{suffix} and scripts/*{suffix} are checked"
    if not path.is_file():
        return f"{word}: no such script"
    return None


def check_command(words: list[str]) -> tuple[str | None, Probe | None]:
    """(what is wrong, or None; the argparse probe to run, if any) for one simple command."""
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return None, None
    head, args = words[0], words[1:]
    if "..." in args:  # arguments left out: check the ones shown
        args = args[: args.index("...")]
    shown = " ".join(words)
    if head == "mediaref":
        return None, Probe("mediaref", tuple(args))
    if _is_python(head):
        if args[:2] == ["-m", "mediaref"]:
            return None, Probe("mediaref", tuple(args[2:]))
        if args[:2] == ["-m", "venv"]:
            return (None if len(args) >= 3 else f"{shown}: no directory"), None
        if args[:2] == ["-m", "pip"]:
            return _check_pip(args[2:]), None
        if args[:2] == ["-m", "pytest"]:
            for arg in args[2:]:
                if not arg.startswith("-") and not (ROOT / arg.split("::")[0]).exists():
                    return f"{shown}: {arg} does not exist", None
            return None, None
        if args and args[0].endswith(".py"):
            problem = _check_script_path(args[0], ".py")
            if problem:
                return problem, None
            return None, Probe(str(ROOT / args[0]), tuple(args[1:]))
        return f"{shown}: not a command this test can check", None
    if head in ("bash", "sh") and args:
        problem = _check_script_path(args[0], ".sh")
        if problem:
            return problem, None
        text = (ROOT / args[0]).read_text()
        missing = [
            a.split("=")[0] for a in args[1:] if a.startswith("-") and a.split("=")[0] not in text
        ]
        return (f"{shown}: {args[0]} never mentions {missing}" if missing else None), None
    if head in ("pip", "pip3"):
        return _check_pip(args), None
    if head in (".", "source"):
        ok = len(args) == 1 and args[0].endswith("/bin/activate")
        return (None if ok else f"{shown}: only `. VENV/bin/activate` is checked"), None
    if head in ("cd", "export"):
        return None, None
    return f"{shown}: not a command this test can check (mark the block if it cannot be)", None


@cache
def probe_results() -> dict[Probe, dict[str, Any]]:
    """Every probe of every checked shell block, parsed in one process."""
    probes: list[Probe] = []
    for block in all_blocks():
        if kind_of(block)[0] in ("shell", "quickstart"):
            for words in commands_of(block.code):
                probe = check_command(words)[1]
                if probe is not None and probe not in probes:
                    probes.append(probe)
    if not probes:
        return {}
    request = json.dumps([{"program": p.program, "argv": list(p.argv)} for p in probes])
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "results.json"
        done = subprocess.run(
            [sys.executable, str(PROBE), str(out)],
            input=request,
            text=True,
            capture_output=True,
            cwd=ROOT,
            env=offline_env(),
            timeout=120,
        )
        assert done.returncode == 0, f"the argparse probe failed:\n{done.stderr[-4000:]}"
        results = json.loads(out.read_text())
    return dict(zip(probes, results, strict=True))


def check_shell(block: Block) -> None:
    problems: list[str] = []
    commands = commands_of(block.code)
    assert commands, f"{block.where}: a shell block with no command"
    for words in commands:
        problem, probe = check_command(words)
        if problem:
            problems.append(problem)
        elif probe is not None:
            result = probe_results()[probe]
            if not result["ok"]:
                problems.append(f"{' '.join(words)}: {result['detail']}")
    assert not problems, f"{block.where}:\n" + "\n".join(problems)


# --- python blocks -----------------------------------------------------------------------------


def offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "all_proxy")}
    closed = "http://127.0.0.1:9"  # the discard port: nothing listens, a fetch fails at once
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        http_proxy=closed,
        https_proxy=closed,
        HTTP_PROXY=closed,
        HTTPS_PROXY=closed,
    )
    return env


def run_python(block: Block, tmp_path: Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(block.code)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, (
        f"{block.where}: the python block exits {done.returncode}:\n{done.stderr[-4000:]}"
    )


# --- the blocks --------------------------------------------------------------------------------


def kind_of(block: Block) -> tuple[str, str]:
    """(kind, detail): kind is python, shell, quickstart, skip (detail: the reason), text, or
    bad (detail: why the block fails)."""
    if block.marker:
        if QUICKSTART_MARKER.match(block.marker):
            return "quickstart", ""
        skip = SKIP_MARKER.match(block.marker)
        if skip:
            return "skip", skip["reason"].strip()
        if "docs-code" in block.marker:
            return "bad", f"a malformed marker {block.marker!r}: <!-- docs-code: skip (REASON) -->"
    if block.lang in PYTHON_LANGS:
        return "python", ""
    if block.lang in SHELL_LANGS:
        return "shell", ""
    if block.lang in TEXT_LANGS:
        return "text", ""
    if not block.lang:
        return "bad", "the fence names no language (```text for a diagram or plain text)"
    return "bad", f"no way to run or check ```{block.lang}: mark it with the reason"


def _params() -> list[Any]:
    return [pytest.param(block, id=block.where) for block in all_blocks()]


@pytest.mark.parametrize("block", _params())
def test_block(block: Block, tmp_path: Path) -> None:
    kind, detail = kind_of(block)
    if kind == "bad":
        pytest.fail(f"{block.where}: {detail}")
    if kind == "skip":
        pytest.skip(f"marked: {detail}")
    if kind == "text":
        pytest.skip(f"```{block.lang} is not code")
    if kind == "python":
        run_python(block, tmp_path)
    else:
        check_shell(block)


def test_the_pages_have_blocks_of_every_kind_checked() -> None:
    kinds = {kind_of(block)[0] for block in all_blocks()}
    assert {"python", "shell", "quickstart"} <= kinds
    readme = [block for block in all_blocks() if block.page == "README.md"]
    assert any(kind_of(block)[0] == "python" for block in readme), "the README's snippet runs"


def test_every_marker_sits_on_a_fence() -> None:
    """A docs-code or quickstart marker that is not right above a fence marks nothing."""
    marked = {(block.page, block.line - 1) for block in all_blocks() if block.marker}
    for path in pages():
        page = path.relative_to(ROOT).as_posix()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if re.search(r"<!--\s*(docs-code|quickstart:)", line):
                assert (page, n) in marked, f"{page}:{n}: a marker with no fence below it"


@pytest.mark.parametrize("name", ["main", "test"])
def test_quickstart_commands_keep_the_shape_ci_reads(name: str) -> None:
    """One line under its marker, read by `.ci/run` as the line after the fence: a venv, its
    activation, an editable install (of the extra the job needs), then the job."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    at = [n for n, line in enumerate(lines) if line.strip() == f"<!-- quickstart:{name} -->"]
    assert len(at) == 1, f"README.md must have one quickstart:{name} marker"
    fence, command, closing = lines[at[0] + 1 : at[0] + 4]
    assert fence.strip() == "```bash" and closing.strip() == "```", "a one-line bash block"
    steps = [shlex.split(step) for step in command.split("&&")]
    assert steps[0] == ["python3", "-m", "venv", ".venv"]
    assert steps[1] == [".", ".venv/bin/activate"]
    assert steps[2] == ["pip", "install", "-e", "." if name == "main" else ".[test]"]
    if name == "main":
        assert steps[3][0] == "mediaref" and len(steps) == 4
    else:
        assert steps[3] == ["python", "-m", "pytest", "-q"] and len(steps) == 4
