"""Distances between two distributions, from samples or from histograms on shared bins.

Every function takes a *reference* (expected, e.g. the calibration set or the FP32 model) and a
*current* (actual, e.g. a site set or an INT8 model) distribution and returns a non-negative float.
Well-kept implementations are used where they exist:

* **KS**: two-sample Kolmogorov-Smirnov statistic ``sup |F_ref - F_cur|`` (0..1) and p-value,
  :func:`scipy.stats.ks_2samp`; from histograms, the same supremum over bin edges.
* **Wasserstein-1** (earth mover's distance, in the units of the values):
  :func:`scipy.stats.wasserstein_distance`; from histograms, bin centres weighted by counts.
  :func:`normalized_wasserstein` divides it by the reference's spread (std or IQR/1.349, the
  normal-consistent IQR scale), giving an effect size in "reference standard deviations".
* **Jensen-Shannon distance** (0..1 with ``base=2``): :func:`scipy.spatial.distance.jensenshannon`,
  the square root of the JS divergence (Lin 1991, IEEE Trans. Inf. Theory 37(1)).
* **PSI** (population stability index), ``sum((a - e) * ln(a / e))`` over bins of bin fractions
  ``e`` (reference) and ``a`` (current): Siddiqi 2006, *Credit Risk Scorecards*, ch. 8; Yurdakul 2018,
  "Statistical properties of population stability index" (Western Michigan Univ.). The usual rule of
  thumb is PSI < 0.1 no significant shift, 0.1-0.25 moderate, > 0.25 significant
  (:data:`PSI_MODERATE`, :data:`PSI_SIGNIFICANT`). From samples, bins are deciles of the reference
  (Siddiqi's practice); empty bins get :data:`PSI_EPSILON` so the logarithm stays finite.

Errors: empty inputs or histograms of different lengths raise :class:`ValueError` (a caller bug,
not user input); callers that take user data check sizes first.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

PSI_MODERATE = 0.1
"""PSI rule of thumb: below this, no significant population shift (Siddiqi 2006)."""
PSI_SIGNIFICANT = 0.25
"""PSI rule of thumb: above this, a significant shift (Siddiqi 2006; Yurdakul 2018)."""
PSI_EPSILON = 1e-4
"""Floor on bin fractions in PSI so empty bins do not give ``ln(0)``."""
IQR_TO_SIGMA = 1.349
"""IQR of a normal distribution in standard deviations (``2 * Phi^-1(0.75)``)."""


def _samples(x: Any, what: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).ravel()
    a = a[np.isfinite(a)]
    if a.size == 0:
        raise ValueError(f"{what}: no finite values")
    return a


def _fractions(counts: Any, eps: float = 0.0) -> np.ndarray:
    c = np.asarray(counts, dtype=np.float64).ravel()
    total = c.sum()
    if c.size == 0 or total <= 0:
        raise ValueError("histogram is empty")
    f = c / total
    return np.maximum(f, eps) if eps > 0 else f


def _same_length(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"histograms have {a.size} and {b.size} bins; use the same bin edges")
    return a, b


# ---------------------------------------------------------------------------------------- samples


def ks(reference: Any, current: Any) -> tuple[float, float]:
    """Two-sample KS statistic (0..1) and its p-value, :func:`scipy.stats.ks_2samp` (two-sided)."""
    from scipy.stats import ks_2samp

    r = ks_2samp(_samples(reference, "reference"), _samples(current, "current"))
    return float(r.statistic), float(r.pvalue)


def wasserstein(reference: Any, current: Any) -> float:
    """Wasserstein-1 distance between two 1-D samples, in the values' units (scipy)."""
    from scipy.stats import wasserstein_distance

    return float(wasserstein_distance(_samples(reference, "reference"), _samples(current, "current")))


def spread(reference: Any, kind: str = "std", floor: float = 0.0) -> float:
    """Spread of a sample: ``std`` (ddof=1) or ``iqr`` (IQR / 1.349), never below ``floor``.

    ``floor`` guards against a constant reference (e.g. every calibration image 640 px wide), where
    any difference would otherwise be an infinite effect.
    """
    r = _samples(reference, "reference")
    if kind == "std":
        s = float(r.std(ddof=1)) if r.size > 1 else 0.0
    elif kind == "iqr":
        q1, q3 = np.percentile(r, (25, 75))
        s = float(q3 - q1) / IQR_TO_SIGMA
    else:
        raise ValueError(f"spread kind {kind!r} is not 'std' or 'iqr'")
    return max(s, floor, 1e-12)


def normalized_wasserstein(reference: Any, current: Any, *, scale: float | None = None, kind: str = "std") -> float:
    """W1 divided by the reference's spread (``scale`` if given, else :func:`spread`); unitless."""
    s = scale if scale is not None else spread(reference, kind)
    return wasserstein(reference, current) / s


def quantile_edges(reference: Any, bins: int = 10, *, min_width: float = 0.0) -> np.ndarray:
    """Bin edges at the reference's quantiles (deciles for ``bins=10``), outer edges at +-inf.

    Ties collapse duplicate edges, so a near-constant reference gets fewer bins. A constant reference
    ``v`` gets three bins: below ``v``, exactly ``v``, above ``v``. With ``min_width > 0`` (the values'
    resolution, in their units) a reference whose range is below ``min_width`` counts as constant at its
    median ``v`` and gets the bins ``< v - min_width``, ``[v - min_width, v + min_width)``, ``>= v + min_width``:
    values closer than the resolution are the same value.
    """
    r = _samples(reference, "reference")
    inner = np.unique(np.quantile(r, np.linspace(0, 1, bins + 1)[1:-1]))
    if min_width > 0 and float(r.max() - r.min()) < min_width:
        v = float(np.median(r))
        inner = np.array([v - min_width, v + min_width])
    elif r.min() == r.max():
        v = float(r[0])
        inner = np.array([v, np.nextafter(v, np.inf)])
    return np.concatenate([[-np.inf], inner, [np.inf]])


def psi(reference: Any, current: Any, *, bins: int = 10, eps: float = PSI_EPSILON) -> float:
    """PSI between two samples on the reference's quantile bins (Siddiqi 2006).

    Values equal to an edge fall in the upper bin.
    """
    r, c = _samples(reference, "reference"), _samples(current, "current")
    edges = quantile_edges(r, bins)
    er = np.histogram(r, edges)[0]
    ec = np.histogram(c, edges)[0]
    return psi_from_counts(er, ec, eps=eps)


def jensen_shannon(reference: Any, current: Any, *, bins: int = 10) -> float:
    """Jensen-Shannon distance (base 2, 0..1) of two samples on the reference's quantile bins."""
    r, c = _samples(reference, "reference"), _samples(current, "current")
    edges = quantile_edges(r, bins)
    return js_from_counts(np.histogram(r, edges)[0], np.histogram(c, edges)[0])


# ------------------------------------------------------------------------------------- histograms


def psi_from_counts(reference_counts: Any, current_counts: Any, *, eps: float = PSI_EPSILON) -> float:
    """PSI from counts on shared bins: ``sum((a - e) ln(a / e))``, fractions floored at ``eps``."""
    e, a = _same_length(reference_counts, current_counts)
    e, a = _fractions(e, eps), _fractions(a, eps)
    return float(np.sum((a - e) * np.log(a / e)))


def js_from_counts(reference_counts: Any, current_counts: Any) -> float:
    """Jensen-Shannon distance (base 2) from counts on shared bins, via scipy."""
    from scipy.spatial.distance import jensenshannon

    e, a = _same_length(reference_counts, current_counts)
    d = float(jensenshannon(_fractions(e), _fractions(a), base=2.0))
    return 0.0 if math.isnan(d) else d


def ks_from_counts(reference_counts: Any, current_counts: Any) -> float:
    """KS statistic from counts on shared bins: max absolute difference of the two CDFs (0..1).

    Exact at bin edges; a lower bound of the sample KS statistic within bins.
    """
    e, a = _same_length(reference_counts, current_counts)
    return float(np.max(np.abs(np.cumsum(_fractions(e)) - np.cumsum(_fractions(a)))))


def wasserstein_from_counts(bin_edges: Any, reference_counts: Any, current_counts: Any) -> float:
    """Wasserstein-1 from counts on shared bins, each bin's mass at its centre (scipy), value units."""
    from scipy.stats import wasserstein_distance

    e, a = _same_length(reference_counts, current_counts)
    edges = np.asarray(bin_edges, dtype=np.float64).ravel()
    if edges.size != e.size + 1:
        raise ValueError(f"{edges.size} bin edges for {e.size} bins; need bins + 1 edges")
    centres = 0.5 * (edges[:-1] + edges[1:])
    return float(wasserstein_distance(centres, centres, _fractions(e), _fractions(a)))


# ------------------------------------------------------------------------------------------ records


@dataclasses.dataclass(frozen=True)
class Distances:
    """Distances between a reference and a current distribution.

    ``psi`` (unitless, >= 0), ``ks`` (0..1), ``ks_pvalue`` (NaN from histograms), ``wasserstein``
    (value units), ``js`` (Jensen-Shannon distance, base 2, 0..1).
    """

    psi: float
    ks: float
    wasserstein: float
    js: float
    ks_pvalue: float = float("nan")

    def to_dict(self) -> dict[str, float | None]:
        """Plain dict; NaN becomes ``None`` so the result is valid JSON."""
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in dataclasses.asdict(self).items()}

    @property
    def psi_level(self) -> str:
        """``"none" | "moderate" | "significant"`` per the 0.1 / 0.25 rule of thumb (Siddiqi 2006)."""
        return "significant" if self.psi > PSI_SIGNIFICANT else "moderate" if self.psi > PSI_MODERATE else "none"

    def __repr__(self) -> str:
        return f"Distances(psi={self.psi:.3g}, ks={self.ks:.3g}, wasserstein={self.wasserstein:.3g}, js={self.js:.3g})"


def compare_samples(reference: Any, current: Any, *, bins: int = 10) -> Distances:
    """All distances between two 1-D samples (PSI and JS on the reference's quantile bins)."""
    k, p = ks(reference, current)
    return Distances(
        psi=psi(reference, current, bins=bins),
        ks=k,
        wasserstein=wasserstein(reference, current),
        js=jensen_shannon(reference, current, bins=bins),
        ks_pvalue=p,
    )


def compare_histograms(bin_edges: Sequence[float], reference_counts: Any, current_counts: Any) -> Distances:
    """All distances between two histograms on the same ``bin_edges`` (``len(counts) + 1`` edges)."""
    return Distances(
        psi=psi_from_counts(reference_counts, current_counts),
        ks=ks_from_counts(reference_counts, current_counts),
        wasserstein=wasserstein_from_counts(bin_edges, reference_counts, current_counts),
        js=js_from_counts(reference_counts, current_counts),
    )
