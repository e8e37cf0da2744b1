"""Generates the committed Python code of the policy API (tng_controller.pb) from its proto, or checks it is current."""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

PACKAGE_DIR = Path(__file__).resolve().parent
PROTO_ROOT = PACKAGE_DIR.parent / "proto"
PROTO = "tng/policy/v1/policy.proto"
OUTPUT_DIR = PACKAGE_DIR / "pb"
OUTPUTS = ("policy_pb2.py", "policy_pb2.pyi", "policy_pb2_grpc.py")
# protoc imports the messages by their proto path (tng.policy.v1); the committed copy lives in a package of its own.
_ABSOLUTE_IMPORT = re.compile(r"^from tng\.policy\.v1 import ", re.MULTILINE)


def generate() -> dict[str, str]:
    """Runs protoc on the proto and returns the text of each generated file, imports made package-relative."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            PROTO,
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {PROTO_ROOT / PROTO}")
        out = Path(tmp) / Path(PROTO).parent
        return {name: _ABSOLUTE_IMPORT.sub("from . import ", (out / name).read_text()) for name in OUTPUTS}


def stale(generated: dict[str, str], directory: Path = OUTPUT_DIR) -> list[str]:
    """Names of the files in `directory` that differ from `generated` (or are missing)."""
    return [
        name
        for name, text in generated.items()
        if not (directory / name).is_file() or (directory / name).read_text() != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_controller.protogen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report files that differ; exit 1 if any does")
    args = parser.parse_args(argv)
    generated = generate()
    differing = stale(generated)
    if args.check:
        for name in differing:
            print(f"protogen: {OUTPUT_DIR / name} differs from {PROTO} (run 'python -m tng_controller.protogen')")
        return 1 if differing else 0
    for name in differing:
        (OUTPUT_DIR / name).write_text(generated[name])
        print(f"protogen: wrote {OUTPUT_DIR / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
