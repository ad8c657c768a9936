"""notebooks/walkthrough.ipynb walks the main job through the Python API, top to bottom, at a small size.

The notebook runs in a scratch WORKDIR (``QUANTKIT_NB_WORKDIR``); a probe cell appended after its last cell
reports the variables it leaves, and the artifacts it wrote are checked on disk.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NB = Path(__file__).resolve().parents[1] / "notebooks" / "walkthrough.ipynb"

PROBE = """
import json as _json
print("PROBE" + _json.dumps({
    "params": {"SIZE": SIZE, "N_CALIB": N_CALIB, "N_SITE": N_SITE, "WORKDIR": str(WORK)},
    "sets": {k: [r.count, r.set_id] for k, r in made.items()},
    "stats_rows": {k: len(v) for k, v in stats.items()},
    "inspect": {"opset_before": before.opset, "opset_after": after.opset, "inputs": [t.name for t in before.inputs],
                "ops": int(len(ops))},
    "support": {"target": support.target, "supported": support.supported, "issue_ops": sorted({i.op_type for i in support.issues})},
    "record": {"fingerprint": record.fingerprint, "roles": sorted(set(scales["role"])), "rows": int(len(scales)),
               "per_channel_weights": int(((scales["role"] == "weight") & (scales["channels"] > 1)).sum()),
               "calibration_set": record.set_id},
    "layers": {"rows": int(len(layers)), "sorted": bool(layers["sqnr_db"].is_monotonic_increasing)},
    "thresholds": {"record_fingerprint": tset.binding.record_fingerprint, "values": tset.values,
                   "fp32_values": tset.fp32_values, "integer": sorted(tset.integer_domain)},
    "eval": {site: sorted(r.summary.variants) for site, r in evals.items()},
    "drift": {site: {"changed": r.changed, "moved": r.moved, "statistics": len(r.statistics),
                     "clipping": r.clipping is not None} for site, r in drifts.items()},
    "report": {"decision": model.decision, "verdict": list(model.verdict)},
    "bundle": {"path": str(bundle.path), "record_fingerprint": bundle.record_fingerprint,
               "checks": [[c.kind, c.name, c.status, c.detail] for c in verification.checks]},
}))
"""


@pytest.mark.slow
def test_walkthrough_notebook_executes(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NB, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    # stored without executed outputs, with the parameter cell on top
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code)
    assert "SIZE = 160" in code[0].source and "QUANTKIT_NB_WORKDIR" in code[0].source

    work = tmp_path / "work"
    monkeypatch.setenv("QUANTKIT_NB_WORKDIR", str(work))  # the kernel inherits the environment
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 3  # stats, layer SQNR, score CDF
    assert sum("<table" in o.get("data", {}).get("text/html", "") for o in outputs) >= 12  # pandas tables
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    probe = json.loads(text.split("PROBE", 1)[1].splitlines()[0])

    # 1) sets
    assert probe["params"] == {"SIZE": 160, "N_CALIB": 8, "N_SITE": 4, "WORKDIR": str(work.resolve())}
    assert [probe["sets"][k][0] for k in ("calib-cam1-day", "ref-cam1-day", "site-cam1-day", "site-cam1-night")] == [8, 4, 4, 4]
    assert set(probe["stats_rows"].values()) <= {8, 4}
    # 2) intake: the detector at opset 12 with dynamic shape, raised to 13; npu-generic lacks HardSigmoid
    assert probe["inspect"]["opset_before"] == 12 and probe["inspect"]["opset_after"] >= 13 and probe["inspect"]["inputs"] == ["x"]
    assert probe["support"]["target"] == "npu-generic" and not probe["support"]["supported"]
    assert "HardSigmoid" in probe["support"]["issue_ops"]
    # 3) record: per-channel weights, activations, fingerprint on disk
    rec = json.loads((work / "work/quantize/deployed/record.json").read_text())
    assert rec["fingerprint"] == probe["record"]["fingerprint"] and probe["record"]["fingerprint"] in text
    assert {"activation", "weight"} <= set(probe["record"]["roles"]) and probe["record"]["per_channel_weights"] > 0
    assert rec["config"]["method"] == "minmax" and rec["config"]["format"] == "qdq" and rec["config"]["per_channel"] is True
    assert rec["calibration_set"]["set_id"] == probe["sets"]["calib-cam1-day"][1]
    # 4) layer comparison sorted worst first
    assert probe["layers"]["rows"] > 100 and probe["layers"]["sorted"]
    # 5) thresholds bound to that record, float and integer domain
    ts = json.loads((work / "work/thresholds/deployed.json").read_text())
    assert ts["binding"]["record_fingerprint"] == rec["fingerprint"] == probe["thresholds"]["record_fingerprint"]
    assert probe["thresholds"]["fp32_values"] == {"thresh": 0.3, "box_thresh": 0.5}
    assert "thresh" in probe["thresholds"]["integer"]
    # 6) evaluation on both site sets
    for site in ("cam1-day", "cam1-night"):
        assert probe["eval"][site] == sorted(["fp32", "deployed", "deployed@fp32-thresholds"])
        assert (work / "work/eval" / site / "summary.json").is_file()
    # 7) drift results with statistics and clipping
    assert set(probe["drift"]) == {"cam1-day", "cam1-night"}
    assert all(d["statistics"] > 0 and d["clipping"] for d in probe["drift"].values())
    assert (work / "work/drift/cam1-night.json").is_file()
    # 8) the shift report in WORKDIR/reports, verdict lines shown
    for name in ("shift_report.html", "shift_report.md", "metrics.json"):
        assert (work / "reports" / name).is_file()
    assert probe["report"]["verdict"] and all(line in text for line in probe["report"]["verdict"])
    assert set(json.loads((work / "reports/metrics.json").read_text())["ppocr_det"]) >= {"cam1-day", "cam1-night"}
    # 9) bundle built and verified; the archive, digest and binding checks pass
    assert (work / probe["bundle"]["path"]).is_file() and probe["bundle"]["record_fingerprint"] == rec["fingerprint"]
    checks = {(k, n): s for k, n, s, _ in probe["bundle"]["checks"]}
    for key in [("archive", "content digest"), ("digest", "members"), ("binding", "record.json"), ("binding", "thresholds.json"),
                ("binding", "model_int8.onnx")]:
        assert checks[key] == "pass", key
    # Known product issue (not the notebook's): intake with ort_pre_process (the default) leaves helper opset imports
    # (ai.onnx.preview, ai.onnx.training, ...) that verify's runtime opset check calls unknown, so that one check may
    # fail and stop verification. Any other failure is a regression.
    # On a CPU where ONNX Runtime computes one of the model's risky patterns differently (uint8 x int8 Conv saturating
    # on x86 without VNNI), golden outputs and decisions may fail too; verify must then name that pattern as found here.
    failed = {key for key, s in checks.items() if s == "fail"}
    runtime_differs = [d for k, _, s, d in probe["bundle"]["checks"] if k == "patterns" and " here on " in d]
    allowed = {("support", "opset")} | ({key for key in failed if key[0] in ("output", "decision", "layer")} if runtime_differs else set())
    assert failed <= allowed, (failed, runtime_differs)
