"""``quantkit record``: read, compare, export and replay a scales record (``record.json``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

HELP = "scales records: show, diff two, export AIMET encodings, import them, replay into a byte-identical model"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("record", help=HELP, description=HELP + ". RECORD is a record.json or the quantize output folder holding it.")
    sub = p.add_subparsers(dest="record_command", metavar="ACTION")
    sub.required = True

    s = sub.add_parser("show", help="every quantized tensor: role, dtype, axis, scale(s), zero point(s), calibrated range; "
                       "every graph output and what quantize noticed")
    s.add_argument("record", help="record.json or its folder")
    s.add_argument("--csv", metavar="FILE", help="also write the whole table as CSV")
    s.add_argument("--json", action="store_true", help="print the record's provenance and the table as JSON")
    s.set_defaults(func=_show)

    d = sub.add_parser("diff", help="rank tensors by how far their scales moved from record A to record B")
    d.add_argument("a", help="older record")
    d.add_argument("b", help="newer record")
    d.add_argument("--top", type=int, default=20, metavar="K", help="rows to print (default 20)")
    d.add_argument("--json", action="store_true", help="print every row as JSON")
    d.set_defaults(func=_diff)

    e = sub.add_parser("export-aimet", help="write AIMET encodings JSON (format 1.0.0)")
    e.add_argument("record", help="record.json or its folder")
    e.add_argument("--out", required=True, metavar="FILE", help="encodings file to write")
    e.set_defaults(func=_export)

    i = sub.add_parser("import-aimet", help="read AIMET encodings (1.0.0) and compare them with a record's scales (exit 4 when they differ)")
    i.add_argument("encodings", help="AIMET encodings JSON")
    i.add_argument("--record", required=True, help="record whose tensors the encodings describe (axes and ranges come from it)")
    i.add_argument("--json", action="store_true", help="print the comparison as JSON")
    i.set_defaults(func=_import)

    r = sub.add_parser("replay", help="rebuild the quantized model from the record alone (no images); same bytes")
    r.add_argument("record", help="record.json or its folder")
    r.add_argument("intake", help="the intake folder the record was made from (its model digest is checked)")
    r.add_argument("--out", required=True, metavar="DIR", help="output folder: model_int8.onnx + record.json")
    r.set_defaults(func=_replay)


def _new_file(path: str, flag: str, record: str) -> None:
    """Refuse to replace an existing file (the user's file is never overwritten) or to write inside the record's folder."""
    from pathlib import Path

    from .._overwrite import check_not_input
    from ..errors import ConfigError

    check_not_input(path, [record], flag=flag)
    if Path(path).exists():
        raise ConfigError(f"{flag} {path}: already exists; choose a new file name or remove it first")


def _load(path: str) -> Any:
    from ..artifacts import CalibrationRecord

    return CalibrationRecord.load(path)


def _show(args: argparse.Namespace) -> int:
    rec = _load(args.record)
    table = rec.table()
    if args.csv:
        from .._io import atomic_write_text

        _new_file(args.csv, "--csv", args.record)
        atomic_write_text(args.csv, table.to_csv(index=False))
    if args.json:
        print(json.dumps({"fingerprint": rec.fingerprint, "mode": rec.mode, "model_digest": rec.model_digest,
                          "quantized_model_digest": rec.quantized_model_digest, "calibration_set": rec.calibration_set.to_dict() if rec.calibration_set else None,
                          "versions": rec.versions, "calibration": rec.calibration, "tensors": json.loads(table.to_json(orient="records"))},
                         indent=2, sort_keys=True))
        return 0
    w = sys.stdout.write
    w(f"record {rec.fingerprint[:16]} ({rec.mode}); model {rec.model_digest[:12]} -> {rec.quantized_model_digest[:12]}; "
      f"calibration set {rec.set_name} {(rec.set_id or '')[:12]}\n")
    w(table.to_string(index=False, max_rows=60) + "\n")
    from .quantize import findings

    for line in findings(rec):  # graph outputs and what quantize changed or noticed
        w(line + "\n")
    return 0


def _diff(args: argparse.Namespace) -> int:
    from ..artifacts import scale_diff
    from ..errors import ConfigError

    if args.top < 1:
        raise ConfigError(f"--top {args.top}: give at least 1 row")
    df = scale_diff(_load(args.a), _load(args.b))
    if args.json:
        print(df.to_json(orient="records", indent=2))
        return 0
    zp_moved = df["zp_changed"].eq(True)
    is_changed = (df["rel_change"] > 0) | zp_moved | (df["status"] != "both")
    changed = df[is_changed]  # an unchanged row says nothing: the table lists only what changed
    if changed.empty:
        sys.stdout.write(f"{len(df)} tensors: no tensor's scale or zero point changed\n")
        return 0
    moved = int((df["rel_change"] > 0).sum())
    st = df["status"].value_counts().to_dict()
    sys.stdout.write(f"{len(df)} tensors: {moved} changed scale, {int(zp_moved.sum())} changed zero point, {int((~is_changed).sum())} unchanged, "
                     f"{int(st.get('shape_changed', 0))} changed shape (per-tensor <-> per-channel), "
                     f"{int(st.get('only_a', 0))} only in A, {int(st.get('only_b', 0))} only in B; "
                     f"the {min(args.top, len(changed))} that moved most:\n")
    sys.stdout.write(changed.head(args.top).to_string(index=False) + "\n")
    return 0


def _export(args: argparse.Namespace) -> int:
    from ..quantize.aimet import export_aimet

    rec = _load(args.record)
    _new_file(args.out, "--out", args.record)
    doc = export_aimet(rec, args.out)
    print(f"wrote {args.out}: {len(doc['activation_encodings'])} activation and {len(doc['param_encodings'])} parameter encodings")
    return 0


def _import(args: argparse.Namespace) -> int:
    import numpy as np

    from .._io import read_json
    from ..quantize.aimet import import_aimet

    rec = _load(args.record)
    got = {t.name: t for t in import_aimet(args.encodings, template=rec)}
    made_for = ((read_json(args.encodings, "AIMET encodings") or {}).get("quantizer_args") or {}).get("record_fingerprint")
    have = {t.name: t for t in rec.tensors}
    rows = []
    for name in sorted(set(got) | set(have)):
        a, b = have.get(name), got.get(name)
        same = a is not None and b is not None and a.dtype == b.dtype and a.zero_point == b.zero_point and \
            np.allclose(a.scale, b.scale, rtol=1e-6, atol=0)
        rows.append({"name": name, "in_record": a is not None, "in_encodings": b is not None, "same": bool(same)})
    summary = {"encodings": len(got), "record": len(have), "same": sum(r["same"] for r in rows),
               "differ": [r["name"] for r in rows if r["in_record"] and r["in_encodings"] and not r["same"]],
               "only_record": [r["name"] for r in rows if not r["in_encodings"]],
               "only_encodings": [r["name"] for r in rows if not r["in_record"]]}
    if made_for and made_for != rec.fingerprint:
        summary["note"] = f"the encodings were exported from record {made_for[:16]}, not {rec.fingerprint[:16]}"
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        if "note" in summary:
            print(f"note: {summary['note']}")
        print(f"{summary['encodings']} encodings, {summary['record']} record tensors: {summary['same']} identical "
              f"(dtype, zero point, scale within 1e-6 relative), {len(summary['differ'])} differ, "
              f"{len(summary['only_record'])} only in the record, {len(summary['only_encodings'])} only in the encodings")
        for name in summary["differ"][:20]:
            print(f"  differs: {name}")
    return 4 if summary["differ"] or summary["only_encodings"] else 0


def _replay(args: argparse.Namespace) -> int:
    from ..quantize import replay

    rec = _load(args.record)
    new = replay(rec, args.intake, out=args.out)
    same = new.quantized_model_digest == rec.quantized_model_digest
    print(f"wrote {args.out}/model_int8.onnx: {'byte-identical to' if same else 'DIFFERENT from'} the recorded model "
          f"({new.quantized_model_digest[:12]} vs {rec.quantized_model_digest[:12]})")
    return 0 if same else 4
