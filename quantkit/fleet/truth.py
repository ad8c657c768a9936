"""Score a fleet check's alerts against planted truth (the demo fleet's ``truth.json``).

An event's camera is *found* when it alerts with ``since`` between the event's start date and
``tolerance_days`` later. An alert is *right* when its camera has an event that started on or before
``since``; every other alert (a stable camera, or before the event) is a false alert.

* precision = right alerts / alerts; recall = found (camera, event) pairs / all pairs (1.0 when empty);
* per event: recall = its cameras found / its cameras; precision = its cameras alerting on time /
  its cameras alerting at all; ``max_delay_days`` = the largest ``since - start`` among found cameras.
"""

from __future__ import annotations

import datetime as _dt
import os
from typing import Any

from .._io import read_json
from ..errors import InputFileError


def _day(iso: str) -> _dt.date:
    return _dt.date.fromisoformat(iso[:10])


def evaluate(check: Any, truth: str | os.PathLike[str], *, tolerance_days: int = 1) -> dict[str, Any]:
    """Precision and recall of ``check``'s alerts (a :class:`~quantkit.fleet.check.FleetCheck`) against ``truth``.

    Raises:
        InputFileError: the truth file is missing or lacks ``events``.
    """
    doc = read_json(truth, "planted truth")
    try:
        events = [(e["name"], e["kind"], list(e["cameras"]), _day(e["start_date"])) for e in doc["events"]]
    except (KeyError, TypeError, ValueError) as e:
        raise InputFileError(f"{truth}: not a fleet truth file (bad or missing field {e}); re-render the demo fleet") from None
    since = {c.camera: _day(c.since) for c in check.cameras if c.status == "alert" and c.since}
    out_events, found_pairs, pairs = [], 0, 0
    right: set[str] = set()
    for name, kind, cams, start in events:
        found = {c: (since[c] - start).days for c in cams if c in since and 0 <= (since[c] - start).days <= tolerance_days}
        alerting = [c for c in cams if c in since]
        right |= {c for c in alerting if since[c] >= start}
        pairs += len(cams)
        found_pairs += len(found)
        out_events.append({"name": name, "kind": kind, "cameras": cams, "start_date": start.isoformat(), "found": sorted(found),
                           "missed": sorted(set(cams) - set(found)), "early": sorted(c for c in alerting if since[c] < start),
                           "recall": len(found) / len(cams) if cams else 1.0,
                           "precision": (len(found) / len(alerting)) if alerting else 1.0,
                           "max_delay_days": max(found.values()) if found else None})
    false = sorted(c for c in since if c not in right)
    return {"tolerance_days": tolerance_days, "alerts": len(since), "false_alerts": false,
            "precision": (len(since) - len(false)) / len(since) if since else 1.0,
            "recall": found_pairs / pairs if pairs else 1.0, "events": out_events,
            "stable_alerting": sorted(c for c in since if c in set(doc.get("stable", [])))}
