"""The one cause -> action table (quantkit.drift.advice): each kind of finding gets its action, with its words."""

from __future__ import annotations

import dataclasses

import pytest

from quantkit.drift.advice import ACTIONS, CAUSES, CHECK_CAMERA, NEW_SET, QUANTIZATION_LOSS, RECALIBRATE, RETRAIN, WATCH, diagnose, is_drifting

DAY = {"width": 640.0, "height": 640.0, "brightness_mean": 120.0, "brightness_p50": 118.0, "contrast_rms": 0.20, "sharpness_lapvar": 400.0, "noise_sigma": 2.0,
       "cast_rg": 1.0, "cast_bg": 1.0, "clip_dark": 0.0, "clip_bright": 0.01}


def _after(**changes: float) -> dict[str, float]:
    return {**DAY, **changes}


@pytest.mark.parametrize(("after", "moved", "kw", "cause", "action"), [
    # a defocused lens: sharpness falls 4x in the same light and contrast -> the camera, even though INT8 still agrees
    (_after(sharpness_lapvar=100.0), {"sharpness_lapvar"}, {"covered": True}, "defocus", CHECK_CAMERA),
    # half the light: the Laplacian falls with the contrast squared, so it is the lighting, not the lens
    (_after(brightness_mean=80.0, brightness_p50=78.0, contrast_rms=0.13, sharpness_lapvar=170.0),
     {"brightness_mean", "brightness_p50", "contrast_rms", "sharpness_lapvar"}, {}, "lighting", RECALIBRATE),
    # night shift: darker, warmer, noisier (more gain) -> recalibrate; noise with less light is not a sensor fault
    (_after(brightness_mean=95.0, brightness_p50=93.0, cast_bg=0.6, noise_sigma=5.0), {"brightness_mean", "brightness_p50", "cast_bg", "noise_sigma"},
     {}, "lighting", RECALIBRATE),
    (_after(cast_bg=0.6), {"cast_bg"}, {}, "colour_cast", RECALIBRATE),
    (_after(noise_sigma=6.0), {"noise_sigma"}, {}, "sensor_noise", CHECK_CAMERA),
    (_after(brightness_mean=20.0, brightness_p50=12.0, clip_dark=0.7), {"brightness_mean", "brightness_p50", "clip_dark"}, {},
     "exposure_collapse", CHECK_CAMERA),
    (_after(brightness_mean=80.0), {"brightness_mean"}, {"drifting": True}, "exposure_drift", CHECK_CAMERA),
    (_after(brightness_mean=80.0), {"brightness_mean"}, {"covered": True}, "covered", WATCH),
    (DAY, set(), {"agreement_low": True}, "quantization", QUANTIZATION_LOSS),
    (DAY, {"width", "height"}, {"agreement_low": True}, "quantization", QUANTIZATION_LOSS),  # a size change alone is no cause
    (DAY, set(), {"agreement_low": True, "fp32_fails": True}, "new_content", RETRAIN),
    (DAY, set(), {"agreement_low": True, "clipping": True}, "clipping", RECALIBRATE),
    # 48x192 text-line crops against 640x640 scenes: blurred and darker too, but another kind of image, not a camera fault
    (_after(width=192.0, height=48.0, sharpness_lapvar=30.0, brightness_mean=60.0, brightness_p50=58.0),
     {"width", "height", "sharpness_lapvar", "brightness_mean", "brightness_p50"}, {}, "other_kind", NEW_SET),
    # a replacement camera of the same view: 0.55 of the resolution per side (0.3 of the area), same shape -> still the camera
    (_after(width=352.0, height=352.0, sharpness_lapvar=40.0), {"width", "height", "sharpness_lapvar"}, {}, "defocus", CHECK_CAMERA),
])
def test_each_finding_maps_to_its_action(after, moved, kw, cause, action):
    found = diagnose(DAY, after, moved, **kw)
    assert (found.cause, found.action) == (cause, action)
    assert found.words == CAUSES[cause][0] and found.sentence.startswith(f"{action.badge}: {found.words}")


def test_table_is_complete_and_frozen():
    assert {a for _, a in CAUSES.values()} == set(ACTIONS.values())
    assert list(ACTIONS)[:4] == ["check-camera", "register-set", "retrain", "recalibrate"]  # the order cameras are ranked in
    with pytest.raises(dataclasses.FrozenInstanceError):
        RECALIBRATE.badge = "x"  # type: ignore[misc]
    assert all(a.lead.endswith(".") and a.fix for a in ACTIONS.values())


def test_drift_is_a_run_of_moves_one_way_not_a_step():
    assert is_drifting([90.0, 84.0, 77.0, 70.0], reference=120.0)
    assert not is_drifting([80.0, 81.0, 79.0, 80.5], reference=120.0)  # a step to a new lighting, then steady
    assert not is_drifting([100.0, 99.0, 98.5], reference=120.0)  # one way, but by less than DRIFT_CHANGE
