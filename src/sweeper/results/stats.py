"""How sure a step-time median is: a distribution-free 95 % confidence interval, and the stop rule of
``timed_steps=auto``.

Pure Python (no torch, no numpy): the ranks use :class:`StopRule` to end the timed window, the driver uses
:func:`median_ci` to record the interval of every point (``step_time_s_ci95_low`` / ``_high``).

The interval is the classic order-statistic (binomial) interval for the median: with ``n`` independent samples of
a continuous distribution, the number of samples below the true median is Binomial(n, 1/2), so for 1-based order
statistics ``x_(1) <= ... <= x_(n)``::

    P(x_(j) <= median <= x_(n+1-j)) = 1 - 2 P(Binomial(n, 1/2) < j)

:func:`median_ci_ranks` takes the largest ``j`` with ``P(Binomial(n, 1/2) < j) <= 0.025``: the narrowest such
interval whose coverage is at least 95 %. It assumes nothing about the shape of the distribution (step times are
skewed: a few slow steps), only that the steps are independent draws. For ``n < 6`` no order-statistic interval
reaches 95 % (``P(all n below the median) = 2**-n > 0.025``); then the interval is ``[min, max]`` and its real
coverage (``1 - 2**(1-n)``, below 0.95) says so (:attr:`MedianCI.coverage`, :attr:`MedianCI.exact`).

Sources: W. J. Conover, *Practical Nonparametric Statistics*, 3rd ed., Wiley 1999, section 3.2 (confidence interval
for a quantile); G. J. Hahn and W. Q. Meeker, *Statistical Intervals*, Wiley 1991, section 5.2 (distribution-free
confidence intervals for a percentile), which tabulates the same ranks (n=20: x_(6), x_(15)).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sweeper.config.spec import PointSpec

#: Two-sided confidence level of the interval of the median.
CONFIDENCE = 0.95
#: Fewest samples for which an order-statistic interval reaches :data:`CONFIDENCE` (``2**-6 <= 0.025``).
MIN_EXACT_N = 6


def binom_half_cdf(k: int, n: int) -> float:
    """``P(Binomial(n, 1/2) <= k)``, exactly (``math.comb``); 0 for ``k < 0``, 1 for ``k >= n``."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def median_ci_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """The 1-based ranks ``(j, n + 1 - j)`` of the order statistics that bound the median with at least
    ``confidence`` (two-sided): the largest ``j`` with ``P(Binomial(n, 1/2) < j) <= (1 - confidence) / 2``.

    Examples (95 %): n=8 -> (1, 8); n=20 -> (6, 15); n=50 -> (18, 33).

    Returns:
        The ranks, or None when no order-statistic interval reaches ``confidence`` (n < 6 at 95 %).
    """
    alpha = (1 - confidence) / 2
    j = 0
    while j + 1 <= (n + 1) // 2 and binom_half_cdf(j, n) <= alpha + 1e-12:  # P(X < j+1) = P(X <= j)
        j += 1
    return (j, n + 1 - j) if j >= 1 else None


@dataclass(frozen=True)
class MedianCI:
    """The median of some samples and its distribution-free confidence interval (same unit as the samples).

    Attributes:
        median: the sample median (``statistics.median``).
        low, high: the interval's bounds (order statistics, see the module docstring).
        n: number of samples.
        coverage: the interval's real coverage probability, ``1 - 2 P(Binomial(n, 1/2) < j)``: at least 0.95 when
            :attr:`exact`, below it otherwise (``[min, max]`` of fewer than 6 samples).
        exact: True when the interval reaches 95 % (n >= 6); False: ``[min, max]``, flagged.
    """

    median: float
    low: float
    high: float
    n: int
    coverage: float
    exact: bool

    @property
    def half_width_rel(self) -> float:
        """Half the interval's width over the median (fraction; ``inf`` for a zero median)."""
        return (self.high - self.low) / 2 / self.median if self.median > 0 else math.inf

    def within(self, rel: float) -> bool:
        """Both bounds within ``±rel`` (fraction) of the median: ``median (1 - rel) <= low`` and
        ``high <= median (1 + rel)``."""
        return self.low >= self.median * (1 - rel) and self.high <= self.median * (1 + rel)


def median_ci(samples: list[float], confidence: float = CONFIDENCE) -> MedianCI:
    """The median of ``samples`` and its order-statistic confidence interval (see the module docstring).

    Raises:
        ValueError: ``samples`` is empty.
    """
    if not samples:
        raise ValueError("median_ci needs at least one sample")
    xs = sorted(samples)
    n = len(xs)
    ranks = median_ci_ranks(n, confidence)
    if ranks is None:
        return MedianCI(statistics.median(xs), xs[0], xs[-1], n, 1 - 2 * binom_half_cdf(0, n), False)
    j, k = ranks
    return MedianCI(statistics.median(xs), xs[j - 1], xs[k - 1], n, 1 - 2 * binom_half_cdf(j - 1, n), True)


@dataclass(frozen=True)
class StopRule:
    """When ``timed_steps=auto`` ends the timed window (``timing.*`` keys, :class:`sweeper.config.schema.TimingConfig`).

    After each timed step, with the ``n`` step times so far (each the slowest rank's): stop with ``"cap"`` at
    ``n >= max_steps``; otherwise stop with ``"ci"`` when ``n >= min_steps``, ``n >= 6`` (a real 95 % interval) and
    both bounds of the 95 % interval of the median lie within ``±ci_rel`` of the median; otherwise go on.

    Attributes:
        ci_rel: the allowed deviation of each bound from the median (fraction, e.g. 0.02 = ±2 %).
        min_steps, max_steps: fewest and most timed steps.
    """

    ci_rel: float = 0.02
    min_steps: int = 8
    max_steps: int = 64

    def decide(self, times_s: list[float]) -> str | None:
        """``"cap"``, ``"ci"`` or None (go on) for the timed step times so far (seconds, slowest rank per step)."""
        n = len(times_s)
        if n >= self.max_steps:
            return "cap"
        if n < max(self.min_steps, MIN_EXACT_N):
            return None
        return "ci" if median_ci(times_s).within(self.ci_rel) else None


def stop_rule(spec: PointSpec) -> StopRule | None:
    """The :class:`StopRule` of ``spec`` with ``timed_steps=auto`` (``timing.*``; the schema's defaults for a key not
    given, :class:`sweeper.config.schema.TimingConfig`), or None for a fixed ``timed_steps`` and for a screen of the
    frontier search (its window is fixed)."""
    if not spec.timed_auto or spec.screening:  # a screen's window is fixed (search.screen_timed_steps)
        return None
    return StopRule(float(spec.timing.ci_rel), int(spec.timing.min_timed_steps), int(spec.timed_steps))
