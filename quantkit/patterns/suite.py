"""Run the risky-pattern suite on every installed runtime against ONNX's reference evaluator.

For each pattern (:data:`quantkit.patterns.models.PATTERNS`) and each runtime variant
(:func:`runtime_variants`: every installed runtime at its deployment settings, plus ONNX Runtime with
optimizations disabled, the QDQ simulation), the pattern's output is compared with
``onnx.reference.ReferenceEvaluator`` (ONNX's executable specification: QuantizeLinear rounds half to even and
saturates), and its codes with the QDQ simulation's (what a bundle's golden data, ``quantkit compare`` and
localisation hold). A pattern is one node on its own, so the runtime is judged by the rule for a node on its own
(:mod:`quantkit.runtimes.divergence`): it **disagrees** when ``max_steps = max|y_runtime - y_reference| /
output_scale`` exceeds ``tolerance_steps`` (default 1: fused integer kernels requantize with fixed-point multipliers
and may land one step off) or when more than ``MAX_CODE_SHARE`` of its output codes differ from the simulation's
(``code_share``: a kernel that rounds values on or near half a step differently, such as OpenVINO's 2x linear
Resize); it **agrees** otherwise, and is **refused** when it cannot load or run the model. The codes are compared with
the simulation, not with the reference evaluator, because where interpolation lands within float rounding of half a
step the two float implementations may round either way (ONNX Runtime's simulation and the reference evaluator
differ on 1.3-2.2% of a 2x linear Resize's codes at scale 0.03; no runtime is wrong there), while a runtime that parts
from the simulation parts from every check quantkit makes against it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ModelError
from ..runtimes import available_runtimes, make_runtime
from ..runtimes.divergence import MAX_CODE_SHARE, SLACK, code_share
from ..runtimes.precision import cpu_isa
from .models import PATTERNS, Pattern

log = logging.getLogger(__name__)

TOLERANCE_STEPS = 1.0
_SLACK = SLACK  # of a step: the reference computes in float64, runtimes in float32, so a value exactly on a rounding edge may be 1.00001 steps off
VERDICTS = ("agree", "disagree", "refused")


@dataclasses.dataclass(frozen=True)
class RuntimeVariant:
    """A runtime with the options it runs a pattern at. ``deployment``: the settings a deployed model runs at
    (what a params target name such as ``openvino`` means)."""

    runtime: str
    options: tuple[tuple[str, Any], ...]
    deployment: bool

    @property
    def label(self) -> str:
        opts = dict(self.options)
        if "graph_optimization_level" in opts:
            return f"{self.runtime}[{opts['graph_optimization_level']}]"
        return f"{self.runtime}[{opts.get('inference_precision', 'default')}]"


def runtime_variants(runtimes: Sequence[str] | None = None) -> list[RuntimeVariant]:
    """Every installed runtime at its deployment settings, ORT's QDQ simulation (level ``disable``) and OpenVINO at
    bf16 (what its CPU plugin chooses on its own on CPUs with AVX-512 BF16 or AMX; f32 elsewhere)."""
    out = []
    for name in runtimes or available_runtimes():
        if name == "onnxruntime":
            out.append(RuntimeVariant(name, (("graph_optimization_level", "all"),), True))
            out.append(RuntimeVariant(name, (("graph_optimization_level", "disable"),), False))
        elif name == "openvino":
            out.append(RuntimeVariant(name, (("inference_precision", "f32"),), True))
            out.append(RuntimeVariant(name, (("inference_precision", "bf16"),), False))  # the CPU plugin's default on AVX-512 BF16 / AMX
        else:
            out.append(RuntimeVariant(name, (), True))
    return out


@dataclasses.dataclass(frozen=True)
class PatternResult:
    """One cell of the matrix: ``verdict`` ∈ {agree, disagree, refused}; ``max_steps`` and ``mismatch`` (share of
    output elements more than ``tolerance_steps`` off the reference evaluator) and ``code_share`` (share of output
    codes that differ from the QDQ simulation's; None also where the simulation cannot run it) are None when
    refused; ``detail`` is the runtime's words."""

    pattern: str
    runtime: str
    variant: str
    deployment: bool
    version: str
    verdict: str
    max_steps: float | None
    mismatch: float | None
    detail: str = ""
    code_share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def cell(self) -> str:
        """``ok``, ``REFUSED``, ``DIFF n.n`` (worst steps off the reference) or ``DIFF n.n%`` (codes that differ
        from the simulation, where no element is beyond the tolerance)."""
        if self.verdict == "agree":
            return "ok"
        if self.verdict == "refused":
            return "REFUSED"
        if self.code_share is not None and self.mismatch == 0:  # no element beyond the tolerance: disagrees by codes
            return f"DIFF {100 * self.code_share:.1f}%"
        return f"DIFF {self.max_steps:.1f}"


@dataclasses.dataclass(frozen=True)
class PatternMatrix:
    """The suite's results on one machine: ``machine`` is :func:`quantkit.runtimes.precision.cpu_isa`;
    ``versions`` ``{runtime: version}``; ``results`` one :class:`PatternResult` per (pattern, variant);
    ``max_code_share`` the share of codes allowed to differ from the simulation (None: a matrix from before
    quantkit judged codes, by ``tolerance_steps`` only)."""

    machine: dict[str, Any]
    versions: dict[str, str]
    tolerance_steps: float
    results: tuple[PatternResult, ...]
    max_code_share: float | None = None

    def verdict(self, pattern: str, runtime: str) -> PatternResult | None:
        """The result of ``pattern`` on ``runtime`` (a name: its deployment variant; or a variant label)."""
        for r in self.results:
            if r.pattern == pattern and (r.variant == runtime or (r.runtime == runtime and r.deployment)):
                return r
        return None

    def failing(self, runtime: str) -> list[PatternResult]:
        """Patterns ``runtime`` (deployment variant, or a variant label) disagrees on or refuses."""
        return [r for r in self.results if (r.variant == runtime or (r.runtime == runtime and r.deployment)) and r.verdict != "agree"]

    @property
    def variants(self) -> list[str]:
        return list(dict.fromkeys(r.variant for r in self.results))

    def to_dict(self) -> dict[str, Any]:
        return {"machine": dict(self.machine), "versions": dict(self.versions), "tolerance_steps": self.tolerance_steps,
                "max_code_share": self.max_code_share, "results": [r.to_dict() for r in self.results]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PatternMatrix":
        known = {f.name for f in dataclasses.fields(PatternResult)}  # a newer quantkit's extra fields are left out
        share = d.get("max_code_share")
        return cls(dict(d.get("machine") or {}), dict(d.get("versions") or {}), float(d.get("tolerance_steps", TOLERANCE_STEPS)),
                   tuple(PatternResult(**{k: v for k, v in r.items() if k in known}) for r in d.get("results") or []),
                   None if share is None else float(share))

    def table(self) -> list[list[str]]:
        """Rows ``[pattern, cell per variant]``; a cell is :attr:`PatternResult.cell` (``-``: not run)."""
        cols = self.variants
        rows = []
        for p in dict.fromkeys(r.pattern for r in self.results):
            row = [p]
            for c in cols:
                r = self.verdict(p, c)
                row.append("-" if r is None else r.cell)
            rows.append(row)
        return rows

    def __repr__(self) -> str:
        bad = sum(r.verdict != "agree" for r in self.results)
        return f"PatternMatrix({len(self.results)} cells, {bad} not agreeing, {', '.join(self.variants)})"


def reference_output(model: Any, feed: dict[str, np.ndarray]) -> np.ndarray:
    """The first output of ``model`` by ``onnx.reference.ReferenceEvaluator``."""
    from onnx.reference import ReferenceEvaluator

    return np.asarray(ReferenceEvaluator(model).run(None, feed)[0])


def simulation_output(model: Any, feed: dict[str, np.ndarray]) -> np.ndarray | None:
    """The first output of ``model`` on ONNX Runtime at level ``disable`` (the QDQ simulation); None when it refuses."""
    try:
        with make_runtime("onnxruntime", model, graph_optimization_level="disable", name="simulation") as rt:
            return np.asarray(next(iter(rt.infer(feed).values())))
    except Exception as e:  # noqa: BLE001 - ORT refuses a model by its own exception types at load or run
        log.info("the QDQ simulation cannot run this pattern (%s); codes not compared", e)
        return None


def run_pattern(pattern: Pattern, variant: RuntimeVariant, tolerance_steps: float = TOLERANCE_STEPS,
                reference: np.ndarray | None = None, feed: dict[str, np.ndarray] | None = None,
                simulation: np.ndarray | None = None) -> PatternResult:
    """Build ``pattern``, run it on ``variant`` (on its seeded input, or ``feed``) and compare with the reference
    evaluator and the QDQ simulation (module docstring); ``reference`` / ``simulation`` are computed when not given."""
    case = pattern.build()
    if feed is not None:
        case = dataclasses.replace(case, feed=feed)
    ref = reference_output(case.model, case.feed) if reference is None else reference
    sim = simulation_output(case.model, case.feed) if simulation is None else simulation
    rt = make_runtime(variant.runtime, case.model, name=pattern.name, **dict(variant.options))
    rt.cache_compiled = False  # a pattern case runs once
    version = type(rt).version()
    try:
        with rt:
            y = next(iter(rt.infer(case.feed).values()))
    except (ModelError, RuntimeError) as e:  # a refusal at load (ModelError) or at run (the runtime's own errors)
        return PatternResult(pattern.name, variant.runtime, variant.label, variant.deployment, version, "refused", None, None,
                             " ".join(str(e).split())[:300])
    except Exception as e:  # noqa: BLE001 - runtimes raise their own exception types at run time
        return PatternResult(pattern.name, variant.runtime, variant.label, variant.deployment, version, "refused", None, None,
                             f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
    if y.shape != ref.shape:
        return PatternResult(pattern.name, variant.runtime, variant.label, variant.deployment, version, "disagree", float("inf"), 1.0,
                             f"shape {list(y.shape)} != reference {list(ref.shape)}", 1.0)
    steps = np.abs(y.astype(np.float64) - ref.astype(np.float64)) / case.output_scale
    worst = float(steps.max()) if steps.size else 0.0
    mismatch = float(np.mean(steps > tolerance_steps + _SLACK)) if steps.size else 0.0
    codes = code_share(y, sim, case.output_scale) if sim is not None and sim.shape == y.shape else None
    beyond = worst > tolerance_steps + _SLACK
    verdict = "disagree" if beyond or (codes is not None and codes > MAX_CODE_SHARE) else "agree"
    detail = "" if verdict == "agree" else (f"{100 * mismatch:.1f}% of outputs more than {tolerance_steps:g} step(s) off, worst {worst:.1f}" if beyond
                                            else f"{100 * codes:.1f}% of output codes differ from the QDQ simulation's (allowed "
                                                 f"{100 * MAX_CODE_SHARE:g}%), worst {worst:.1f} step(s) off the reference")
    return PatternResult(pattern.name, variant.runtime, variant.label, variant.deployment, version, verdict, worst, mismatch, detail, codes)


def pattern_matrix(runtimes: Sequence[str] | None = None, patterns: Sequence[Pattern] = PATTERNS,
                   tolerance_steps: float = TOLERANCE_STEPS) -> PatternMatrix:
    """Run every pattern on every runtime variant of this machine (a few seconds on 2 cores)."""
    variants = runtime_variants(runtimes)
    results = []
    for p in patterns:
        case = p.build()
        ref = reference_output(case.model, case.feed)
        sim = simulation_output(case.model, case.feed)
        for v in variants:
            results.append(run_pattern(p, v, tolerance_steps, ref, simulation=sim))
    versions = {v.runtime: results[i].version for i, v in enumerate(variants)} if results else {}
    return PatternMatrix(cpu_isa(), versions, tolerance_steps, tuple(results), MAX_CODE_SHARE)
