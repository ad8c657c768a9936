"""Registration, versioning, diff, listing and bad files of image sets (quantkit.calibset.manifest)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from quantkit.calibset import CalibrationSet, diff_sets, list_sets, register_set, scan_sets
from quantkit.cli.main import main
from quantkit.errors import CalibrationSetError, ConfigError


def _jpeg(rng: np.random.Generator, h: int = 48, w: int = 64) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def make_folder(root: Path, n: int = 4, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True)
    for i in range(n):
        (root / "images" / f"{i:04d}.jpg").write_bytes(_jpeg(rng))
    return root


def test_register_writes_manifest_and_stats(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "s")
    res = register_set(folder, name="cam1-day", kind="calibration", camera="cam1", lighting="day", site="line-1")
    assert res.written and res.skipped == ()
    m = json.loads((folder / "manifest.json").read_text())
    assert m["schema_version"] == 1 and m["count"] == 4 and m["name"] == "cam1-day" and m["camera"] == "cam1"
    assert [e["file"] for e in m["images"]] == [f"images/{i:04d}.jpg" for i in range(4)]
    e0 = m["images"][0]
    assert (e0["width"], e0["height"], e0["format"]) == (64, 48, "JPEG")
    assert e0["bytes"] == (folder / "images/0000.jpg").stat().st_size
    assert (folder / "manifest.json").read_text() == json.dumps(m, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    cset = CalibrationSet.load(folder, verify=True)
    assert cset.set_id == m["set_id"] and cset.count == 4 and len(cset.paths()) == 4
    assert len(cset.stats()) == 4
    assert "cam1-day" in repr(cset) and "images" not in repr(cset)[40:]


def test_same_content_same_id_and_metadata_does_not_matter(tmp_path: Path) -> None:
    a = register_set(make_folder(tmp_path / "a"), name="a", camera="cam1").set
    b = register_set(make_folder(tmp_path / "b"), name="b", camera="cam2", lighting="night").set
    c = register_set(make_folder(tmp_path / "c", seed=1), name="a", camera="cam1").set
    assert a.set_id == b.set_id
    assert a.set_id != c.set_id


def test_never_rewrites_an_existing_version(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "s")
    register_set(folder, name="s")
    before = (folder / "manifest.json").read_bytes()
    again = register_set(folder, name="s")
    assert not again.written
    (folder / "images/0002.jpg").write_bytes(_jpeg(np.random.default_rng(99)))
    with pytest.raises(CalibrationSetError, match="new version") as ei:
        register_set(folder, name="s")
    assert "\n" not in str(ei.value)
    assert (folder / "manifest.json").read_bytes() == before
    other = make_folder(tmp_path / "t")
    register_set(other, name="t")
    with pytest.raises(CalibrationSetError, match="different metadata"):
        register_set(other, name="renamed")  # metadata is part of the version too


def test_verify_detects_a_changed_image(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "s")
    register_set(folder, name="s")
    (folder / "images/0001.jpg").write_bytes(_jpeg(np.random.default_rng(5)))
    CalibrationSet.load(folder)  # loading alone does not hash
    with pytest.raises(CalibrationSetError, match="0001.jpg.*content changed"):
        CalibrationSet.load(folder, verify=True)
    (folder / "images/0001.jpg").unlink()
    with pytest.raises(CalibrationSetError, match="0001.jpg.*missing"):
        CalibrationSet.load(folder, verify=True)


def test_verify_names_an_image_added_without_registering(tmp_path: Path, capsys) -> None:
    """`calibset show --verify` never says "all hashes match" while images/ holds a file the manifest does not list."""
    from quantkit.cli.main import main

    folder = make_folder(tmp_path / "s")
    register_set(folder, name="s")
    (folder / "images/extra.jpg").write_bytes(_jpeg(np.random.default_rng(7)))
    with pytest.raises(CalibrationSetError, match="extra.jpg: in .* but not registered"):
        CalibrationSet.load(folder, verify=True)
    assert main(["calibset", "show", str(folder), "--verify"]) == 2
    out, err = capsys.readouterr()
    assert "hashes match" not in out and "not registered" in err


def test_edited_manifest_is_rejected(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "s")
    register_set(folder, name="s")
    m = json.loads((folder / "manifest.json").read_text())
    m["images"][0]["sha256"] = "0" * 64
    (folder / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CalibrationSetError, match="set_id does not match"):
        CalibrationSet.load(folder)


def test_diff_names_the_one_changed_image(tmp_path: Path) -> None:
    a = make_folder(tmp_path / "v1")
    b = tmp_path / "v2"
    shutil.copytree(a, b)
    (b / "images/0002.jpg").write_bytes(_jpeg(np.random.default_rng(7)))
    (b / "images/0009.jpg").write_bytes(_jpeg(np.random.default_rng(8)))
    (b / "images/0000.jpg").unlink()
    d = diff_sets(register_set(a, name="v1").set, register_set(b, name="v2").set)
    assert d.changed == ("images/0002.jpg",) and d.added == ("images/0009.jpg",) and d.removed == ("images/0000.jpg",)
    assert d.unchanged == 2 and not d.identical
    assert main(["calibset", "diff", str(a), str(b), "--json"]) == 0


def test_list_sets_finds_registered_folders_only(tmp_path: Path) -> None:
    register_set(make_folder(tmp_path / "sets/b"), name="b")
    register_set(make_folder(tmp_path / "sets/a/x"), name="x")
    make_folder(tmp_path / "sets/unregistered")
    found = list_sets(tmp_path / "sets")
    assert [s.name for s in found] == ["x", "b"]


def test_list_skips_malformed_manifests_with_a_warning(tmp_path: Path, capsys, caplog: pytest.LogCaptureFixture) -> None:
    """One malformed manifest somewhere below the root does not abort the listing."""
    register_set(make_folder(tmp_path / "sets/good"), name="good")
    broken = register_set(make_folder(tmp_path / "sets/deep/broken", seed=1), name="broken").set.root / "manifest.json"
    broken.write_text("{not json")
    (tmp_path / "sets/edited").mkdir()
    (tmp_path / "sets/edited/manifest.json").write_text(json.dumps({"schema_version": 1, "images": []}))
    listing = scan_sets(tmp_path / "sets")
    assert [s.name for s in listing.sets] == ["good"]
    assert [m for m, _ in listing.skipped] == [str(broken), str(tmp_path / "sets/edited/manifest.json")]
    assert sum("skipping" in r.getMessage() for r in caplog.records if r.levelname == "WARNING") == 2
    assert [s.name for s in list_sets(tmp_path / "sets")] == ["good"]
    assert main(["calibset", "list", str(tmp_path / "sets")]) == 0
    out = capsys.readouterr().out
    assert "good" in out and "skipped 2 malformed manifest(s)" in out
    assert main(["calibset", "list", str(tmp_path / "sets"), "--json"]) == 0
    cap = capsys.readouterr()
    assert [d["name"] for d in json.loads(cap.out)] == ["good"] and "skipped 2" in cap.err


def _bad_folder(root: Path) -> Path:
    """A corrupt (truncated) JPEG, a zero-byte file, a text file named .jpg, notes.txt, a 16-bit PNG,
    an EXIF-rotated JPEG and one good JPEG."""
    rng = np.random.default_rng(0)
    img = root / "images"
    img.mkdir(parents=True)
    good = _jpeg(rng, 40, 60)
    (img / "a_good.jpg").write_bytes(good)
    (img / "b_truncated.jpg").write_bytes(good[: len(good) // 2])
    (img / "c_empty.jpg").write_bytes(b"")
    (img / "d_text.jpg").write_text("this is not an image\n")
    (img / "notes.txt").write_text("operator notes\n")
    Image.fromarray((rng.integers(0, 65535, (30, 20), dtype=np.uint16))).save(img / "e_16bit.png")
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 CW on display
    Image.fromarray(rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(img / "f_exif.jpg", exif=exif)
    return root


def test_bad_files_fail_by_default_naming_the_file_and_writing_nothing(tmp_path: Path) -> None:
    folder = _bad_folder(tmp_path / "bad")
    with pytest.raises(CalibrationSetError, match="b_truncated.jpg") as ei:
        register_set(folder, name="bad")
    assert "\n" not in str(ei.value)
    assert not (folder / "manifest.json").exists() and not (folder / "stats.csv").exists()


def test_bad_files_skipped_by_policy_16bit_and_exif_handled(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = _bad_folder(tmp_path / "bad")
    res = register_set(folder, name="bad", on_error="skip")
    assert res.skipped == ("images/b_truncated.jpg", "images/c_empty.jpg", "images/d_text.jpg")
    for name in res.skipped:
        assert Path(name).name in caplog.text
    files = {e.file: e for e in res.set.entries}
    assert sorted(files) == ["images/a_good.jpg", "images/e_16bit.png", "images/f_exif.jpg"]  # notes.txt is not an image
    assert (files["images/e_16bit.png"].width, files["images/e_16bit.png"].height) == (20, 30)
    assert (files["images/f_exif.jpg"].width, files["images/f_exif.jpg"].height) == (40, 60)  # EXIF rotation applied
    from quantkit.calibset.reader import CalibrationSetReader
    from quantkit.note import Preprocessing

    reader = CalibrationSetReader(res.set, Preprocessing(input_size=(60, 40), resize_policy="stretch"))
    shapes = [b.shape for _, b in reader.iter_batches()]
    assert shapes == [(1, 3, 60, 40)] * 3 and reader.skipped == []  # 16-bit and EXIF photos read as normal images
    # the skipped files may stay: the set loads and verifies (a new user's trial: the suggested fix made an unusable set) ...
    again = CalibrationSet.load(folder, verify=True)
    assert again.skipped == res.skipped and again.set_id == res.set.set_id
    # ... but a file added later is still a change to the set
    shutil.copy(folder / "images" / "a_good.jpg", folder / "images" / "g_new.jpg")
    with pytest.raises(CalibrationSetError, match="g_new.jpg: in .* but not registered"):
        CalibrationSet.load(folder, verify=True)


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(CalibrationSetError, match="no images/ folder"):
        register_set(tmp_path, name="x")
    (tmp_path / "images").mkdir()
    with pytest.raises(CalibrationSetError, match="no image files"):
        register_set(tmp_path, name="x")
    with pytest.raises(ConfigError, match="kind"):
        register_set(tmp_path, name="x", kind="training")
    with pytest.raises(CalibrationSetError, match="no manifest.json"):
        CalibrationSet.load(tmp_path)


def test_cli_register_show_list_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = make_folder(tmp_path / "s")
    assert main(["calibset", "register", str(folder), "--name", "s", "--camera", "cam9", "--json"]) == 0
    reg = json.loads(capsys.readouterr().out)
    assert reg["written"] and reg["camera"] == "cam9" and reg["count"] == 4
    assert main(["calibset", "show", str(folder), "--verify", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["set_id"] == reg["set_id"]
    assert main(["calibset", "list", str(tmp_path), "--json"]) == 0
    assert [s["name"] for s in json.loads(capsys.readouterr().out)] == ["s"]
    assert main(["calibset", "stats", str(folder), "--json", "--plot", str(tmp_path / "p.png")]) == 0
    summary = {r["statistic"]: r for r in json.loads(capsys.readouterr().out)}
    assert summary["width"]["mean"] == 64 and (tmp_path / "p.png").stat().st_size > 1000


def test_cli_bad_input_one_line_error_nonzero_exit_no_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _bad_folder(tmp_path / "bad")
    assert main(["calibset", "register", str(folder), "--name", "bad"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "b_truncated.jpg" in err and "--on-error skip" in err
    assert not (folder / "manifest.json").exists()
    assert main(["calibset", "register", str(folder), "--name", "bad", "--on-error", "skip"]) == 0
    assert main(["calibset", "show", str(tmp_path / "nope")]) == 2
    assert "nope: no such folder" in capsys.readouterr().err


def test_cli_register_with_labels_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = make_folder(tmp_path / "s")
    files = sorted(p.relative_to(folder).as_posix() for p in (folder / "images").iterdir())
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({files[0]: {"class": 3}, files[1]: {"text": "LOT 42"}}))
    assert main(["calibset", "register", str(folder), "--name", "s", "--labels", str(labels)]) == 0
    entries = {e.file: e.labels for e in CalibrationSet.load(folder).entries}
    assert entries[files[0]] == {"class": 3} and entries[files[1]] == {"text": "LOT 42"} and entries[files[2]] is None
    other = make_folder(tmp_path / "o")
    labels.write_text(json.dumps({"images/nope.jpg": {"class": 1}}))
    assert main(["calibset", "register", str(other), "--name", "o", "--labels", str(labels)]) == 2
    err = capsys.readouterr().err
    assert "images/nope.jpg" in err and "not images of the set" in err and not (other / "manifest.json").exists()
    labels.write_text("[1, 2]")
    assert main(["calibset", "register", str(other), "--name", "o", "--labels", str(labels)]) == 2
    assert "labels must be a JSON object" in capsys.readouterr().err
