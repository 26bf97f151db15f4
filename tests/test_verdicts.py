"""Reading a Table 3 sweep (transformer_lib.book.verdicts): the paired t-test against the statistic
on the differences within each seed and the t distribution written out here, its pairing by seed,
its false-positive rate on simulated seeds; equivalence against Schuirmann's two one-sided tests;
Holm's correction against its definition; the verdicts on made-up comparisons; and the reading of
lines grouped by variant and by training data, of the paper's rows and of the side-by-side timing.
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
    effect,
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
# The paired t-test against the formulas


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
        ((1.0, 2.0), (1.5, 1.7)),
        ((5.0, 5.1, 5.3, 4.9, 5.2), (5.4, 5.6, 5.2, 5.1, 5.5)),
    ],
)
def test_the_paired_test_is_students_t_on_the_differences_within_each_seed(a, b):
    """d_i = a_i - b_i; t = mean(d) / (sd(d) / sqrt(n)) on n - 1 degrees of freedom, the
    two-sided p-value and the 95% interval from the t distribution integrated here."""
    d = [x - y for x, y in zip(a, b, strict=True)]
    n, mean = len(d), statistics.fmean(d)
    se = statistics.stdev(d) / math.sqrt(n)
    p = 2 * (1 - t_cdf(abs(mean / se), n - 1))
    half = t_quantile(1 - ALPHA / 2, n - 1) * se
    c = compare(Sample(a), Sample(b))
    assert c.delta == pytest.approx(mean, rel=1e-12) and c.pairs == n
    assert c.p == pytest.approx(p, rel=1e-6, abs=1e-9)
    assert (c.low, c.high) == pytest.approx((mean - half, mean + half), rel=1e-6)
    assert c.significant == (p < ALPHA) and c.tested
    assert c.base_band == pytest.approx(2 * statistics.stdev(b))
    # The interval excludes zero exactly when the test rejects.
    assert (c.low > 0 or c.high < 0) == c.significant


def test_pairs_are_matched_by_seed_not_by_position():
    base = Sample((8.33, 8.47, 8.22), seeds=(0, 1, 2))
    shuffled = Sample((9.1, 8.9, 9.3), seeds=(2, 0, 1))  # seed 2 first
    in_order = Sample((8.9, 9.3, 9.1))  # the same runs listed by seed
    assert compare(shuffled, base).p == compare(in_order, base).p
    assert compare(shuffled, base).delta == pytest.approx(statistics.fmean((0.57, 0.83, 0.88)))
    fewer = compare(Sample((9.0, 9.4), seeds=(0, 1)), base)  # a sweep cut short: two in common
    assert fewer.pairs == 2 and fewer.delta == pytest.approx(((9.0 - 8.33) + (9.4 - 8.47)) / 2)
    apart = compare(Sample((9.0, 9.4), seeds=(5, 6)), base)
    assert not apart.tested and verdict(apart, None, PERPLEXITY).kind == "unknown"
    with pytest.raises(ValueError, match="one value per seed"):
        compare(Sample((9.0, 9.4), seeds=(1, 1)), base)


def test_with_one_run_on_either_side_nothing_is_tested():
    one = compare(Sample((9.9,)), Sample((8.3, 8.4, 8.2)))
    assert not one.tested and not one.significant and math.isnan(one.low)
    assert one.delta == pytest.approx(9.9 - 8.3)
    base_alone = compare(Sample((9.9, 9.8)), Sample((8.3,)))
    assert not base_alone.tested and math.isnan(base_alone.base_band)
    assert Sample(()).runs == 0 and math.isnan(Sample(()).mean)


def seeds_sharing_their_luck(rng, shift: float, seeds: int = 3) -> tuple[Sample, Sample]:
    """Both sides draw each seed's luck (standard deviation 0.3, which a seed's batches and weights
    give both runs of a pair) plus their own noise (0.02); the variant is ``shift`` away."""
    luck = [rng.gauss(0.0, 0.3) for _ in range(seeds)]
    base = tuple(8.3 + x + rng.gauss(0.0, 0.02) for x in luck)
    return Sample(tuple(shift + x + rng.gauss(0.0, 0.02) for x in base)), Sample(base)


def test_the_false_positive_rate_is_the_level_and_a_shared_luck_is_taken_out():
    """No difference: about 5% of tests reject (4,000 simulated pairs of three seeds, a fixed
    seed). A shift that the seeds' shared luck hides from Welch's unpaired test is found."""
    from scipy import stats

    rng = random.Random(0)
    draws = 4000
    rejected = sum(compare(*seeds_sharing_their_luck(rng, 0.0)).significant for _ in range(draws))
    spread = 4 * math.sqrt(ALPHA * (1 - ALPHA) / draws)  # four binomial standard deviations
    assert ALPHA - spread < rejected / draws < ALPHA + spread
    found = unpaired = 0
    for _ in range(200):
        variant, base = seeds_sharing_their_luck(rng, 0.4)
        found += compare(variant, base).significant
        unpaired += stats.ttest_ind(variant.values, base.values, equal_var=False).pvalue < ALPHA
    assert found == 200 and unpaired < 100


# ---------------------------------------------------------------------------------------------
# Equivalence: "no difference" only within the margin


def one_sided_p_values(a, b, margin: float) -> tuple[float, float]:
    """Schuirmann's two one-sided tests on the paired differences, from the t distribution
    integrated here: H0 d <= -margin against d > -margin, and H0 d >= margin against d < margin."""
    d = [x - y for x, y in zip(a, b, strict=True)]
    n, mean = len(d), statistics.fmean(d)
    se = statistics.stdev(d) / math.sqrt(n)
    return 1 - t_cdf((mean + margin) / se, n - 1), t_cdf((mean - margin) / se, n - 1)


@pytest.mark.parametrize(
    "a, margin",
    [
        ((8.35, 8.46, 8.24), 0.083),  # within 0.02 of the base in every seed
        ((8.35, 8.46, 8.24), 0.03),  # the same, against a margin too narrow for its interval
        ((8.2, 8.5, 8.4), 0.083),  # too spread
        ((8.43, 8.58, 8.31), 0.083),  # 0.1 above the base, give or take 0.01: outside the margin
        ((8.36, 8.47, 8.25), 0.083),  # 0.02, 0.0, 0.03 above the base: just inside
    ],
)
def test_equivalent_is_both_one_sided_tests_passing_at_half_the_level(a, margin):
    """The 95% interval within ± margin exactly when each one-sided test rejects at 2.5%."""
    b = (8.33, 8.47, 8.22)
    c = compare(Sample(a), Sample(b), margin)
    assert c.equivalent == (max(one_sided_p_values(a, b, margin)) < ALPHA / 2)
    assert not compare(Sample(a), Sample(b)).equivalent  # no margin stated: never a tie


def test_the_margins_are_a_share_of_the_base_in_perplexity_and_points_in_bleu():
    sweep = Sweep(LINES, MANIFEST)
    base_ppl = statistics.fmean((8.33, 8.47, 8.22))
    assert sweep.compare("FFN-none", PERPLEXITY).margin == pytest.approx(0.01 * base_ppl)
    assert sweep.compare("FFN-none", BLEU).margin == BLEU.margin == 1.0
    # Below the smallest change in perplexity that the paper reads as a loss (32 heads).
    assert PERPLEXITY.margin < PAPER["A-h32"][0] / PAPER["base"][0] - 1


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


def made_up(delta, p, runs=3, base_runs=3, band=0.26, half=0.3, margin=0.08) -> Comparison:
    pairs = min(runs, base_runs)
    return Comparison(delta, delta - half, delta + half, p, runs, base_runs, band, pairs, margin)


@pytest.mark.parametrize(
    "comparison, paper, measure, kind, words",
    [
        (
            made_up(+1.6, 0.001),
            +0.37,
            PERPLEXITY,
            "agrees",
            "beyond the noise, the paper's way",
        ),
        (
            made_up(-0.5, 0.01),
            +0.37,
            PERPLEXITY,
            "opposes",
            "-0.50 perplexity (95% interval -0.80 to -0.20, p = 0.01; beyond the noise, against",
        ),
        (made_up(+1.6, 0.001), -0.01, PERPLEXITY, "new", "where the paper saw none"),
        (made_up(+1.6, 0.001), None, PERPLEXITY, "beyond", "+1.60 perplexity (95% interval"),
        (
            made_up(+1.6, 0.2),
            +0.37,
            PERPLEXITY,
            "undecided",
            "p = 0.2; undecided) (the paper: +0.37)",
        ),
        (made_up(-0.1, 0.9), 0.0, PERPLEXITY, "undecided", "undecided) (the paper: +0.00)"),
        (made_up(-0.01, 0.9, half=0.05), None, PERPLEXITY, "equivalent", "within the margin"),
        (made_up(-0.01, 0.9, margin=math.nan), None, PERPLEXITY, "undecided", "0.9; undecided)"),
        (made_up(+0.3, 0.9, half=0.5, margin=1.0), -0.1, BLEU, "equivalent", "+0.3 BLEU"),
        (made_up(-17.4, 0.001), -0.3, BLEU, "agrees", "-17.4 BLEU"),
        (made_up(-1.0, 0.001), -0.3, BLEU, "agrees", "the paper's way) (the paper: -0.3)"),
        (made_up(+2.5, 0.01), -1.2, BLEU, "opposes", "+2.5 BLEU (95% interval +2.2 to +2.8"),
        (made_up(+7.6, math.nan, runs=1), -0.04, PERPLEXITY, "one run", "+7.60 perplexity (one"),
        (made_up(+0.1, math.nan, runs=1), None, PERPLEXITY, "one run", "not tested"),
        (made_up(+0.1, math.nan, base_runs=1, band=math.nan), None, BLEU, "unknown", "two seeds"),
        (made_up(+0.1, math.nan), None, BLEU, "unknown", "fewer than two seeds in common"),
        (replace(made_up(+9.0, 0.001), same_data=False), None, BLEU, "other data", "not compared"),
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
    assert "many times its size" in verdict(collapse, -0.3, BLEU, times=58.0).text
    assert verdict(collapse, -0.3, BLEU, times=4.9).kind == "agrees"
    assert verdict(collapse, +0.3, BLEU, times=-58.0).kind == "opposes"  # no size for opposites


def test_inside_the_noise_is_never_agreement_even_where_the_paper_saw_none():
    for paper in (0.0, 0.01, -0.01, 0.5):
        assert verdict(made_up(0.05, 0.8), paper, PERPLEXITY).kind == "undecided"


def test_a_difference_beyond_the_noise_is_one_even_inside_the_margin():
    """Equivalence is asked only of what the test does not call: a small, sure difference is a
    difference (the margin bounds what "no difference" may cover, not what a test may find)."""
    small = made_up(-0.05, 0.001, half=0.02)
    assert small.equivalent and verdict(small, None, PERPLEXITY).kind == "beyond"


def test_the_paper_tie_is_half_its_last_digit():
    assert verdict(made_up(2.0, 0.001), 0.2, BLEU).kind == "agrees"  # +0.2 BLEU is a difference
    assert verdict(made_up(2.0, 0.001), 0.1, BLEU).kind == "new"  # +0.1 BLEU is none
    assert verdict(made_up(0.5, 0.001), 0.02, PERPLEXITY).kind == "agrees"
    assert verdict(made_up(0.5, 0.001), 0.01, PERPLEXITY).kind == "new"


# ---------------------------------------------------------------------------------------------
# A sweep's lines read by variant


def line(name, row, ppl, bleu, seed=0, replica_of=None, label=None, long=20.0, short=None, **extra):
    training = {"seed": seed}
    config = {"training": training} | ({} if short is None else {"train_max_len": short})
    return {
        "name": name,
        "row": row,
        "label": label or name,
        "valid_ppl": ppl,
        "bleu": bleu,
        "replica_of": replica_of,
        "parameters": 1000,
        "bleu_by_length": {"long": {"bleu": long}, "short": {"bleu": 30.0}},
        "config": config,
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
LONG_BLEU = replace(BLEU, name="BLEU of the long sentences", key="bleu_by_length.long.bleu")
# Two position encodings trained on the short pairs only, three seeds each.
SHORT = tuple(
    line(name, "E-short", ppl, 20.0, seed, replica, long=long, short=16)
    for variant, ppls, longs in (
        ("E-short-sin", (19.9, 19.3, 20.6), (16.0, 17.2, 15.1)),
        ("E-short-learned", (20.7, 20.0, 21.6), (14.5, 15.9, 13.2)),
    )
    for seed, ppl, long in zip((0, 1, 2), ppls, longs, strict=True)
    for name, replica in [(variant, None) if seed == 0 else (f"{variant}-seed{seed}", variant)]
)


def test_lines_are_grouped_by_the_variant_they_repeat():
    sweep = Sweep(LINES, MANIFEST)
    grouped = {r["name"]: name for name, runs in sweep.variants.items() for r in runs}
    expected = ["base"] * 3 + ["FFN-none", "A-h1"] + ["FFN-none"] * 2 + ["C-N4"]
    assert [grouped[r["name"]] for r in LINES] == expected
    assert list(sweep.variants) == ["base", "FFN-none", "A-h1", "C-N4"]
    assert sweep.sample("FFN-none", PERPLEXITY).values == (9.97, 10.1, 9.9)
    assert sweep.sample("base", LONG_BLEU) == Sample((20.0, 20.0, 20.0), seeds=(0, 1, 2))
    assert LONG_BLEU.of(LINES[0]) == 20.0 and PERPLEXITY.of(LINES[0]) == 8.33
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
    against = effect(sweep, "A-h1", PERPLEXITY, "FFN-none")  # another variant: no paper row
    assert against.endswith("perplexity (one run, not tested)")
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
    between = effect(wider, "base", PERPLEXITY, "FFN-none")
    assert "corrected" in between and "paper" not in between


def test_variants_trained_on_other_data_form_a_family_of_their_own():
    """Variants trained on the short pairs only are not compared with the base (their data
    differ), and the comparisons between them are corrected among themselves."""
    between = (("base", "FFN-none", BLEU), ("E-short-sin", "E-short-learned", LONG_BLEU))
    sweep = Sweep(LINES + SHORT, MANIFEST, between=between)
    assert sweep.data("base") is None and sweep.data("E-short-sin") == 16
    assert set(sweep.families) == {None, 16}
    assert all("E-short" not in a for a, _, _ in sweep.family)  # none against the base
    assert len(sweep.family) == len(Sweep(LINES, MANIFEST).family) + 1
    short = sweep.families[16]
    key = ("E-short-sin", "E-short-learned", LONG_BLEU)
    assert list(short) == [key]  # a family of one: Holm's correction is the test itself
    alone = compare(sweep.sample(*key[::2]), sweep.sample(*key[1:]))
    assert short[key] == alone.p and sweep.compare(*key[::2], key[1]).p_holm == alone.p
    across = sweep.compare("E-short-sin", PERPLEXITY)
    assert not across.same_data and not across.tested
    assert sweep.judge("E-short-sin", BLEU).kind == "other data"
    apart = statistics.fmean((19.9, 19.3, 20.6)) - statistics.fmean((8.33, 8.47, 8.22))
    assert f"| 3 | {apart:+.2f}: other data |" in table_markdown(sweep)
    mixed = Sweep(LINES + SHORT, MANIFEST, between=(("E-short-sin", "FFN-none", PERPLEXITY),))
    with pytest.raises(ValueError, match="trained on different data"):
        _ = mixed.families


def test_a_verdict_goes_with_the_corrected_p_value():
    alone = made_up(+1.6, 0.01)
    assert verdict(alone, None, PERPLEXITY).kind == "beyond"
    corrected = verdict(replace(alone, p_holm=0.2), None, PERPLEXITY)
    assert corrected.kind == "undecided" and "p = 0.01, corrected = 0.2" in corrected.text
    assert "p < 0.001, corrected = 0.002" in replace(made_up(1.0, 0.0005), p_holm=0.002).p_words
    # Just below the level, two digits would print the level itself: three are kept.
    assert replace(made_up(1.0, 0.01), p_holm=0.0499).p_words.endswith("corrected = 0.0499")
    assert made_up(1.0, 0.051).p_words == "p = 0.051"


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
