"""Which in-path switch a run uses. Today always Linux forwarding in the switch namespace; this says why not BMv2."""

from __future__ import annotations

from pathlib import Path

PIPELINE = "tng"  # p4src/v1model/tng.p4, the LWIP switch


def linux_forwarding_notice(repo: Path) -> str:
    """One line: Linux forwarding, and the reason BMv2 is not the switch of this run."""
    try:
        from tng_p4 import pipeline, toolchain
    except ImportError as err:
        return f"Linux forwarding (BMv2 not used: tng_p4 is not importable: {err})"
    reason = toolchain.detect().skip_reason("bmv2")
    if reason:
        return f"Linux forwarding (BMv2 not used: {reason.removeprefix('skipped: ')})"
    artifacts = pipeline.artifacts(PIPELINE, repo / pipeline.BUILD_DIR)
    missing = artifacts.missing()
    if missing:
        where = ", ".join(str(path.relative_to(repo)) for path in missing)
        return f"Linux forwarding (BMv2 not used: the {PIPELINE} pipeline is not built: {where} missing; `make p4`)"
    return "Linux forwarding (BMv2 and the tng pipeline are present, but tng-lab does not drive BMv2 yet)"
