"""Every statistic of the report against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from evalpipe.report.stats import (
    MIN_PAIRS,
    at_least_k,
    bootstrap_mean_interval,
    mcnemar_test,
    pass_at_k,
    pass_hat_k,
    repetition_stats,
    sample_std,
    wilcoxon_test,
    wilson_interval,
)


def test_pass_at_k_matches_the_unbiased_estimator_by_hand() -> None:
    """pass@k = 1 - C(n-c,k)/C(n,k): n=5, c=2: k=1 0.4, k=2 1-3/10=0.7, k=3 1-1/10=0.9, k=4 1."""
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)
    assert pass_at_k(5, 2, 4) == 1.0  # fewer than 4 failures: any 4 include a pass
    assert pass_at_k(3, 0, 3) == 0.0
    assert pass_at_k(3, 3, 1) == 1.0


def test_pass_hat_k_is_all_k_pass_by_hand() -> None:
    """pass^k = C(c,k)/C(n,k): n=5, c=3: k=1 0.6, k=2 3/10, k=3 1/10, k=4 0."""
    assert pass_hat_k(5, 3, 1) == pytest.approx(0.6)
    assert pass_hat_k(5, 3, 2) == pytest.approx(0.3)
    assert pass_hat_k(5, 3, 3) == pytest.approx(0.1)
    assert pass_hat_k(5, 3, 4) == 0.0
    assert pass_hat_k(4, 4, 4) == 1.0


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_pass_at_k_refuses_impossible_counts(n: int, c: int, k: int) -> None:
    """n >= 1, 0 <= c <= n and 1 <= k <= n, else a ValueError naming the bad number."""
    with pytest.raises(ValueError, match="must be"):
        pass_at_k(n, c, k)
    with pytest.raises(ValueError, match="must be"):
        pass_hat_k(n, c, k)


def test_at_least_k() -> None:
    """at_least_k: c >= k."""
    assert at_least_k(2, 2) is True
    assert at_least_k(1, 2) is False
    assert at_least_k(0, 0) is True


def test_sample_std_uses_n_minus_1() -> None:
    """[2, 4, 4, 4, 5, 5, 7, 9]: mean 5, squares sum 32, 32/7 -> sqrt 2.138; one value: None."""
    assert sample_std([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(math.sqrt(32 / 7))
    assert sample_std([3.0]) is None


def test_repetition_stats_counts_verdicts_and_leaves_errors_out() -> None:
    """Statuses pass, fail, pass, error, not_applicable with scores 1, 0, 1, None, 0.5: n=3, c=2,
    one errored, one not applicable; mean of 1,0,1,0.5 = 0.625, std sqrt(0.6875/3); flaky;
    pass@2 = 1 - C(1,2)/C(3,2) = 1; pass^2 = C(2,2)/C(3,2) = 1/3."""
    stats = repetition_stats(
        ["pass", "fail", "pass", "error", "not_applicable"], [1.0, 0.0, 1.0, None, 0.5]
    )
    assert (stats.n, stats.c, stats.errored, stats.not_applicable) == (3, 2, 1, 1)
    assert stats.mean == pytest.approx(0.625)
    assert stats.std == pytest.approx(math.sqrt(0.6875 / 3))
    assert stats.scores == 4
    assert stats.flaky is True
    assert stats.pass_at(2) == 1.0
    assert stats.pass_hat(2) == pytest.approx(1 / 3)
    assert stats.pass_at(4) is None  # only 3 verdicts
    assert stats.at_least(2) is True
    steady = repetition_stats(["fail", "fail", None])
    assert (steady.n, steady.c, steady.errored, steady.flaky) == (2, 0, 1, False)


def test_wilson_interval_by_hand() -> None:
    """8 of 10: centre (0.8 + z²/20)/(1 + z²/10), half-width z/(1+z²/10)·sqrt(0.016 + z²/400),
    z = 1.959964: [0.4902, 0.9433]; 0 of 5: [0, 0.4345]; n = 0: None."""
    z = 1.959963984540054
    centre = (0.8 + z * z / 20) / (1 + z * z / 10)
    half = z / (1 + z * z / 10) * math.sqrt(0.8 * 0.2 / 10 + z * z / 400)
    ci = wilson_interval(8, 10)
    assert ci is not None
    assert (ci.estimate, ci.n, ci.method) == (0.8, 10, "wilson")
    assert ci.low == pytest.approx(centre - half, abs=1e-9)
    assert ci.high == pytest.approx(centre + half, abs=1e-9)
    assert ci.low == pytest.approx(0.4902, abs=1e-4)
    assert ci.high == pytest.approx(0.9433, abs=1e-4)
    zero = wilson_interval(0, 5)
    assert zero is not None
    assert zero.low == 0.0
    assert zero.high == pytest.approx(z * z / 5 / (1 + z * z / 5), abs=1e-9)  # 0.4345
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(6, 5)


@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95, 0.99])
def test_wilson_interval_equals_scipy_to_1e_12(confidence: float) -> None:
    """The Wilson interval computed without scipy equals scipy.stats.binomtest(...).proportion_ci
    (method="wilson") to 1e-12 for every count of n = 1..40 and n = 997, 10000."""
    for n in [*range(1, 41), 997, 10_000]:
        for successes in sorted({*range(0, min(n, 40) + 1), n // 3, n - 1, n}):
            ci = wilson_interval(successes, n, confidence)
            ref = scipy_stats.binomtest(successes, n).proportion_ci(
                confidence_level=confidence, method="wilson"
            )
            assert ci is not None
            assert abs(ci.low - ref.low) <= 1e-12, (successes, n, ci.low, ref.low)
            assert abs(ci.high - ref.high) <= 1e-12, (successes, n, ci.high, ref.high)


def test_pass_at_k_and_pass_hat_k_equal_scipy_comb_to_1e_12() -> None:
    """pass@k and pass^k equal 1 - C(n-c,k)/C(n,k) and C(c,k)/C(n,k) from scipy.special.comb
    (exact) to 1e-12 for every n <= 30, c, k."""
    from scipy.special import comb

    for n in range(1, 31):
        for c in range(n + 1):
            for k in range(1, n + 1):
                total = comb(n, k, exact=True)
                assert abs(pass_at_k(n, c, k) - (1 - comb(n - c, k, exact=True) / total)) <= 1e-12
                assert abs(pass_hat_k(n, c, k) - comb(c, k, exact=True) / total) <= 1e-12


def test_bootstrap_interval_of_a_small_sample_by_hand() -> None:
    """[0, 0, 0, 1]: a resample's mean is Binomial(4, 1/4)/4; P(mean = 0) = 0.316 > 2.5% and
    P(mean >= 0.75) = 0.0508 > 2.5% > P(mean = 1) = 0.0039, so the 95% interval is [0, 0.75]."""
    ci = bootstrap_mean_interval([0.0, 0.0, 0.0, 1.0])
    assert ci is not None
    assert (ci.estimate, ci.low, ci.high, ci.n, ci.method) == (0.25, 0.0, 0.75, 4, "bootstrap")


def test_bootstrap_is_seeded_and_handles_constant_and_empty_input() -> None:
    """The same scores give the same interval; constant scores a zero-width one; none: None;
    NaN scores are left out of n."""
    values = [1.0, 2.0, 2.0, 3.0, 5.0, 4.0, 1.0]
    assert bootstrap_mean_interval(values) == bootstrap_mean_interval(values)
    assert bootstrap_mean_interval(values, seed=1) != bootstrap_mean_interval(values, seed=2)
    constant = bootstrap_mean_interval([0.7, 0.7, 0.7])
    assert constant is not None
    assert (constant.low, constant.high) == (0.7, 0.7)
    assert bootstrap_mean_interval([]) is None
    with_nan = bootstrap_mean_interval([1.0, float("nan"), 3.0])
    assert with_nan is not None
    assert (with_nan.n, with_nan.estimate) == (2, 2.0)


def test_bootstrap_agrees_with_scipy_for_many_distinct_and_few_distinct_values() -> None:
    """Both paths (multinomial counts for few distinct values, scipy.stats.bootstrap otherwise)
    land within sampling error of scipy's own percentile bootstrap."""
    rng = np.random.default_rng(7)
    for sample in (rng.normal(3.0, 1.0, 400), rng.integers(1, 6, 400).astype(float)):
        ours = bootstrap_mean_interval(sample)
        ref = scipy_stats.bootstrap(
            (sample,), np.mean, method="percentile", n_resamples=4000, rng=np.random.default_rng(0)
        ).confidence_interval
        assert ours is not None
        assert ours.low == pytest.approx(ref.low, abs=0.03)
        assert ours.high == pytest.approx(ref.high, abs=0.03)
        assert ours.low < ours.estimate < ours.high


def test_mcnemar_exact_by_hand() -> None:
    """1 pair pass->fail, 7 fail->pass, 2 concordant: p = 2·P(X<=1 | 8, 1/2) = 2·9/256."""
    a = [True] + [False] * 7 + [True, True]
    b = [False] + [True] * 7 + [True, True]
    test = mcnemar_test(a, b)
    assert (test.pairs, test.a_only, test.b_only) == (10, 1, 7)
    assert test.p_value == pytest.approx(18 / 256)
    assert test.describe() == "p=0.07031 (n=10)"


def test_mcnemar_without_discordant_pairs_and_below_six_pairs() -> None:
    """No discordant pair: p = 1; five pairs: "insufficient pairs", no p-value."""
    assert mcnemar_test([True] * 6, [True] * 6).p_value == 1.0
    few = mcnemar_test([True] * 5, [False] * 5)
    assert MIN_PAIRS == 6
    assert few.p_value is None
    assert few.insufficient is True
    assert few.a_only == 5
    assert few.describe() == "insufficient pairs (n=5)"
    with pytest.raises(ValueError, match="differ in length"):
        mcnemar_test([True], [])


def test_wilcoxon_exact_by_hand() -> None:
    """Differences 1..6, all positive: W- = 0, exact two-sided p = 2/2^6 = 0.03125; with one
    negative difference of rank 1 (-1, 2..6): W = 1, p = 2·2/64 = 0.0625."""
    test = wilcoxon_test([0.0] * 6, [1, 2, 3, 4, 5, 6])
    assert test.p_value == pytest.approx(0.03125)
    assert test.statistic == 0.0
    assert test.mean_difference == pytest.approx(3.5)
    mixed = wilcoxon_test([0.0] * 6, [-1, 2, 3, 4, 5, 6])
    assert mixed.statistic == 1.0
    assert mixed.p_value == pytest.approx(0.0625)


def test_wilcoxon_identical_scores_and_too_few_pairs() -> None:
    """All differences zero: p = 1; five pairs: insufficient pairs."""
    assert wilcoxon_test([1.0] * 7, [1.0] * 7).p_value == 1.0
    few = wilcoxon_test([1.0] * 5, [2.0] * 5)
    assert few.p_value is None
    assert few.describe() == "insufficient pairs (n=5)"
