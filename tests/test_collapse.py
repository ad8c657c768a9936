"""A detector whose INT8 scores collapse: boxes in pixels (0..470) concatenated with sigmoid scores (0..1) in one
output, so both share one quantization scale (a public bug kind: "all confidences 0 after INT8"). bind refuses to
bind thresholds to it (exit 6), and the report shows it RED when bound anyway."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from models import concat_head_model

from quantkit.cli.main import main

SIZE = 16


def _set(root: Path, name: str, seed: int, n: int = 6) -> Path:
    from PIL import Image

    from quantkit.calibset import register_set

    rng = np.random.default_rng(seed)
    (root / name / "images").mkdir(parents=True)
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)).save(root / name / f"images/{i:02d}.png")
    register_set(root / name, name=name, kind="reference")
    return root / name


PARAMS = f"""
intake:
  input_size: [{SIZE}, {SIZE}]
  note_check: off
  ort_pre_process: false
  preprocessing: {{input_name: x, color_order: RGB, layout: NCHW, scale: 0.00392156862745098, mean: [0, 0, 0], std: [1, 1, 1], resize_policy: stretch}}
task:
  adapter: box_detector
  options: {{layout: rows, objectness: false, score_thresh: 0.25, iou_thresh: 0.45}}
quantize: {{method: minmax, format: qdq, per_channel: false, activation_type: uint8, weight_type: int8}}
thresholds: {{operating_point: {{bootstrap_resamples: 50}}, min_agreement: 0.5}}
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("collapse")
    onnx.save(concat_head_model(SIZE), root / "det.onnx")  # [1, 256, 5]: 4 box coordinates in pixels + 1 score, one output
    (root / "params.yaml").write_text(PARAMS)
    for name, seed in (("calib", 1), ("ref", 2), ("site", 3)):
        _set(root, name, seed)
    assert main(["intake", str(root / "det.onnx"), "--params", str(root / "params.yaml"), "--out", str(root / "intake")]) == 0
    assert main(["quantize", str(root / "intake"), "--calibration-set", str(root / "calib"), "--params", str(root / "params.yaml"),
                 "--out", str(root / "q")]) == 0
    return root


def test_bind_refuses_a_detector_whose_scores_collapsed(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = work / "th.json"
    capsys.readouterr()
    code = main(["bind", str(work / "q"), "--fp32", str(work / "intake"), "--reference", str(work / "ref"), "--params", str(work / "params.yaml"),
                 "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 6 and len(err.splitlines()) == 1 and not out.exists()
    assert "box F1 vs FP32" in err and "below thresholds.min_agreement 0.5" in err
    # the likely causes in order, each with the params key that fixes it: per-channel (off in this record) first
    hint = err.split("likely causes, most likely first: ", 1)[1]
    assert hint.startswith("(1) per-channel weights are off in the record (per_channel: false): set quantize.per_channel: true; ")
    assert "(2) output 'det'" in hint and "span fewer than 16 quantization steps" in hint
    assert "(3) uint8 activations: set quantize.activation_type: uint16" in hint
    assert "(4) calibrated on 'calib' (6 images)" in hint and "models.<name>.sets.deployed.calibration" in hint
    assert hint.index("(1)") < hint.index("(2)") < hint.index("(3)") < hint.index("(4)")


def test_bound_anyway_the_report_shows_it_red(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = work / "lenient.yaml"
    params.write_text(PARAMS.replace("min_agreement: 0.5", "min_agreement: 0.0"))
    m = work / "model"
    assert main(["bind", str(work / "q"), "--fp32", str(work / "intake"), "--reference", str(work / "ref"), "--params", str(params),
                 "--out", str(m / "thresholds" / "deployed.json")]) == 0
    (m / "quantize").mkdir(parents=True)
    (m / "quantize" / "deployed").symlink_to(work / "q")
    assert main(["evaluate", str(work / "site"), "--fp32", str(work / "intake"), "--deployed", str(work / "q"),
                 "--deployed-thresholds", str(m / "thresholds" / "deployed.json"), "--params", str(params), "--out", str(m / "eval" / "site")]) == 0
    out = capsys.readouterr().out
    assert "likely causes" not in out  # min_agreement 0.0: nothing is low
    assert main(["evaluate", str(work / "site"), "--fp32", str(work / "intake"), "--deployed", str(work / "q"),
                 "--deployed-thresholds", str(m / "thresholds" / "deployed.json"), "--params", str(work / "params.yaml"),
                 "--out", str(work / "eval-strict")]) == 0
    hint = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("deployed: box_f1")]
    assert len(hint) == 1 and "is below thresholds.min_agreement 0.5; likely causes, most likely first: (1) per-channel" in hint[0]
    assert "(2) output 'det'" in hint[0] and "(4) calibrated on 'calib' (6 images)" in hint[0]
    assert main(["report", "--work-dir", str(m), "--out", str(work / "reports")]) == 0
    text = capsys.readouterr().out
    assert "deployed red box_f1" in text and "NEEDS REVIEW" in text
