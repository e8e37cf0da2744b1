"""The controller's policy tables as BMv2 holds them, read over P4Runtime inside the switch namespace (its gRPC
server is only reachable there) by one reader process kept open for the whole soak (a fresh Python with finsy per
read costs seconds of CPU): each line on its stdin asks for one read, answered by one line of JSON,
`[[table, [match value hex, ...]], ...]`, or `{"error": ...}` while the switch does not answer.

The soak uses it to check that a deleted policy leaves no entry behind once the controller has reconciled."""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
from pathlib import Path

import finsy as fy
import grpc
from finsy.proto import p4r, p4r_grpc
from tng_controller.compile import POLICY_TABLES

from tng_lab.netns import LabError

READ_TIMEOUT_S = 5.0


@functools.cache
def _table_names(p4info: Path) -> dict[int, str]:
    schema = fy.P4Schema(p4info)
    return {schema.tables[name].id: name for name in POLICY_TABLES}


def read(address: str, p4info: Path, device_id: int) -> list[tuple[str, list[str]]]:
    names = _table_names(p4info)
    entities = [p4r.Entity(table_entry=p4r.TableEntry(table_id=table_id)) for table_id in names]
    entries = []
    with grpc.insecure_channel(address) as channel:
        request = p4r.ReadRequest(device_id=device_id, entities=entities)
        for response in p4r_grpc.P4RuntimeStub(channel).Read(request, timeout=READ_TIMEOUT_S):
            for entity in response.entities:
                entry = entity.table_entry
                values = []
                for match in entry.match:
                    kind = match.WhichOneof("field_match_type")
                    values.append(getattr(match, kind).value.hex() if kind in ("exact", "ternary", "lpm") else "")
                entries.append((names[entry.table_id], values))
    return entries


class EntryReader:
    """The reader process in `namespace`; `read` asks it for the entries now."""

    def __init__(self, namespace: str, address: str, p4info: Path, device_id: int, log: Path) -> None:
        argv = ["ip", "netns", "exec", namespace, sys.executable, "-m", "tng_lab.soak.switch_entries"]
        argv += ["--address", address, "--p4info", str(p4info), "--device-id", str(device_id)]
        self._log = log.open("wb")
        self._process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, start_new_session=True
        )

    def read(self) -> list[tuple[str, list[str]]]:
        """The entries now; raises LabError when the switch does not answer or the reader is gone."""
        assert self._process.stdin is not None and self._process.stdout is not None
        try:
            self._process.stdin.write("read\n")
            self._process.stdin.flush()
            line = self._process.stdout.readline()
        except OSError as err:
            raise LabError(f"the switch entry reader is gone: {err}") from err
        if not line:
            raise LabError("the switch entry reader exited")
        answer = json.loads(line)
        if isinstance(answer, dict):
            raise LabError(f"switch entries: {answer['error']}")
        return [(str(table), [str(value) for value in values]) for table, values in answer]

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_lab.soak.switch_entries", description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="the switch's P4Runtime address")
    parser.add_argument("--p4info", type=Path, required=True)
    parser.add_argument("--device-id", type=int, default=1)
    args = parser.parse_args(argv)
    for _ in sys.stdin:
        try:
            answer: object = read(args.address, args.p4info, args.device_id)
        except grpc.RpcError as err:
            answer = {"error": f"{args.address}: {err.code().name}: {err.details()}"}
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
