"""Deployment bundle: record + thresholds + note + golden samples in one verifiable archive.

``build_bundle`` writes ``dist/quantkit-bundle-<sha256[:16]>.tar`` (named by its content) and ``dist/bundle.json``;
``verify_bundle`` checks it on the target's runtimes and returns a :class:`VerificationReport`. Modules:
:mod:`.manifest` (the format), :mod:`.archive` (deterministic tar, safe extraction), :mod:`.golden` (golden data),
:mod:`.decisions` (the task adapter call and decision agreement), :mod:`.build`, :mod:`.verify` and :mod:`.target`
(per-runtime checks). See docs/deploy.md for the target side.
"""

from .archive import (
    ExtractedBundle,
    MemberDigest,
    member_name_problem,
    safe_extract,
    write_tar,
)
from .build import BundleConfig, BundleResult, build_bundle
from .manifest import BundleManifest
from .target import RuntimeRun
from .verify import (
    Check,
    VerificationReport,
    VerifyConfig,
    resolve_bundle,
    verify_bundle,
)

__all__ = [
    "BundleConfig",
    "BundleManifest",
    "BundleResult",
    "Check",
    "ExtractedBundle",
    "MemberDigest",
    "RuntimeRun",
    "VerificationReport",
    "VerifyConfig",
    "build_bundle",
    "member_name_problem",
    "resolve_bundle",
    "safe_extract",
    "verify_bundle",
    "write_tar",
]
