"""Fleet manifest: built from a folder tree or checked; bad files counted and named, never a crash."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from fleet_fixtures import make_fleet_tree

from quantkit.cli.main import main
from quantkit.errors import InputFileError
from quantkit.fleet.manifest import check_manifest, load_manifest, register_tree, write_manifest


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    return make_fleet_tree(tmp_path / "images", sites=1, cameras=2, days=2, per_day=2)


def test_register_builds_sorted_manifest_with_capture_times(tree: Path, tmp_path: Path):
    from PIL import Image

    exif = Image.Exif()
    exif.get_ifd(0x8769)[0x9003] = "2025:03:03 07:15:00"
    with Image.open(tree / "site-a" / "a02" / "2025-03-03" / "080000.png") as im:
        im.convert("RGB").save(tree / "site-a" / "a02" / "2025-03-03" / "exif.jpg", exif=exif.tobytes())
    m, chk = register_tree(tree, tmp_path / "m.parquet")
    assert chk.ok and len(m) == 9 and list(m.frame["camera"].unique()) == ["a01", "a02"]
    f = m.frame
    assert f["uri"].iloc[0] == "images/site-a/a01/2025-03-03/080000.png"  # relative to the manifest's folder
    assert str(f["captured_at"].dtype) == "datetime64[us, UTC]" and f["sha256"].str.len().eq(64).all()
    when = dict(zip(f["uri"], f["captured_at"]))
    assert when["images/site-a/a02/2025-03-03/exif.jpg"] == pd.Timestamp("2025-03-03T07:15:00Z")  # EXIF DateTimeOriginal
    assert when["images/site-a/a02/2025-03-04/080000.png"] == pd.Timestamp("2025-03-04T00:00:00Z")  # no EXIF: the date folder
    assert m.resolve(f["uri"].iloc[0]) == (tmp_path / f["uri"].iloc[0]).as_posix()
    again, _ = register_tree(tree, tmp_path / "m2.parquet")
    assert (tmp_path / "m.parquet").read_bytes() == (tmp_path / "m2.parquet").read_bytes()


def test_register_names_unreadable_duplicate_and_unplaced_files(tree: Path, tmp_path: Path, capsys):
    day = tree / "site-a" / "a01" / "2025-03-03"
    (day / "broken.png").write_bytes(b"not an image")
    (day / "empty.jpg").write_bytes(b"")
    shutil.copy(day / "080000.png", day / "copy.png")
    (tree / "stray.png").write_bytes((day / "090000.png").read_bytes())
    m, chk = register_tree(tree, tmp_path / "m.parquet")
    assert len(m) == 8 and (chk.unreadable, chk.duplicates, chk.unplaced) == (2, 1, 1)
    text = "\n".join(chk.lines())
    assert "broken.png" in text and "empty.jpg" in text and "copy.png has the same bytes as" in text and "stray.png" in text
    code = main(["fleet", "register", str(tree), "--out", str(tmp_path / "m3.parquet")])
    out = capsys.readouterr().out
    assert code == 1 and "unreadable: 2" in out and "duplicates: 1" in out


def test_check_counts_missing_duplicate_and_changed_files(tree: Path, tmp_path: Path, capsys):
    m, _ = register_tree(tree, tmp_path / "m.parquet")
    f = m.frame
    (tmp_path / f["uri"].iloc[0]).unlink()
    (tmp_path / f["uri"].iloc[1]).write_bytes(b"\x89PNG garbage")
    frame = pd.concat([f, f.iloc[[2]]], ignore_index=True)
    write_manifest(frame, tmp_path / "edited.csv")
    chk = check_manifest(load_manifest(tmp_path / "edited.csv"))
    assert (chk.missing, chk.unreadable, chk.duplicates) == (1, 1, 1) and chk.images == 9
    assert f["uri"].iloc[2] + " listed twice" in chk.examples["duplicates"][0]
    code = main(["fleet", "register", str(tmp_path / "edited.csv")])
    assert code == 1 and "missing: 1" in capsys.readouterr().out


def test_bad_manifest_is_a_one_line_error(tmp_path: Path, capsys):
    (tmp_path / "m.csv").write_text("uri,camera\nimages/x.png,c1\n")
    with pytest.raises(InputFileError, match="column 'site' is missing"):
        load_manifest(tmp_path / "m.csv")
    (tmp_path / "t.csv").write_text("uri,camera,site,captured_at\nimages/x.png,c1,s1,yesterday\n")
    assert main(["fleet", "register", str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "captured_at" in err and "Traceback" not in err
    assert main(["fleet", "register", str(tmp_path / "nope.parquet")]) == 2
    with pytest.raises(Exception, match="layout"):
        register_tree(tmp_path, tmp_path / "x.parquet", layout="{camera}/{oops}")


def test_camera_names_repeated_across_sites_become_site_qualified_ids(tmp_path: Path, capsys):
    tree = make_fleet_tree(tmp_path / "images", sites=1, cameras=2, days=1, per_day=1)
    shutil.copytree(tree / "site-a", tree / "site-b")  # site-b has cameras a01 and a02 too (other bytes below)
    for p in (tree / "site-b").rglob("*.png"):
        p.write_bytes(p.read_bytes() + b"\0")
    m, _ = register_tree(tree, tmp_path / "m.parquet")
    assert sorted(m.frame["camera"].unique()) == ["site-a-a01", "site-a-a02", "site-b-a01", "site-b-a02"]
    plain = m.frame.assign(camera=m.frame["camera"].str[-3:])  # a given manifest with the bare names: refused by name
    plain.to_csv(tmp_path / "bare.csv", index=False)
    with pytest.raises(InputFileError, match="camera id 'a01' appears under sites site-a, site-b"):
        load_manifest(tmp_path / "bare.csv")
