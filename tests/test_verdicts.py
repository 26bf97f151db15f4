"""Reading a Table 3 sweep (transformer_lib.book.verdicts): Welch's test against the statistic, the
Welch-Satterthwaite degrees of freedom and the t distribution written out here; the test's
false-positive rate on simulated seeds; the verdicts on made-up comparisons; and the reading of
lines grouped by variant, of the paper's rows and of the side-by-side timing.
"""

import math
import random
import statistics
from dataclasses import replace

import numpy as np
import pytest

from transformer_lib.book.variations import SWEEP_PROFILES
from transformer_lib.book.verdicts import (
    ALPHA,
    BLEU,
    COUNTERPARTS,
    PAPER,
    PERPLEXITY,
    Comparison,
    Sample,
    Sweep,
    compare,
    difference,
    effect,
    family,
    holm,
    level,
    profile_name,
    seconds_per_update,
    table_markdown,
    throughput_ratios,
    updates_to_reach,
    verdict,
)
from transformer_lib.provenance import jsonable

# ---------------------------------------------------------------------------------------------
# Welch's t-test against the formulas


def t_density(x: np.ndarray, df: float) -> np.ndarray:
    """Student's t density with ``df`` degrees of freedom, from the gamma function."""
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    return scale * (1 + x**2 / df) ** (-(df + 1) / 2)


def t_cdf(t: float, df: float) -> float:
    """P(T <= t), the density integrated numerically (Simpson's rule on a fine grid from 0)."""
    x = np.linspace(0.0, abs(t), 20001)
    y = t_density(x, df)
    h = x[1] - x[0]
    half = h / 3 * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum())
    return 0.5 + math.copysign(half, t)


def t_quantile(q: float, df: float) -> float:
    low, high = 0.0, 100.0
    for _ in range(80):  # bisection on the numerical distribution function
        middle = (low + high) / 2
        low, high = (middle, high) if t_cdf(middle, df) < q else (low, middle)
    return (low + high) / 2


@pytest.mark.parametrize(
    "a, b",
    [
        ((9.9, 10.0, 10.2), (8.33, 8.47, 8.22)),
        ((24.8, 26.1, 23.0), (25.84, 23.85, 26.79)),
        ((1.0, 2.0), (1.5, 1.7, 1.6, 1.4)),
        ((5.0, 5.1, 5.3, 4.9, 5.2), (5.4, 5.6)),
    ],
)
def test_welch_is_the_statistic_its_degrees_of_freedom_and_the_t_distribution(a, b):
    """t = (mean_a - mean_b) / sqrt(s_a^2/n_a + s_b^2/n_b), the Welch-Satterthwaite degrees of
    freedom, the two-sided p-value and the 95% interval from the t distribution."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    delta = statistics.fmean(a) - statistics.fmean(b)
    t = delta / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    p = 2 * (1 - t_cdf(abs(t), df))
    half = t_quantile(1 - ALPHA / 2, df) * math.sqrt(va + vb)
    c = compare(Sample(a), Sample(b))
    assert c.delta == pytest.approx(delta, rel=1e-12)
    assert c.p == pytest.approx(p, rel=1e-6, abs=1e-9)
    assert (c.low, c.high) == pytest.approx((delta - half, delta + half), rel=1e-6)
    assert c.significant == (p < ALPHA) and c.tested
    assert c.base_band == pytest.approx(2 * statistics.stdev(b))
    # The interval excludes zero exactly when the test rejects.
    assert (c.low > 0 or c.high < 0) == c.significant


def test_with_one_run_on_either_side_nothing_is_tested():
    one = compare(Sample((9.9,)), Sample((8.3, 8.4, 8.2)))
    assert not one.tested and not one.significant and math.isnan(one.low)
    assert one.delta == pytest.approx(9.9 - 8.3)
    base_alone = compare(Sample((9.9, 9.8)), Sample((8.3,)))
    assert not base_alone.tested and math.isnan(base_alone.base_band)
    assert Sample(()).runs == 0 and math.isnan(Sample(()).mean)


def test_the_false_positive_rate_is_the_level_and_a_large_effect_is_found():
    """Seeds drawn from one distribution for both sides: about 5% of tests reject (3 and 3 runs,
    4,000 simulated pairs, a fixed seed); a shift of ten standard deviations always rejects."""
    rng = random.Random(0)
    draws = 4000
    rejected = sum(
        compare(
            Sample(tuple(rng.gauss(8.3, 0.13) for _ in range(3))),
            Sample(tuple(rng.gauss(8.3, 0.13) for _ in range(3))),
        ).significant
        for _ in range(draws)
    )
    spread = 4 * math.sqrt(ALPHA * (1 - ALPHA) / draws)  # four binomial standard deviations
    # Welch's test with three runs a side is slightly conservative: at most the level.
    assert ALPHA - 2 * spread < rejected / draws < ALPHA + spread
    shifted = [
        compare(
            Sample(tuple(rng.gauss(9.6, 0.13) for _ in range(3))),
            Sample(tuple(rng.gauss(8.3, 0.13) for _ in range(3))),
        ).significant
        for _ in range(200)
    ]
    assert all(shifted)


# ---------------------------------------------------------------------------------------------
# Holm's correction against its definition


def test_holm_on_four_p_values_worked_out_by_hand():
    """Sorted 0.005, 0.01, 0.03, 0.04 against α/4, α/3, α/2, α: the first two pass and 0.03 >
    0.025 stops the sequence, so 0.04 fails too. Adjusted: 4 · 0.005, 3 · 0.01, 2 · 0.03 = 0.06,
    and 0.04 raised to the 0.06 before it."""
    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    assert [p < ALPHA for p in adjusted] == [True, False, False, True]
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # 2 · 0.5, then capped at 1
    assert holm([0.02]) == [0.02] and holm([]) == []  # a family of one is the test itself


def holm_rejects(p_values: list[float], alpha: float) -> set[int]:
    """Holm's procedure as his paper states it: sorted, the i-th smallest (i from 1) against
    α / (m - i + 1), rejecting up to the first that is not below its bound."""
    rejected = set()
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    for rank, i in enumerate(order):
        if not p_values[i] < alpha / (len(p_values) - rank):
            break
        rejected.add(i)
    return rejected


@pytest.mark.parametrize("seed", range(20))
def test_holm_adjusted_p_values_reject_what_the_sequence_rejects(seed):
    rng = random.Random(seed)
    p_values = [rng.random() ** rng.choice((1, 3, 6)) for _ in range(rng.randint(1, 30))]
    adjusted = holm(p_values)
    for alpha in (0.01, 0.05, 0.1):
        assert {i for i, p in enumerate(adjusted) if p < alpha} == holm_rejects(p_values, alpha)
        bonferroni = {i for i, p in enumerate(p_values) if p < alpha / len(p_values)}
        assert bonferroni <= holm_rejects(p_values, alpha)  # Holm passes at least as many
    m = len(p_values)
    assert all(p <= q <= min(1.0, m * p) + 1e-15 for p, q in zip(p_values, adjusted, strict=True))


# ---------------------------------------------------------------------------------------------
# Verdicts on made-up comparisons


def made_up(delta, p, runs=3, base_runs=3, band=0.26, half=0.3) -> Comparison:
    return Comparison(delta, delta - half, delta + half, p, runs, base_runs, band)


@pytest.mark.parametrize(
    "comparison, paper, measure, kind, words",
    [
        (
            made_up(+1.6, 0.001),
            +0.37,
            PERPLEXITY,
            "agrees",
            "worse beyond the noise, the paper's way",
        ),
        (
            made_up(-0.5, 0.01),
            +0.37,
            PERPLEXITY,
            "opposes",
            "better beyond the noise, the opposite",
        ),
        (made_up(+1.6, 0.001), -0.01, PERPLEXITY, "new", "where the paper saw no difference"),
        (made_up(+1.6, 0.001), None, PERPLEXITY, "beyond", "+1.60 perplexity (95% interval"),
        (
            made_up(+1.6, 0.2),
            +0.37,
            PERPLEXITY,
            "noise",
            "p = 0.2, 3 and 3 seeds): inside the noise",
        ),
        (made_up(-0.1, 0.9), 0.0, PERPLEXITY, "noise", "inside the noise (the paper: +0.00)"),
        (made_up(-17.4, 0.001), -0.3, BLEU, "agrees", "-17.4 BLEU"),
        (made_up(-1.0, 0.001), -0.3, BLEU, "agrees", "the paper's way (the paper: -0.3)"),
        (made_up(+2.5, 0.01), -1.2, BLEU, "opposes", "better beyond the noise, the opposite"),
        (made_up(+7.6, math.nan, runs=1), -0.04, PERPLEXITY, "one run", "outside the base's ±0.26"),
        (made_up(+0.1, math.nan, runs=1), None, PERPLEXITY, "one run", "inside the base's ±0.26"),
        (made_up(+0.1, math.nan, base_runs=1, band=math.nan), None, BLEU, "unknown", "unknown"),
    ],
)
def test_verdicts_on_made_up_comparisons(comparison, paper, measure, kind, words):
    said = verdict(comparison, paper, measure)
    assert said.kind == kind and words in said.text
    if paper is None:
        assert "paper" not in said.text


def test_a_difference_many_times_the_papers_agrees_in_direction_only():
    collapse = made_up(-17.4, 0.001)
    assert verdict(collapse, -0.3, BLEU, times=58.0).kind == "outsized"
    assert "58 times its size" in verdict(collapse, -0.3, BLEU, times=58.0).text
    assert verdict(collapse, -0.3, BLEU, times=4.9).kind == "agrees"
    assert verdict(collapse, +0.3, BLEU, times=-58.0).kind == "opposes"  # no size for opposites


def test_inside_the_noise_is_never_agreement_even_where_the_paper_saw_none():
    for paper in (0.0, 0.01, -0.01, 0.5):
        assert verdict(made_up(0.05, 0.8), paper, PERPLEXITY).kind == "noise"


def test_the_paper_tie_is_half_its_last_digit():
    assert verdict(made_up(2.0, 0.001), 0.2, BLEU).kind == "agrees"  # +0.2 BLEU is a difference
    assert verdict(made_up(2.0, 0.001), 0.1, BLEU).kind == "new"  # +0.1 BLEU is none
    assert verdict(made_up(0.5, 0.001), 0.02, PERPLEXITY).kind == "agrees"
    assert verdict(made_up(0.5, 0.001), 0.01, PERPLEXITY).kind == "new"


# ---------------------------------------------------------------------------------------------
# A sweep's lines read by variant


def line(name, row, ppl, bleu, seed=0, replica_of=None, label=None, long=20.0, **extra):
    training = {"seed": seed}
    return {
        "name": name,
        "row": row,
        "label": label or name,
        "valid_ppl": ppl,
        "bleu": bleu,
        "replica_of": replica_of,
        "parameters": 1000,
        "bleu_by_length": {"long": {"bleu": long}, "short": {"bleu": 30.0}},
        "config": {"training": training},
        **extra,
    }


LINES = (
    line("base", "base", 8.33, 25.8),
    line("base-seed1", "noise", 8.47, 23.9, seed=1),
    line("base-seed2", "noise", 8.22, 26.8, seed=2),
    line("FFN-none", "FFN", 9.97, 24.8),
    line("A-h1", "A", 8.22, 26.0),
    line("FFN-none-seed1", "FFN", 10.1, 25.0, seed=1, replica_of="FFN-none"),
    line("FFN-none-seed2", "FFN", 9.9, 24.1, seed=2, replica_of="FFN-none"),
    # An older line without the field: its variant is its own name.
    {k: v for k, v in line("C-N4", "C", 15.96, 8.1).items() if k != "replica_of"},
)
MANIFEST = {"profile": jsonable(SWEEP_PROFILES["cpu"])}


def test_lines_are_grouped_by_the_variant_they_repeat():
    sweep = Sweep(LINES, MANIFEST)
    assert [family(r) for r in LINES] == ["base"] * 3 + ["FFN-none", "A-h1"] + ["FFN-none"] * 2 + [
        "C-N4"
    ]
    assert list(sweep.variants) == ["base", "FFN-none", "A-h1", "C-N4"]
    assert sweep.sample("FFN-none", PERPLEXITY).values == (9.97, 10.1, 9.9)
    assert sweep.sample("base", lambda r: r["bleu_by_length"]["long"]["bleu"]).runs == 3
    assert sweep.first("FFN-none")["name"] == "FFN-none"
    assert sweep.compare("A-h1", PERPLEXITY).runs == 1


def test_a_folder_names_its_profile_and_each_variant_its_paper_row():
    sweep = Sweep(LINES, MANIFEST)
    assert sweep.profile == "cpu" == profile_name(MANIFEST)
    assert profile_name({"profile": jsonable(SWEEP_PROFILES["full"])}) == "full"
    changed = {"profile": {**MANIFEST["profile"], "beam_size": 2}}
    assert profile_name(changed) is None and Sweep(LINES, changed).paper_delta("A-h1", BLEU) is None
    # At the CPU scale, one head stands for the paper's one head, N = 4 for its N = 8.
    assert sweep.paper_delta("A-h1", BLEU) == pytest.approx(24.9 - 25.8)
    assert sweep.paper_delta("C-N4", PERPLEXITY) == pytest.approx(4.88 - 4.92)
    assert sweep.paper_delta("FFN-none", BLEU) is None
    for rows in COUNTERPARTS.values():
        assert set(rows.values()) <= set(PAPER)
    assert sweep.judge("FFN-none", PERPLEXITY).kind == "beyond"  # no paper row
    assert sweep.judge("C-N4", PERPLEXITY).kind == "one run"
    # Three collapsed seeds of N = 4 against the paper's N = 8 (BLEU -0.3 from 25.8): relative
    # to each base, ours is far larger, so the direction alone agrees.
    collapsed = [
        line("C-N4", "C", 15.96, 8.1),
        line("C-N4-seed1", "C", 15.7, 8.9, seed=1, replica_of="C-N4"),
        line("C-N4-seed2", "C", 16.2, 7.6, seed=2, replica_of="C-N4"),
    ]
    deep = Sweep((*LINES[:3], *collapsed), MANIFEST)
    ours = deep.compare("C-N4", BLEU).delta / deep.sample("base", BLEU).mean
    assert ours / (-0.3 / 25.8) > 5 and deep.judge("C-N4", BLEU).kind == "outsized"
    assert deep.judge("C-N4", PERPLEXITY).kind == "opposes"  # the paper's N = 8 is better


def test_the_words_and_the_table_say_what_the_comparisons_say():
    sweep = Sweep(LINES, MANIFEST)
    c = sweep.compare("FFN-none", PERPLEXITY)
    words = effect(sweep, "FFN-none", PERPLEXITY)
    assert words.startswith(f"{c.delta:+.2f} perplexity (95% interval {c.low:+.2f} to")
    assert c.p_holm is not None and c.p_words in words
    assert words.endswith(f"{c.p_words}; beyond the noise)") == c.significant
    assert (
        effect(sweep, "C-N4", BLEU)
        == f"{8.1 - statistics.fmean((25.8, 23.9, 26.8)):+.1f} BLEU (one run, not tested)"
    )
    assert effect(sweep, "E-none") == "not run yet (E-none)"
    assert (
        level(sweep.sample("base", PERPLEXITY), 2)
        == f"8.34 ± {statistics.stdev((8.33, 8.47, 8.22)):.2f}"
    )
    assert level(sweep.sample("A-h1", PERPLEXITY), 2) == "8.22 (one run)"
    between = difference(sweep, "FFN-none", "base", PERPLEXITY)
    assert between.startswith(f"{c.delta:+.2f} (95% interval {c.low:+.2f} to {c.high:+.2f}")
    assert difference(sweep, "A-h1", "base", PERPLEXITY).endswith("(too few seeds to test)")
    table = table_markdown(sweep).splitlines()
    assert len(table) == 2 + len(sweep.variants)
    assert [row.split(" | ")[0].strip("| ") for row in table[2:]] == [
        "base",
        "A-h1",
        "C-N4",
        "FFN-none",
    ]
    ffn = table[-1].split(" | ")
    assert ffn[7] == "3" and ffn[8].startswith(f"{c.delta:+.2f} ({c.p_words}): ")
    assert "| A-h1 | A-h1 | A-h1 | 5.29 | 24.9 | 8.22 | 26.0 | 1 |" in table_markdown(sweep)


def test_a_sweeps_comparisons_are_corrected_together():
    """The family: every tested comparison with the base in both measures (a single run tests
    nothing), and the comparisons between variants that a reading adds; the verdicts read the
    corrected p-value."""
    sweep = Sweep(LINES, MANIFEST)
    keys = [("FFN-none", "base", PERPLEXITY), ("FFN-none", "base", BLEU)]
    assert list(sweep.family) == keys
    raw = [compare(sweep.sample(a, m), sweep.sample(b, m)).p for a, b, m in keys]
    assert list(sweep.family.values()) == pytest.approx(holm(raw))
    c = sweep.compare("FFN-none", PERPLEXITY)
    assert c.p == raw[0] and c.p_holm == pytest.approx(min(1.0, 2 * raw[0]))
    assert sweep.compare("A-h1", PERPLEXITY).p_holm is None  # one run: not in the family
    assert sweep.compare("FFN-none", PERPLEXITY, "C-N4").p_holm is None  # not a comparison made
    wider = Sweep(LINES, MANIFEST, between=(("base", "FFN-none", PERPLEXITY),))
    assert len(wider.family) == 3
    assert wider.compare("base", PERPLEXITY, "FFN-none").p_holm == pytest.approx(3 * raw[0])
    assert "corrected" in difference(wider, "base", "FFN-none", PERPLEXITY)


def test_a_verdict_goes_with_the_corrected_p_value():
    alone = made_up(+1.6, 0.01)
    assert verdict(alone, None, PERPLEXITY).kind == "beyond"
    corrected = verdict(replace(alone, p_holm=0.2), None, PERPLEXITY)
    assert corrected.kind == "noise" and "p = 0.01, corrected = 0.2" in corrected.text
    assert "p < 0.001, corrected = 0.002" in replace(made_up(1.0, 0.0005), p_holm=0.002).p_words


# ---------------------------------------------------------------------------------------------
# The side-by-side timing


SPEED = {
    "results": {
        "by_length": [
            {"length": 8, "seconds": {"base": [1.0, 2.0], "RNN-lstm": [1.5, 2.0]}},
            {"length": 64, "seconds": {"base": [1.0, 1.0], "RNN-lstm": [4.0, 3.0]}},
        ],
        "sweep_batches": {
            "batches": 4,
            "seconds": {"base": [2.0, 4.0, 3.0], "RNN-lstm": [8.0, 9.0, 10.0]},
        },
    }
}


def test_throughput_ratios_are_paired_round_by_round():
    """Equal tokens for both models in a round: throughput's ratio is the inverse of time's."""
    assert throughput_ratios(SPEED) == {8: [1.5, 1.0], 64: [4.0, 3.0]}
    assert seconds_per_update(SPEED) == {"base": 0.75, "RNN-lstm": 2.25}


@pytest.mark.parametrize("target", [40.0, 31.18, 20.0, 10.03, 9.0, 8.33, 8.0])
def test_updates_to_reach_a_perplexity_interpolate_between_validations(target):
    steps, ppl = [225, 450, 675, 900], [31.18, 13.27, 10.03, 8.33]
    reached = updates_to_reach(steps, ppl, target)
    if target < ppl[-1]:
        assert reached is None
    elif target >= ppl[0]:
        assert reached == 225
    else:  # numpy's interpolation on the curve read backwards (perplexity rising)
        assert reached == pytest.approx(np.interp(target, ppl[::-1], steps[::-1]))
