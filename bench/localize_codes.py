"""How many of a quantized tensor's codes a deployment runtime moves, on its own and in context, per op type.

The figures behind :data:`quantkit.runtimes.divergence.MAX_CODE_SHARE`. For each quantized tensor of an INT8 model
(the outputs of activation DequantizeLinear nodes, :func:`quantkit.runtimes.localize.quantized_tensors`) and each
deployment runtime (ONNX Runtime at level ``all``, OpenVINO f32), on one image:

* **alone**: the node on its own (:func:`quantkit.runtimes.cuts.local_model`), fed the QDQ simulation's values of its
  quantized inputs: the share of its output codes that differ from the simulation's (``round(diff / scale) != 0``);
* **context** (``--context``, slower: one cut of the whole prefix per tensor): the model cut at that tensor, run
  from the image, the same share; one-code differences of the layers before it add up here.

Prints, per runtime, the share over Conv outputs and over every tensor (median, p90, max), and each tensor where a
runtime moves more than ``--show`` of the codes. The model's intake folder gives the preprocessing.

Usage::

    python bench/localize_codes.py INTAKE_DIR MODEL_INT8 IMAGE [--context] [--every 4] [--show 0.005]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

RUNTIMES = (("onnxruntime[all]", "onnxruntime", {"graph_optimization_level": "all"}),
            ("openvino[f32]", "openvino", {"inference_precision": "f32"}))


def main() -> None:
    import onnx

    from quantkit.imageio import load_image
    from quantkit.quantize.engine import load_intake
    from quantkit.runtimes import available_runtimes
    from quantkit.runtimes.cuts import cut_model, dq_scales, feeding_candidates, local_model, origin, quantized_tensors
    from quantkit.runtimes.divergence import code_share
    from quantkit.runtimes.localize import bound_target, run_cut

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("intake")
    ap.add_argument("model")
    ap.add_argument("image")
    ap.add_argument("--context", action="store_true", help="also cut the model at each tensor (the prefix: slower)")
    ap.add_argument("--every", type=int, default=1, metavar="K", help="every K-th tensor only (the last one always)")
    ap.add_argument("--show", type=float, default=0.005, metavar="SHARE", help="print tensors above this share")
    args = ap.parse_args()

    _, _, note = load_intake(args.intake)
    x, _ = note.preprocessing.apply(load_image(args.image))
    feed = {note.preprocessing.input_name: x}
    q = onnx.load(args.model)
    steps = dq_scales(q)
    cands = [t for t in quantized_tensors(q) if t in steps]
    cset = set(cands)
    picked = cands[::args.every] + ([cands[-1]] if (len(cands) - 1) % args.every else [])
    runtimes = [r for r in RUNTIMES if r[1] in available_runtimes()]
    t0 = time.perf_counter()
    rows = []
    for start in range(0, len(picked), 32):  # the simulation's values, 32 tensors (and their inputs) at a time
        block = picked[start:start + 32]
        feeding = {t: feeding_candidates(q, t, cset) for t in block}
        ref = run_cut(q, list(dict.fromkeys(block + [f for fs in feeding.values() for f in fs])), feed, "onnxruntime",
                      graph_optimization_level="disable")
        for t in block:
            sub, inputs = local_model(q, t, feeding[t], ref)
            row = {"tensor": t, "op": origin(q, t)[1]}
            for label, name, opts in runtimes:
                target = bound_target(name, feed, **opts)
                try:
                    row[f"{label} alone"] = code_share(target(sub, [t], {u: ref[c] for u, c in inputs.items()})[t], ref[t], steps[t])
                    if args.context:
                        row[f"{label} context"] = code_share(target(cut_model(q, [t]), [t])[t], ref[t], steps[t])
                except Exception:  # noqa: BLE001 - a node the runtime cannot compile alone is left out
                    pass
            rows.append(row)
    seconds = time.perf_counter() - t0
    keys = [k for k in rows[0] if k not in ("tensor", "op")] if rows else []
    print(f"{args.model}: {len(rows)} of {len(cands)} quantized tensors, one image, {seconds:.0f} s")
    for k in keys:
        for what, sel in (("Conv outputs", lambda r: r["op"] == "Conv"), ("every tensor", lambda r: True)):
            v = np.array([r[k] for r in rows if k in r and sel(r)])
            if v.size:
                print(f"  {k:24s} {what:13s} n={v.size:3d}  median {100 * np.median(v):6.3f}%  p90 {100 * np.percentile(v, 90):6.3f}%  "
                      f"max {100 * v.max():7.3f}%  above 2%: {int((v > 0.02).sum())}")
    print(f"  tensors above {100 * args.show:g}% ({', '.join(keys)}):")
    for r in rows:
        if any(r.get(k, 0) > args.show for k in keys):
            print(f"    {r['tensor'][:56]:56s} {r['op']:12s} " + "  ".join(f"{100 * r[k]:6.2f}%" if k in r else "   n/a" for k in keys))


if __name__ == "__main__":
    main()
