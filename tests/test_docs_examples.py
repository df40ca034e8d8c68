"""The documentation's examples are tests, so the docs cannot rot.

1. Every documented ``tiedattention <cmd> ...`` command line (README.md, docs/user-guide/*.md, docs/gallery.md,
   docs/theory/*.md; inside bash/sh/shell/console/untagged fences, and inline code spans) is checked statically
   against the CLI: the sub-command exists, every ``--option`` is one of that sub-command's, a value converts to
   the option's type (typer's own conversion), no extra positional arguments, a complete command (a fenced line
   without placeholders) has its required options, and the values the code can check without computing are valid
   (the shared problem options build a ``Problem``; ``--alpha`` lists, ``simulate --d`` lists, ``--solver``,
   ``--lam-rule``, ``phase --over / --quantity`` parse; ``reproduce NAME`` is a known figure). Nothing is run.
2. Every ```python block of README.md and docs/user-guide/*.md is executed, each in a fresh namespace with cwd =
   a tmp_path, one BLAS / torch thread. Markers, an HTML comment on the line just before the fence (invisible on
   GitHub), several separated by commas:
     ``<!-- docs-test: skip -->``      not run (only where it cannot run here, e.g. needs a Dask cluster);
     ``<!-- docs-test: slow -->``      run under ``-m slow`` only (blocks that take more than a few seconds);
     ``<!-- docs-test: continue -->``  a fragment: runs in the namespace (and cwd) left by the previous python
                                       block of the same file, which it inherits skip/slow from;
     ``<!-- docs-test: file NAME -->`` before a fence of another language (e.g. ```toml): its text is written
                                       to NAME in the cwd before the python blocks of that file run.
   Parametrised by (file, block index, first line); command lines by (file, line number).
3. What a python block says it prints is what it prints: a comment on a ``print(...)`` line that starts like
   output (a number, ``[``, ``(``, a quote, True/False/None), up to its first ": " (or the quoted text), and the
   full-line comments right after a line with ``print(`` (the output of a loop: ``# adam 0.0222521338 240 True``)
   give the numbers and booleans that must appear, in that order, in the block's stdout; a number shown with k
   decimals matches within 2 units of its last digit (the docs promise the digits "up to the last one or two"),
   an integer exactly. ``# exact d -> inf test errors`` (prose) claims nothing.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
import shlex
import sys
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMAND_DOCS = sorted(
    [ROOT / "README.md", ROOT / "docs" / "gallery.md"]
    + list((ROOT / "docs" / "user-guide").glob("*.md"))
    + list((ROOT / "docs" / "theory").glob("*.md"))
)
PYTHON_DOCS = sorted([ROOT / "README.md"] + list((ROOT / "docs" / "user-guide").glob("*.md")))
SHELL_LANGS = {"", "bash", "sh", "shell", "console", "zsh"}
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


# --------------------------------------------------------------------------------------------- markdown


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    lines: list[tuple[int, str]]  # (1-based line number, text) of the body
    markers: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(t for _, t in self.lines) + "\n"


def parse_markers(text: str) -> list[str]:
    m = MARKER.match(text)
    return [w.strip() for w in m.group(1).split(",") if w.strip()] if m else []


def split_markdown(path: Path) -> tuple[list[Block], list[str]]:
    """Fenced blocks of a markdown file, and its lines with the fenced lines blanked (for inline code spans)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, prose = [], list(lines)
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence = m.group(2)
        markers = parse_markers(lines[i - 1]) if i > 0 else []
        body, j = [], i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[0] * len(fence)):
            body.append((j + 1, lines[j]))
            j += 1
        blocks.append(Block(path, i + 1, m.group(3).lower(), body, markers))
        for k in range(i, min(j + 1, len(lines))):
            prose[k] = ""
        i = j + 1
    return blocks, prose


# --------------------------------------------------------------------------------------------- shell lines

PLACEHOLDER = "__PLACEHOLDER__"
SEPARATORS = {"|", "||", "&&", ";", "&", "|&"}
REDIRECT = re.compile(r"^(\d*>>?|&>>?|\d*<|\d*>&\d*)(.*)$")
ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PREFIX_WORDS = {"do", "then", "else", "time", "exec", "nohup", "command", "!", "{", "("}


def shell_words(text: str) -> list[str]:
    """Words of a shell line: `<placeholder>` -> PLACEHOLDER, `[--opt v]` optional groups unwrapped, `#` comments
    dropped, separators (`;` `|` `&&` ...) as their own words (also a trailing `;` glued to a word)."""
    text = re.sub(r"<[A-Za-z][^<>\n]*?[A-Za-z0-9.]>|<[A-Za-z]>", f" {PLACEHOLDER} ", text)
    text = re.sub(r"\[(-[^\[\]]*)\]", r"\1", text)
    lex = shlex.shlex(text, posix=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        words = list(lex)
    except ValueError:  # unbalanced quotes in a prose span: plain split, comment cut
        words = text.split("#", 1)[0].split()
    out = []
    for w in words:
        if w not in SEPARATORS and w.endswith(";"):
            out += [w[:-1], ";"] if w[:-1] else [";"]
        else:
            out.append(w)
    return out


def invocations(text: str) -> list[list[str]]:
    """The argument lists (after `tiedattention`) of every invocation of the command on one logical shell line:
    split at separators, env-var prefixes and `do`/`then`/... skipped, any path to the executable accepted
    (`.venv/bin/tiedattention`), redirections (`> f`, `2>&1`, `>f`) removed."""
    found, segment = [], []
    for w in shell_words(text) + [";"]:
        if w in SEPARATORS:
            seg = segment
            segment = []
            while seg and (seg[0] in PREFIX_WORDS or ENV_ASSIGN.match(seg[0])):
                seg = seg[1:]
            if not seg or seg[0].rsplit("/", 1)[-1] != "tiedattention":
                continue
            args, skip = [], False
            for a in seg[1:]:
                if skip:
                    skip = False
                    continue
                r = REDIRECT.match(a)
                if r and not a.startswith("-"):
                    skip = r.group(2) == "" and not r.group(1).endswith(tuple("0123456789"))
                    continue
                args.append(a)
            found.append(args)
        else:
            segment.append(w)
    return found


@dataclass(frozen=True)
class CommandLine:
    path: Path
    line: int
    text: str
    complete: bool  # a full command from a fenced block (required options must be there) vs an inline fragment

    @property
    def id(self) -> str:
        return f"{rel(self.path)}:{self.line}"


def logical_lines(block: Block) -> list[tuple[int, str]]:
    """Shell lines of a block: prompts (`$ `) stripped, `\\` continuations joined; in a console block (or an
    untagged block with prompts) only the prompted lines are commands, the rest is output."""
    prompted = block.lang == "console" or any(t.lstrip().startswith("$ ") for _, t in block.lines)
    out, buf, start = [], "", 0
    for no, t in block.lines:
        s = t.strip()
        if not buf:
            if prompted:
                if not s.startswith("$ "):
                    continue
                s = s[2:]
            start = no
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        out.append((start, buf + s))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def sub_commands() -> list[str]:
    import typer

    from tiedattention.cli import app

    return list(typer.main.get_command(app).commands)


def collect_command_lines(paths=COMMAND_DOCS) -> list[CommandLine]:
    """Command lines of shell fences, and inline code spans that invoke `tiedattention ...` (or name a sub-command
    with options, `simulate --d 50,100 --theory`, read as `tiedattention simulate ...`: a fragment)."""
    found = []
    subs = sub_commands()
    for path in paths:
        blocks, prose = split_markdown(path)
        for b in blocks:
            if b.lang in SHELL_LANGS:
                for no, t in logical_lines(b):
                    if invocations(t):
                        found.append(CommandLine(path, no, t, complete=True))
        text = "\n".join(prose)
        for m in CODE_SPAN.finditer(text):
            span = m.group(2)
            if "\n\n" in span:
                continue
            span = " ".join(span.split())
            words = span.split()
            if len(words) > 1 and words[0] in subs and words[1].startswith("--"):
                span = "tiedattention " + span
            elif not re.search(r"(^|[\s/])tiedattention\s+\S", span):
                continue
            if invocations(span):
                found.append(CommandLine(path, text.count("\n", 0, m.start()) + 1, span, complete=False))
    return found


# --------------------------------------------------------------------------------------------- the checker


def is_placeholder(value: str) -> bool:
    """A value the docs leave to the reader: <...>, $VAR, ..., an all-caps name (N, D, FILE), a Greek letter."""
    return (
        PLACEHOLDER in value
        or "$" in value
        or "..." in value
        or "…" in value
        or bool(re.fullmatch(r"[A-Z][A-Z0-9_]*", value))
        or any(ord(c) > 127 for c in value)
    )


def _usage_error(exc: BaseException) -> bool:
    return any(c.__name__ == "UsageError" for c in type(exc).__mro__)


class Checker:
    """Checks one invocation's arguments against the click command typer builds from `tiedattention.cli.app`."""

    def __init__(self) -> None:
        import typer

        from tiedattention.cli import app

        self.group = typer.main.get_command(app)

    def option_map(self, cmd) -> dict[str, object]:
        opts = {}
        for p in cmd.params:
            if p.param_type_name == "option":
                for o in [*p.opts, *p.secondary_opts]:
                    opts[o] = p
        return opts

    def check(self, args: list[str], complete: bool = True) -> list[str]:
        problems: list[str] = []
        if not args or args[0] in ("--help", "-h"):
            return problems
        name = args[0]
        if is_placeholder(name):
            return problems
        if name.startswith("-"):
            top = self.option_map(self.group)  # the app's own options (--version): eager, they end the line
            if name in top and getattr(top[name], "is_eager", False):
                return [f"`{a}` after the eager `{name}` is never read" for a in args[1:]]
            return [f"`{name}` is not an option of `tiedattention` (it takes a sub-command first)"]
        cmd = self.group.commands.get(name)
        if cmd is None:
            near = difflib.get_close_matches(name, list(self.group.commands), n=1)
            hint = f" (did you mean `{near[0]}`?)" if near else ""
            return [f"`tiedattention {name}`: no such sub-command{hint}; known: {', '.join(self.group.commands)}"]
        opts = self.option_map(cmd)
        arguments = [p for p in cmd.params if p.param_type_name == "argument"]
        ctx = cmd.make_context(name, [], resilient_parsing=True)
        given: dict[str, list[str]] = {}  # param name -> values (alternatives a|b|c split)
        positionals: list[str] = []
        placeholders = False
        rest = args[1:]
        i = 0
        only_positional = False
        while i < len(rest):
            tok = rest[i]
            i += 1
            if only_positional or not tok.startswith("-") or re.fullmatch(r"-\d.*", tok) or tok == "-":
                positionals.append(tok)
                placeholders |= is_placeholder(tok)
                continue
            if tok == "--":
                only_positional = True
                continue
            opt, eq, inline = tok.partition("=")
            if opt in ("--help", "-h"):
                continue
            p = opts.get(opt)
            if p is None:
                near = difflib.get_close_matches(opt, [o for o in opts if o.startswith("--")], n=1)
                hint = f" (did you mean `{near[0]}`?)" if near else ""
                problems.append(f"`{opt}` is not an option of `tiedattention {name}`{hint}")
                if not eq and i < len(rest) and not rest[i].startswith("-"):
                    i += 1  # its value, most likely
                continue
            if p.is_flag or getattr(p, "count", False):
                if eq:
                    problems.append(f"`{opt}` is a flag of `tiedattention {name}` and takes no value")
                continue
            if eq:
                value = inline
            elif i < len(rest) and not (rest[i].startswith("--") and rest[i].split("=")[0] in opts):
                value = rest[i]
                i += 1
            else:
                problems.append(f"`{opt}` of `tiedattention {name}` needs a value")
                continue
            if is_placeholder(value):
                placeholders = True
                continue
            alternatives = value.split("|") if "|" in value.strip("|") else [value]
            for v in alternatives:
                try:
                    p.process_value(ctx, v)
                except Exception as exc:
                    if not _usage_error(exc):
                        raise
                    msg = getattr(exc, "message", None) or exc.format_message()
                    problems.append(f"`{opt} {v}` of `tiedattention {name}`: {' '.join(str(msg).split())}")
                    continue
                given.setdefault(p.name, []).append(v)
        n_args = sum(max(p.nargs, 1) for p in arguments if p.nargs != -1)
        if len(positionals) > n_args and not any(p.nargs == -1 for p in arguments):
            extra = " ".join(positionals[n_args:])
            problems.append(f"`tiedattention {name}`: unexpected extra argument(s) `{extra}`")
        if complete and not placeholders:
            for p in cmd.params:
                if p.required and p.param_type_name == "option" and p.name not in given:
                    problems.append(f"`tiedattention {name}` misses its required option `{p.opts[0]}`")
            if len(positionals) < sum(1 for p in arguments if p.required):
                problems.append(f"`tiedattention {name}` misses its argument(s) "
                                + " ".join(p.name.upper() for p in arguments))
        problems += self.check_values(name, cmd, ctx, given, positionals)
        return problems

    def solvers(self) -> list[str] | None:
        """The registered simulation solvers (as `simulate` sees them, gamp included); None without torch."""
        try:
            from tiedattention.amp import register
            from tiedattention.simulation import SOLVERS
        except ImportError:
            return None
        register()
        return sorted(SOLVERS)

    def check_values(self, name, cmd, ctx, given, positionals) -> list[str]:
        """Values click cannot tell but the code can, without computing anything: the shared problem options
        (each given value, with the other options at their defaults, must build a Problem) and the figure name."""
        from tiedattention.cli_common import PROBLEM_OPTIONS
        from tiedattention.errors import ParameterError
        from tiedattention.problem import Problem

        problems = []
        names = {p.name for p in cmd.params}
        params = {p.name: p for p in cmd.params}
        if all(n in names for n, _, _ in PROBLEM_OPTIONS):
            for key, values in given.items():
                if key not in {n for n, _, _ in PROBLEM_OPTIONS}:
                    continue
                for v in values:
                    if key == "target" and "file:" in v:
                        continue  # the user's eigenvalue file
                    try:
                        Problem.from_options(**{key: params[key].process_value(ctx, v)})
                    except ParameterError as exc:
                        problems.append(f"`--{key.replace('_', '-')} {v}` of `tiedattention {name}`: {exc}")
        for key, values in given.items():
            for v in values:
                try:
                    if key == "lam_rule":
                        from tiedattention.theory.scaling import parse_lam_rule

                        parse_lam_rule(v)
                    elif key == "alpha" and isinstance(params[key].process_value(ctx, v), str):  # a list
                        from tiedattention.cli_common import parse_floats

                        parse_floats(v, "alpha")
                    elif key == "d" and name == "simulate":
                        from tiedattention.cli_common import parse_dimensions

                        parse_dimensions(v)
                    elif key == "over" and name == "phase":
                        from tiedattention.reproduce.phase import parse_over

                        parse_over(v, Problem.from_options())
                    elif key == "quantity" and name == "phase":
                        from tiedattention.reproduce.phase import quantities

                        if v not in quantities(rs_stability=True):
                            raise ParameterError("quantity", f"unknown quantity {v!r}")
                    elif key == "solver":
                        known = self.solvers()
                        if known is not None and v not in known:
                            raise ParameterError("solver", f"unknown solver {v!r} (known: {', '.join(known)})")
                except ParameterError as exc:
                    problems.append(f"`--{key.replace('_', '-')} {v}` of `tiedattention {name}`: {exc}")
        if name == "reproduce" and positionals and not is_placeholder(positionals[0]) and positionals[0] != "all":
            from tiedattention.reproduce import figure_module

            try:
                figure_module(positionals[0])
            except ParameterError as exc:
                problems.append(f"`tiedattention reproduce {positionals[0]}`: {exc}")
        return problems


@pytest.fixture(scope="module")
def checker() -> Checker:
    return Checker()


COMMAND_LINES = collect_command_lines()


def test_collected_enough_command_lines():
    """Not vacuous: the docs hold dozens of command lines, in every collected kind of place."""
    assert len(COMMAND_LINES) >= 30, [c.id for c in COMMAND_LINES]
    assert any(c.complete for c in COMMAND_LINES) and any(not c.complete for c in COMMAND_LINES)
    files = {c.path for c in COMMAND_LINES}
    assert ROOT / "README.md" in files and ROOT / "docs" / "gallery.md" in files
    assert any(p.parent.name == "theory" for p in files) and any(p.parent.name == "user-guide" for p in files)
    commands = {args[0] for c in COMMAND_LINES for args in invocations(c.text) if args}
    assert {"theory", "thresholds", "simulate", "sweep", "reproduce", "spectrum", "scaling", "decompose"} <= commands


@pytest.mark.parametrize("cmdline", COMMAND_LINES, ids=[c.id for c in COMMAND_LINES])
def test_documented_command_line(cmdline, checker):
    problems = [p for args in invocations(cmdline.text) for p in checker.check(args, cmdline.complete)]
    assert not problems, f"{cmdline.id}: {cmdline.text}\n  " + "\n  ".join(problems)


def test_checker_reports_bad_lines(checker):
    """The checker finds what it is there to find (a made-up line per kind of mistake), and passes good lines."""

    def check(text, complete=True):
        return [p for args in invocations(text) for p in checker.check(args, complete)]

    bad = {
        "tiedattention theory --alpha 0.5 --no-such-option 3": "`--no-such-option` is not an option",
        "tiedattention theory --alpha 0.5 --seeds 4": "`--seeds` is not an option of `tiedattention theory`",
        "tiedattention theroy --alpha 0.5": "did you mean `theory`",
        "tiedattention thresholds --noise abc": "`--noise abc`",
        "tiedattention theory --alpha 0.5 --tokens 2.5": "`--tokens 2.5`",
        "tiedattention theory --alpha 0.5 --model factorized|diagonal": "`--model diagonal`",
        "tiedattention theory --alpha 0.5 --target powrlaw:1.25": "unknown target",
        "tiedattention reproduce fig11 --out out/": "unknown figure",
        "tiedattention simulate --alpha 0.5 --solver sgd": "unknown solver 'sgd'",
        "tiedattention scaling --lam-rule best": "`--lam-rule best`",
        "tiedattention theory --alpha 0.1:2": "`--alpha 0.1:2`",
        "tiedattention phase --alpha 0.1,1 --over lamda=0.1,1 --out p.png": "`--over lamda=0.1,1`",
        "tiedattention phase --alpha 0.1,1 --over lam=0.1,1 --quantity test --out p.png": "`--quantity test`",
        "tiedattention simulate --alpha 0.5 --d 50,50": "dimensions must be distinct",
        "tiedattention sweep a.toml b.toml --out out/": "unexpected extra argument",
        "tiedattention sweep grid.toml": "required option `--out`",
        "tiedattention simulate --d 40 --alpha 0.5 --json=yes": "takes no value",
        # the option hides behind a continuation, an env prefix, a path, a pipe and a loop
        "OPENBLAS_NUM_THREADS=1 .venv/bin/tiedattention simulate --alpha 0.5 --sedes 2 | head -3": "`--sedes`",
        "for f in fig1 fig2; do tiedattention reproduce $f --quik --out out/; done": "`--quik`",
        "tiedattention --versoin": "not an option of `tiedattention`",
        "tiedattention --version theory": "never read",
    }
    for text, expected in bad.items():
        problems = check(text)
        assert any(expected in p for p in problems), (text, problems)
    good = [
        "tiedattention theory --alpha 0.01:4:30 --lam 1e-4 --json > curve.jsonl   # 30 log-spaced α",
        "TIEDATTENTION_SEEDS_400=24 tiedattention simulate --d 50,100 --alpha 0.5 --solver prox 2>&1 | tee log",
        "tiedattention scaling --d N --route auto|fast|plain",
        "tiedattention theory --alpha <that grid> --lam 0 --model factorized|direct",
        "make demo && .venv/bin/tiedattention reproduce fig1 --quick --out out/demo",
        "tiedattention sweep grid.toml --out out/grid --no-progress --dry-run",
        "tiedattention --version",
    ]
    for text in good:
        assert invocations(text) and not check(text), (text, check(text))
    assert check("tiedattention theory --finite-d D", complete=False) == []  # a fragment: --alpha may be left out
    # continuation lines of a fenced block are joined, prompts stripped, output lines of a console block ignored
    block = Block(ROOT / "x.md", 1, "console", [(2, "$ tiedattention simulate --alpha 0.5 \\"), (3, "    --sedes 2"),
                                                 (4, "tiedattention output --not-a-command")])
    assert logical_lines(block) == [(2, "tiedattention simulate --alpha 0.5  --sedes 2")]


# --------------------------------------------------------------------------------------------- python blocks


@dataclass(frozen=True)
class PyBlock:
    path: Path
    index: int  # among the python blocks of the file
    block: Block
    files: tuple[tuple[str, str], ...]  # (name, text) written to the cwd first (`docs-test: file NAME`)

    @property
    def first_line(self) -> str:
        for _, t in self.block.lines:
            if t.strip() and not t.strip().startswith("#"):
                return t.strip()
        return ""

    @property
    def id(self) -> str:
        first = re.sub(r"[^A-Za-z0-9_.=(),:\"' -]", "", self.first_line)[:60]
        return f"{rel(self.path)}#{self.index}:{first}"


def collect_python_blocks(paths=PYTHON_DOCS) -> list[PyBlock]:
    found = []
    for path in paths:
        blocks, _ = split_markdown(path)
        files = []
        for b in blocks:
            for m in b.markers:
                if m.startswith("file "):
                    files.append((m[5:].strip(), b.text))
        py = [b for b in blocks if b.lang in ("python", "py", "python3")]
        found += [PyBlock(path, i, b, tuple(files)) for i, b in enumerate(py)]
    return found


PY_BLOCKS = collect_python_blocks()


def continues(pb: PyBlock, blocks: list[PyBlock]) -> PyBlock | None:
    """The block `pb` continues: `continue` the previous python block of its file, `continue N` block N (0-based
    among the file's python blocks); None if none (or a bad N, which test_markers_are_known reports)."""
    for m in pb.block.markers:
        words = m.split()
        if words[0] == "continue":
            index = int(words[1]) if len(words) > 1 and words[1].isdigit() else pb.index - 1
            same = [b for b in blocks if b.path == pb.path]
            return same[index] if 0 <= index < pb.index else None
    return None


def chain(pb: PyBlock, blocks: list[PyBlock] | None = None) -> list[PyBlock]:
    """The block and the ones it continues, first to last."""
    out = [pb]
    while (prev := continues(out[0], blocks or PY_BLOCKS)) is not None:
        out.insert(0, prev)
    return out


def marks_of(pb: PyBlock, blocks: list[PyBlock] | None = None) -> list:
    """skip / slow of the block or of any block it continues."""
    markers = {m.split()[0] for b in chain(pb, blocks) for m in b.block.markers}
    marks = []
    if "skip" in markers:
        marks.append(pytest.mark.skip(reason="docs-test: skip (cannot run here)"))
    if "slow" in markers:
        marks.append(pytest.mark.slow)
    return marks


def test_collected_enough_python_blocks():
    assert len(PY_BLOCKS) >= 5, [b.id for b in PY_BLOCKS]
    run = [b for b in PY_BLOCKS if not any(m.name == "skip" for m in marks_of(b))]
    assert len(run) >= 5, "most documented Python blocks must run"
    assert any(b.path.name == "README.md" for b in run)


def test_markers_are_known():
    """A misspelt marker would silently do nothing: every `docs-test:` comment before a fence must be one of
    skip / slow / continue [N] (python blocks) or file NAME (any block), N an earlier python block."""
    for path in sorted(set(PYTHON_DOCS) | set(COMMAND_DOCS)):
        blocks, _ = split_markdown(path)
        py = [b for b in blocks if b.lang in ("python", "py", "python3")]
        for b in blocks:
            where = f"{rel(path)}:{b.line}"
            for m in b.markers:
                if re.fullmatch(r"file [\w.-]+", m):
                    continue
                assert b in py and re.fullmatch(r"skip|slow|continue( \d+)?", m), f"{where}: unknown marker {m!r}"
                if m.startswith("continue"):
                    n = int(m.split()[1]) if " " in m else py.index(b) - 1
                    assert 0 <= n < py.index(b), f"{where}: {m!r} does not name an earlier python block"


@contextlib.contextmanager
def one_thread():
    """One BLAS / OpenMP / torch thread (the env for processes the block starts, e.g. sweep workers; numpy in
    this process keeps the threads it started with: run pytest with OPENBLAS_NUM_THREADS=1 for those)."""
    keys = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    old_env = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: "1" for k in keys})
    torch = sys.modules.get("torch")
    if torch is None:
        with contextlib.suppress(ImportError):
            import torch
    old_threads = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if torch is not None:
            torch.set_num_threads(old_threads)


# ------------------------------------------------------------------------------------- printed output claims
VALUE = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|True|False|None)(?![\w.])")
OUTPUT_START = re.compile(r"""^\s*(-?\.?\d|\[|\(|"|'|True\b|False\b|None\b)""")


def printed_claims(text: str) -> list[tuple[int, str]]:
    """(line, claim) of the block's comments that say what it prints (see the module docstring, 3.)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
    code_lines = {t.start[0] for t in tokens if t.type not in skip}
    comment_lines = {t.start[0] for t in tokens if t.type == tokenize.COMMENT}
    print_lines: set[int] = set()  # every line of a logical line that calls print
    start, has_print = None, False
    for t in tokens:
        if t.type in skip[:2] or t.type in skip[3:]:
            continue
        start = t.start[0] if start is None else start
        has_print |= t.type == tokenize.NAME and t.string == "print"
        if t.type == tokenize.NEWLINE:
            if has_print:
                print_lines.update(range(start, t.start[0] + 1))
            start, has_print = None, False
    claims = []
    for t in tokens:
        if t.type != tokenize.COMMENT:
            continue
        line, body = t.start[0], t.string.lstrip("#").strip()
        if line in code_lines:  # a trailing comment: a claim only on a print line and when it starts like output
            if line not in print_lines or not OUTPUT_START.match(body):
                continue
            quoted = re.match(r"""^(["'])(.*?)\1""", body)
            claim = quoted.group(2) if quoted else body.split(": ")[0]
        else:  # a full-line comment right after a print (and the comments between): "# adam 0.0222 240 True"
            above = line - 1
            while above in comment_lines and above not in code_lines:
                above -= 1
            words = body.split()
            if above not in print_lines or not any(VALUE.fullmatch(w.strip(",;")) for w in words[:2]):
                continue
            claim = body
        if VALUE.search(claim):
            claims.append((line, claim))
    return claims


def _matches(shown: str, value: str) -> bool:
    if shown in ("True", "False", "None") or value in ("True", "False", "None"):
        return shown == value
    try:
        v = float(value)
    except ValueError:
        return False
    mantissa = shown.lower().split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    unit = 10.0 ** (-decimals) * (10.0 ** int(shown.lower().split("e")[1]) if "e" in shown.lower() else 1.0)
    if "." not in mantissa and "e" not in shown.lower():
        return v == float(shown)  # an integer (a count, a number of steps): exactly
    return abs(v - float(shown)) <= 2 * unit * (1 + 1e-9)


def check_printed(text: str, stdout: str, where: str = "", first_line: int = 0) -> list[str]:
    """The claims of :func:`printed_claims` that ``stdout`` does not bear out (an empty list: all hold); a claim's
    line is reported as ``first_line`` + its line in ``text`` (the fence's line: the line in the document)."""
    texts = stdout.splitlines()
    lines = [VALUE.findall(t) for t in texts]
    problems, pos = [], 0
    for line, claim in printed_claims(text):  # each claim is one printed line, the claims in the order printed
        shown = VALUE.findall(claim)
        first = claim.split()[0].strip("[(,;:")
        label = None if VALUE.fullmatch(first) or not first else first  # "adam" in "adam 0.0222 240 True"
        k = next((i for i in range(pos, len(lines)) if _subsequence(shown, lines[i])
                  and (label is None or label in texts[i].split())), None)
        if k is None:
            problems.append(f"{where}line {first_line + line} says it prints {claim!r}; it printed:\n"
                            f"{stdout.strip()[-1500:]}")
            continue
        pos = k + 1
    return problems


def _subsequence(shown: list[str], values: list[str]) -> bool:
    i = 0
    for v in values:
        if i < len(shown) and _matches(shown[i], v):
            i += 1
    return i == len(shown)


class _Tee(io.StringIO):
    """Captures what is printed and passes it on (pytest still shows it with -s)."""

    def __init__(self, other):
        super().__init__()
        self.other = other

    def write(self, text):
        self.other.write(text)
        return super().write(text)


def run_chain(pb: PyBlock, blocks: list[PyBlock], cwd: Path, chdir, left: dict) -> dict:
    """Run `pb` (after the blocks it continues) and return its namespace. `left` maps (path, index) to the
    namespace (a copy) and cwd a block left when it ran: a continuation resumes from there instead of re-running
    its predecessors (then in their cwd)."""
    todo = chain(pb, blocks)
    start = 0
    for k in range(len(todo) - 1, 0, -1):
        if (todo[k - 1].path, todo[k - 1].index) in left:
            start = k
            break
    if start:
        namespace, cwd = left[(todo[start - 1].path, todo[start - 1].index)]
        namespace = dict(namespace)
    else:
        namespace = {"__name__": "__main__"}
        for name, text in pb.files:
            (cwd / name).write_text(text)
    chdir(cwd)
    with one_thread():
        for b in todo[start:]:
            t0 = time.perf_counter()
            out = _Tee(sys.stdout)
            with contextlib.redirect_stdout(out):
                exec(compile("\n" * b.block.line + b.block.text, rel(b.path), "exec"), namespace)  # doc line numbers
            print(f"{b.id}: {time.perf_counter() - t0:.1f} s")
            problems = check_printed(b.block.text, out.getvalue(), f"{rel(b.path)}: ", b.block.line)
            assert not problems, "\n".join(problems)
            left[(b.path, b.index)] = (dict(namespace), cwd)
    return namespace


_LEFT: dict[tuple[Path, int], tuple[dict, Path]] = {}


@pytest.mark.parametrize("pb", [pytest.param(b, marks=marks_of(b), id=b.id) for b in PY_BLOCKS])
def test_documented_python_block(pb, tmp_path, monkeypatch):
    if "tiedattention.simulation" in "".join(b.block.text for b in chain(pb)):
        pytest.importorskip("torch")  # the simulation extra
    run_chain(pb, PY_BLOCKS, tmp_path, monkeypatch.chdir, _LEFT)


def test_block_markers_and_chains(tmp_path, monkeypatch):
    """The marker rules on a made-up page: continue / continue N chains, inherited skip and slow, file NAME."""
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nx = 1\n```\n"
        "<!-- docs-test: continue -->\n```python\ny = x + 1\n```\n"
        "<!-- docs-test: skip -->\n```python\nimport a_cluster_that_is_not_here\n```\n"
        "<!-- docs-test: continue -->\n```python\nw = a_cluster_that_is_not_here\n```\n"
        "<!-- docs-test: continue 0, slow -->\n```python\nz = open('data.txt').read() + str(x)\n```\n"
        "<!-- docs-test: file data.txt -->\n```text\nhello\n```\n"
    )
    blocks = collect_python_blocks([page])
    assert [b.block.markers for b in blocks] == [[], ["continue"], ["skip"], ["continue"], ["continue 0", "slow"]]
    assert [[c.index for c in chain(b, blocks)] for b in blocks] == [[0], [0, 1], [2], [2, 3], [0, 4]]
    assert [[m.name for m in marks_of(b, blocks)] for b in blocks] == [[], [], ["skip"], ["skip"], ["slow"]]
    assert blocks[4].files == (("data.txt", "hello\n"),)
    left: dict = {}
    for k, want in ((1, {"x": 1, "y": 2}), (4, {"x": 1, "z": "hello\n1"})):  # re-run from scratch
        (tmp_path / f"fresh{k}").mkdir()
        ns = run_chain(blocks[k], blocks, tmp_path / f"fresh{k}", monkeypatch.chdir, {})
        assert {n: ns[n] for n in want} == want and ("y" in ns) == (k == 1)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    run_chain(blocks[0], blocks, tmp_path / "a", monkeypatch.chdir, left)
    ns = run_chain(blocks[4], blocks, tmp_path / "b", monkeypatch.chdir, left)  # resumes from block 0's namespace
    assert ns["z"] == "hello\n1" and "y" not in ns and Path.cwd() == tmp_path / "a"
    with pytest.raises(ModuleNotFoundError):
        run_chain(blocks[3], blocks, tmp_path / "b", monkeypatch.chdir, {})


def test_printed_claims_are_checked():
    """The comments that say what a block prints are found (on print lines, after a print loop; not prose, not a
    non-print line), and a claim that the output does not bear out is reported with its line."""
    text = (
        'for s in ("adam", "prox"):\n'
        '    print(s, f"{1 / 3:.4f}", 240, True)\n'
        '# adam 0.3333 240 True\n'
        '# prox 0.3334 240 True\n'
        'x = 2  # 3 things, not a print\n'
        'print(x)    # exact d -> inf test errors\n'
        'print(round(0.15348, 4))   # 0.1535: where the train error leaves zero\n'
        'print(\n    "4 cells:", 0)   # "4 cells: 0 skipped"\n'
        'print([0.2963, 0.1742])\n'
        '# now the figure, 2 panels\n'
    )
    assert printed_claims(text) == [(3, "adam 0.3333 240 True"), (4, "prox 0.3334 240 True"), (7, "0.1535"),
                                    (9, "4 cells: 0 skipped")]
    out = "adam 0.3333 240 True\nprox 0.3333 240 True\n2\n0.1535\n4 cells: 0\n[0.2963, 0.1742]\n"
    assert check_printed(text, out) == []  # 0.3334 is within 2 units of the last digit of 0.3333
    wrong = {"0.1535": out.replace("0.1535", "0.1538"),
             "adam 0.3333 240 True": out.replace("240 True\np", "241 True\np"),
             "prox 0.3334 240 True": out.replace("prox 0.3333 240 True", "prox 0.3333 240 False"),
             "4 cells: 0 skipped": out.replace("4 cells: 0", "0 cells: 4")}
    for claim, printed in wrong.items():
        problems = check_printed(text, printed, "page.md: ", 10)
        assert len(problems) == 1 and f"says it prints {claim!r}" in problems[0], (claim, problems)
    assert "page.md: line 17 says" in check_printed(text, out.replace("0.1535", "0.2"), "page.md: ", 10)[0]
    assert check_printed(text, "adam 0.3333 240 True\n0.1535\nprox 0.3333 240 True\n4 cells: 0\n")  # order counts
