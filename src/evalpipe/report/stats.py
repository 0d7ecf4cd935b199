"""Statistics over repetitions and runs: pure functions on counts and score lists.

Per item (its repetitions): pass@k, pass^k, at_least_k, mean and sample standard deviation of the
scores, flakiness. Per metric: Wilson intervals for pass rates and a seeded percentile bootstrap
for mean scores. Paired tests for comparing two runs: exact McNemar on pass/fail and the Wilcoxon
signed-rank test on scores, both from ``scipy.stats``. docs/report.md shows every formula.

``scipy.stats`` (1.2 s to import) loads only where it is needed: the paired tests, and the
bootstrap of scores with many distinct values. A run's report usually needs neither: the Wilson
interval is computed here, with scipy's formula.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "MIN_PAIRS",
    "Interval",
    "PairedTest",
    "RepetitionStats",
    "at_least_k",
    "bootstrap_mean_interval",
    "mcnemar_counts",
    "mcnemar_test",
    "pass_at_k",
    "pass_hat_k",
    "repetition_stats",
    "sample_std",
    "wilcoxon_differences",
    "wilcoxon_test",
    "wilson_interval",
]

MIN_PAIRS = 6
"""Below this many pairs a paired test reports "insufficient pairs" instead of a p-value."""
BOOTSTRAP_SEED = 20240601
"""The fixed seed of the score bootstrap: the same scores always give the same interval."""
BOOTSTRAP_RESAMPLES = 2000
"""Bootstrap resamples per interval."""
_FEW_DISTINCT = 64


def _check_k(n: int, c: int, k: int) -> None:
    if n < 1:
        raise ValueError(f"n must be >= 1 (repetitions with a verdict), got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"c (passes) must be between 0 and n={n}, got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and n={n}, got {k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k: the chance that at least one of k repetitions drawn
    without replacement from n (c of which passed) passes, ``1 - C(n-c, k) / C(n, k)``.

    Raises:
        ValueError: unless ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    _check_k(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k: the chance that all of k repetitions drawn without replacement pass,
    ``C(c, k) / C(n, k)``.

    Raises:
        ValueError: unless ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    _check_k(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def at_least_k(c: int, k: int) -> bool:
    """At least k repetitions passed."""
    return c >= k


def sample_std(values: Sequence[float]) -> float | None:
    """The sample standard deviation (n - 1 in the denominator); None below two values."""
    if len(values) < 2:
        return None
    return float(np.std(np.asarray(values, dtype=float), ddof=1))


@dataclass(frozen=True, slots=True)
class RepetitionStats:
    """One item's outcome over its repetitions (one metric, one agent)."""

    n: int
    """Repetitions with a verdict (pass or fail)."""
    c: int
    """Repetitions that passed."""
    errored: int
    """Repetitions whose metric errored (left out of n)."""
    not_applicable: int
    """Repetitions with neither a verdict nor an error (left out of n)."""
    mean: float | None
    """Mean of the non-null scores."""
    std: float | None
    """Sample standard deviation of the non-null scores (None below two)."""
    scores: int
    """How many non-null scores the mean and std are over."""

    @property
    def flaky(self) -> bool:
        """The repetitions disagree: some passed and some failed."""
        return 0 < self.c < self.n

    def pass_at(self, k: int) -> float | None:
        """pass@k, or None when fewer than k repetitions have a verdict."""
        return pass_at_k(self.n, self.c, k) if 1 <= k <= self.n else None

    def pass_hat(self, k: int) -> float | None:
        """pass^k, or None when fewer than k repetitions have a verdict."""
        return pass_hat_k(self.n, self.c, k) if 1 <= k <= self.n else None

    def at_least(self, k: int) -> bool:
        """At least k repetitions passed."""
        return at_least_k(self.c, k)


def repetition_stats(
    statuses: Sequence[str | None], scores: Sequence[float | None] = ()
) -> RepetitionStats:
    """Reduce one item's repetitions: statuses are "pass", "fail", "error" or "not_applicable"
    (None counts as errored: the item could not be evaluated); scores may hold None."""
    passed = sum(s == "pass" for s in statuses)
    failed = sum(s == "fail" for s in statuses)
    na = sum(s == "not_applicable" for s in statuses)
    values = [float(v) for v in scores if v is not None and not math.isnan(v)]
    return RepetitionStats(
        n=passed + failed,
        c=passed,
        errored=len(statuses) - passed - failed - na,
        not_applicable=na,
        mean=float(np.mean(values)) if values else None,
        std=sample_std(values),
        scores=len(values),
    )


@dataclass(frozen=True, slots=True)
class Interval:
    """A confidence interval around an estimate."""

    estimate: float
    low: float
    high: float
    n: int
    """Observations the interval is over."""
    method: str
    """"wilson" or "bootstrap"."""
    confidence: float = 0.95


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval | None:
    """The Wilson score interval of a pass rate, as ``scipy.stats.binomtest(...).proportion_ci``
    (``method="wilson"``, Newcombe 1998) computes it; None when n is 0.

    Raises:
        ValueError: for negative counts or successes above n.
    """
    if n < 0 or not 0 <= successes <= max(n, 0):
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return None
    p = successes / n
    z = NormalDist().inv_cdf(0.5 + 0.5 * confidence)
    denom = 2 * (n + z * z)
    centre = (2 * n * p + z * z) / denom
    delta = z / denom * math.sqrt(4 * n * p * (1 - p) + z * z)
    low = 0.0 if successes == 0 else centre - delta
    high = 1.0 if successes == n else centre + delta
    return Interval(p, float(low), float(high), n, "wilson", confidence)


def bootstrap_mean_interval(
    values: Sequence[float] | np.ndarray,
    confidence: float = 0.95,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Interval | None:
    """A seeded percentile bootstrap interval of the mean; None for no values.

    With few distinct values (pass/fail 0/1 scores, a judge's 1-5) the resample means are drawn
    from multinomial counts of the distinct values: a resample's mean depends only on how many
    times each value is drawn, and those counts are multinomial with the observed frequencies, so
    this is the same bootstrap at a cost that does not grow with n. Otherwise
    ``scipy.stats.bootstrap`` (percentile method) resamples the values in memory-bounded batches.
    """
    arr = np.asarray(values, dtype=float)
    arr = arr[~np.isnan(arr)]
    n = int(arr.size)
    if n == 0:
        return None
    mean = float(arr.mean())
    distinct, counts = np.unique(arr, return_counts=True)
    if distinct.size == 1:  # every resample is the value itself
        value = float(distinct[0])
        return Interval(value, value, value, n, "bootstrap", confidence)
    rng = np.random.default_rng(seed)
    alpha = (1.0 - confidence) / 2.0
    if distinct.size > _FEW_DISTINCT:
        from scipy import stats as _sp  # type: ignore[import-untyped, unused-ignore]  # lazy: scipy.stats, 1.2 s, only for many distinct scores

        ci = _sp.bootstrap(
            (arr,),
            np.mean,
            n_resamples=resamples,
            confidence_level=confidence,
            method="percentile",
            batch=max(1, 4_000_000 // n),  # about 32 MB of resampled values at a time
            rng=rng,
        ).confidence_interval
        return Interval(mean, float(ci.low), float(ci.high), n, "bootstrap", confidence)
    drawn = rng.multinomial(n, counts / n, size=resamples)
    means = drawn @ distinct / n
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return Interval(mean, float(low), float(high), n, "bootstrap", confidence)


@dataclass(frozen=True, slots=True)
class PairedTest:
    """A paired test of run A against run B on one metric."""

    test: Literal["mcnemar", "wilcoxon"]
    pairs: int
    """Pairs the test is over (both runs have a verdict, or both a score)."""
    p_value: float | None
    """None when there are fewer than MIN_PAIRS pairs."""
    statistic: float | None
    """McNemar: the discordant count A-pass/B-fail; Wilcoxon: scipy's statistic."""
    a_only: int = 0
    """McNemar: pairs that passed in A and failed in B (regressions)."""
    b_only: int = 0
    """McNemar: pairs that failed in A and passed in B (improvements)."""
    mean_difference: float | None = None
    """Wilcoxon: the mean of B - A."""

    @property
    def insufficient(self) -> bool:
        """Too few pairs for a p-value."""
        return self.pairs < MIN_PAIRS

    def describe(self) -> str:
        """The p-value as text, or "insufficient pairs (n=...)"."""
        if self.p_value is None:
            return f"insufficient pairs (n={self.pairs})"
        return f"p={self.p_value:.4g} (n={self.pairs})"


def mcnemar_test(a_passed: Sequence[bool], b_passed: Sequence[bool]) -> PairedTest:
    """Exact McNemar test on paired verdicts: a two-sided binomial test (p = 1/2) of the
    discordant pairs (``scipy.stats.binomtest``); p = 1 when no pair is discordant.

    Raises:
        ValueError: when the two sequences differ in length.
    """
    if len(a_passed) != len(b_passed):
        raise ValueError(f"paired verdicts differ in length: {len(a_passed)} != {len(b_passed)}")
    a_only = sum(1 for a, b in zip(a_passed, b_passed, strict=True) if a and not b)
    b_only = sum(1 for a, b in zip(a_passed, b_passed, strict=True) if b and not a)
    return mcnemar_counts(len(a_passed), a_only, b_only)


def mcnemar_counts(pairs: int, a_only: int, b_only: int) -> PairedTest:
    """``mcnemar_test`` from its counts: the pairs, those only A passed, those only B passed."""
    if pairs < MIN_PAIRS:
        return PairedTest("mcnemar", pairs, None, None, a_only, b_only)
    discordant = a_only + b_only
    if discordant == 0:
        return PairedTest("mcnemar", pairs, 1.0, float(a_only), a_only, b_only)
    from scipy import stats as _sp  # type: ignore[import-untyped, unused-ignore]  # lazy: scipy.stats, 1.2 s, only to compare runs

    p = float(_sp.binomtest(a_only, discordant, 0.5).pvalue)
    return PairedTest("mcnemar", pairs, min(p, 1.0), float(a_only), a_only, b_only)


def wilcoxon_test(a_scores: Sequence[float], b_scores: Sequence[float]) -> PairedTest:
    """Wilcoxon signed-rank test on paired scores (``scipy.stats.wilcoxon``, two-sided, zero
    differences dropped); p = 1 when every difference is zero.

    Raises:
        ValueError: when the two sequences differ in length.
    """
    if len(a_scores) != len(b_scores):
        raise ValueError(f"paired scores differ in length: {len(a_scores)} != {len(b_scores)}")
    return wilcoxon_differences(
        np.asarray(b_scores, dtype=float) - np.asarray(a_scores, dtype=float)
    )


def wilcoxon_differences(diff: Sequence[float]) -> PairedTest:
    """``wilcoxon_test`` from the paired differences (B - A), in any order."""
    values = np.asarray(diff, dtype=float)
    pairs = len(values)
    mean_diff = float(values.mean()) if pairs else None
    if pairs < MIN_PAIRS:
        return PairedTest("wilcoxon", pairs, None, None, mean_difference=mean_diff)
    if not np.any(values):
        return PairedTest("wilcoxon", pairs, 1.0, 0.0, mean_difference=mean_diff)
    from scipy import stats as _sp  # type: ignore[import-untyped, unused-ignore]  # lazy: scipy.stats, 1.2 s, only to compare runs

    result = _sp.wilcoxon(values, zero_method="wilcox", alternative="two-sided")
    return PairedTest(
        "wilcoxon",
        pairs,
        float(result.pvalue),
        float(result.statistic),
        mean_difference=mean_diff,
    )
