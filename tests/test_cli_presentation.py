"""How the CLI presents itself: table titles name the problem a table was computed at (target, Δ, λ, T always, and
every other option that differs from its default: a title of target, Δ, λ and T alone hid the output noise,
temperatures, width and model), and the top-level help lists each command on one line."""

import pytest
from typer.testing import CliRunner

from tiedattention import Problem
from tiedattention.cli import app
from tiedattention.cli_common import problem_title


def test_default_problem_names_only_the_fixed_options():
    assert problem_title(Problem.from_options()) == "mp:0.5 Δ=0.5 λ=0.01 T=2"


def test_every_option_off_its_default_is_named_in_order():
    p = Problem.from_options(target="powerlaw:1.5", noise=0.0307407208, noise_out=0.136, lam=1.45453e-5, tokens=3,
                             beta=2.0, beta0=0.5, kappa=1.5, model="direct", task="seq2seq")
    assert problem_title(p) == ("powerlaw:1.5 direct seq2seq Δ=0.0307407 Δ_out=0.136 λ=1.45453e-05 T=3 κ=1.5 β=2 "
                                "β0=0.5")


def test_always_and_skip():
    p = Problem.from_options(beta0=2.0, lam=0.1)
    assert problem_title(p, always=("target",), skip=("lam", "beta0")) == "mp:0.5"
    assert problem_title(p, always=("target", "kappa")) == "mp:0.5 λ=0.1 κ=1 β0=2"


@pytest.mark.parametrize("args, title", [
    (["thresholds", "--noise-out", "0.1", "--kappa", "0.5", "--beta", "2"],
     "thresholds: mp:0.5 Δ=0.5 Δ_out=0.1 T=2 κ=0.5 (κ0 = 0.5)"),  # (β does not enter the thresholds)
    (["theory", "--alpha", "0.5", "--beta0", "2", "--noise-out", "0.1"],
     "state evolution: mp:0.5 Δ=0.5 Δ_out=0.1 λ=0.01 T=2 β0=2"),
    (["theory", "--alpha", "0.5", "--d", "100"], "state evolution: mp:0.5 Δ=0.5 λ=0.01 T=2"),  # (MP: no d)
    (["theory", "--alpha", "0.5", "--d", "100", "--target", "powerlaw:1.5"],
     "state evolution: powerlaw:1.5 Δ=0.5 λ=0.01 T=2 d=100"),
])
def test_cli_title_is_whole_on_its_first_line(args, title):
    """The title is printed on one line even where it is wider than the table (rich wrapped it to the columns)."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].strip() == title


def test_each_command_is_one_line_in_the_top_level_help():
    """The command list shows each command's first paragraph: one line each at 120 columns (reproduce's long first
    paragraph spilled onto three lines)."""
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "120"}, terminal_width=120)
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "Commands" in line)
    rows = [line for line in lines[start + 1:] if line.startswith("│")]
    names = [row.split()[1] for row in rows]
    assert names == ["theory", "thresholds", "simulate", "spectrum", "scaling", "decompose", "sweep", "reproduce",
                     "phase"], rows


@pytest.mark.parametrize("text, fragment", [
    ("x:1:3", "cannot read 'x:1:3' (expected a,b,c or start:stop:num)"),
    ("0:1:3", "'0:1:3': start:stop:num is log-spaced, so start and stop must be finite and > 0"),
    ("0.1:inf:3", "must be finite and > 0"),
    ("0.1:1:0", "'0.1:1:0': num must be >= 1 (got 0)"),
    ("0.5:0.5:3", "gives 3 identical values"),
])
def test_a_bad_range_says_what_is_wrong(text, fragment):
    from tiedattention.cli_common import parse_floats
    from tiedattention.errors import ParameterError

    with pytest.raises(ParameterError, match="alpha") as info:
        parse_floats(text, "alpha")
    assert fragment in str(info.value)


def test_phase_over_a_range_from_zero_is_refused_in_one_line():
    """noise_out=0:0.3:3 (a range from 0, which cannot be log-spaced) was 'cannot read', as if the form were wrong."""
    result = CliRunner().invoke(app, ["phase", "--alpha", "0.1:2:4", "--over", "noise_out=0:0.3:3"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--over" in lines[0] and "log-spaced" in lines[0] and "a list a,b,c" in lines[0]


def test_scaling_summary_is_one_line_with_a_rounded_ci():
    """The summary printed the CI as a Python list of full floats, wrapped at 80 columns when piped."""
    import re

    result = CliRunner().invoke(app, ["scaling", "--target", "powerlaw:2", "--n-range", "1e3:1e6", "--points", "8"])
    assert result.exit_code == 0, result.output
    line = result.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"fitted exponent 0\.\d{4}, 95 % OLS CI \[0\.\d{4}, 0\.\d{4}\] \(narrow: scaling\.md §7\); "
                        r"predicted 0\.7500: optimal lambda: f = 1 - 1/\(2 gamma\)", line), line
