"""Deployment bundle: record + thresholds + note + golden samples in one verifiable archive.

``build_bundle`` writes ``dist/quantkit-bundle-<sha256[:16]>.tar`` (named by its content) and
``dist/bundle.json``; ``verify_bundle`` checks it on the target and returns a
:class:`VerificationReport`. See docs/deploy.md for the target side.
"""

from .archive import (
    ExtractedBundle,
    MemberDigest,
    member_name_problem,
    safe_extract,
    write_tar,
)
from .build import BundleConfig, BundleResult, build_bundle
from .verify import (
    CapabilityProfile,
    Check,
    LayerDivergence,
    VerificationReport,
    VerifyConfig,
    load_profile,
    resolve_bundle,
    resolve_target,
    verify_bundle,
)

__all__ = [
    "BundleConfig",
    "BundleResult",
    "CapabilityProfile",
    "Check",
    "ExtractedBundle",
    "LayerDivergence",
    "MemberDigest",
    "VerificationReport",
    "VerifyConfig",
    "build_bundle",
    "load_profile",
    "member_name_problem",
    "resolve_bundle",
    "resolve_target",
    "safe_extract",
    "verify_bundle",
    "write_tar",
]
