"""A tng controller as a process on this machine beside a BMv2 switch (tng_p4.bmv2), for end-to-end tests and the
benchmark: its configuration, start, kill and restart, tngctl, and reading what the switch holds over P4Runtime."""

from __future__ import annotations

import os
import selectors
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import finsy as fy
import grpc
from finsy.proto import p4r, p4r_grpc
from tng_p4.bmv2 import Bmv2

from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc

STARTUP_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 5.0
# How long after a restarted switch listens again the controller may take to find it: finsy retries a lost switch
# with gRPC's reconnect backoff (1 s, x1.6 per attempt, at most 15 s), each delay drawn +-20 % around its value, so
# a switch that was down long waits up to 18 s for the next attempt.
SWITCH_FOUND_WITHIN_S = 15.0 * 1.2


class TestbedError(RuntimeError):
    """A process of the testbed did not start or answer; the message ends with the tail of its log."""


def controller_config(switch: Bmv2, store: Path, topology: str = "", address: str | None = None) -> str:
    """A controller configuration (TOML) for one BMv2 switch named "lwip"; `topology` is TOML appended to its
    [[switch]] table (ports, routes, the helper); `address` replaces the switch's P4Runtime address (a proxy's)."""
    return (
        f'[api]\nlisten = "127.0.0.1:0"\n[store]\npath = "{store}"\n'
        f'[[switch]]\nname = "lwip"\naddress = "{address or switch.config.grpc_address}"\n'
        f'device_id = {switch.config.device_id}\nthrift = "{switch.config.thrift_address}"\n{topology}'
    )


def fleet_config(switches: Sequence[Bmv2], store: Path | Sequence[str], replica: str = "", store_keys: str = "") -> str:
    """A controller configuration (TOML) for several BMv2 switches without topology, named s1, s2, ...; `store` is
    the SQLite file, or etcd's client URLs for the replica named `replica` (`store_keys`: more [store] keys)."""
    if isinstance(store, Path):
        text = f'[api]\nlisten = "127.0.0.1:0"\n[store]\npath = "{store}"\n'
    else:
        urls = ", ".join(f'"{url}"' for url in store)
        text = f'[api]\nlisten = "127.0.0.1:0"\n[store]\netcd = [{urls}]\nreplica_name = "{replica}"\n{store_keys}'
    for number, switch in enumerate(switches, 1):
        text += (
            f'[[switch]]\nname = "s{number}"\naddress = "{switch.config.grpc_address}"\n'
            f'device_id = {switch.config.device_id}\nthrift = "{switch.config.thrift_address}"\n'
        )
    return text


@dataclass(slots=True)
class ControllerProcess:
    """`tngctl serve --config FILE` as a child process; its log (standard error) goes to `log_path`, appended."""

    config: Path
    log_path: Path
    address: str = ""
    _process: subprocess.Popen[str] | None = field(default=None, init=False)

    def start(self) -> str:
        """Starts the controller and returns the address of its policy API once it serves."""
        with self.log_path.open("a") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "tng_controller.tngctl", "serve", "--config", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        assert self._process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._process.stdout, selectors.EVENT_READ)
            ready = self._process.stdout.readline() if selector.select(STARTUP_TIMEOUT_S) else ""
        if " on " not in ready:
            self.kill()
            tail = "\n".join(self.log_path.read_text().splitlines()[-20:])
            raise TestbedError(f"the controller did not start ({ready.strip() or 'no ready line'})\n{tail}")
        self.address = ready.split(" on ", 1)[1].split(",", 1)[0]
        return self.address

    @property
    def pid(self) -> int:
        assert self._process is not None, "not started"
        return self._process.pid

    def kill(self) -> None:
        """SIGKILL: no cleanup, as when the machine loses power."""
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._reap()

    def stop(self) -> int:
        """SIGTERM and the exit status."""
        if self._process is None:
            return 0
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
        return self._reap()

    def _reap(self) -> int:
        assert self._process is not None and self._process.stdout is not None
        self._process.stdout.close()
        return self._process.wait()


def tngctl(address: str, *args: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Runs the operator's command line against the controller at `address`."""
    return subprocess.run(
        [sys.executable, "-m", "tng_controller.tngctl", "--server", address, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def canonical(entries: Iterable[p4r.TableEntry]) -> list[p4r.TableEntry]:
    """Table entries with their match fields by field id, sorted: equal sets of entries give equal lists."""
    result = []
    for entry in entries:
        copy = p4r.TableEntry()
        copy.CopyFrom(entry)
        fields = sorted(copy.match, key=lambda field: field.field_id)
        del copy.match[:]
        copy.match.extend(fields)
        result.append(copy)
    return sorted(result, key=lambda entry: entry.SerializeToString(deterministic=True))


def wait_until_connected(address: str, timeout_s: float = STARTUP_TIMEOUT_S) -> float:
    """Waits until the controller at `address` reports every switch CONNECTED (in sync and writable); returns the
    seconds that took."""
    start = time.monotonic()
    states: list[str] = []
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        while time.monotonic() - start < timeout_s:
            try:
                response = stub.ListSwitches(pb.ListSwitchesRequest(), timeout=READ_TIMEOUT_S)
            except grpc.RpcError as exc:
                states = [f"API: {exc.code().name}"]
            else:
                states = [f"{s.name}: {s.state} {s.last_error}".strip() for s in response.switches]
                if all(s.state == "CONNECTED" for s in response.switches):
                    return time.monotonic() - start
            time.sleep(0.05)
    raise TestbedError(f"switches not connected within {timeout_s:.0f} s: {'; '.join(states)}")


class SwitchReader:
    """Reads a switch over P4Runtime without arbitration, so it never competes with the controller for mastership."""

    def __init__(self, address: str, p4info: Path, device_id: int = 1) -> None:
        self._channel = grpc.insecure_channel(address)
        self._stub = p4r_grpc.P4RuntimeStub(self._channel)
        self._device_id = device_id
        self.schema = fy.P4Schema(p4info)

    def close(self) -> None:
        self._channel.close()

    def pipeline_cookie(self) -> int | None:
        """The cookie of the installed pipeline, None when there is none (or the switch does not answer)."""
        request = p4r.GetForwardingPipelineConfigRequest(
            device_id=self._device_id, response_type=p4r.GetForwardingPipelineConfigRequest.COOKIE_ONLY
        )
        try:
            response = self._stub.GetForwardingPipelineConfig(request, timeout=READ_TIMEOUT_S)
        except grpc.RpcError:
            return None
        return response.config.cookie.cookie if response.config.HasField("cookie") else None

    def entry_messages(self, *tables: str) -> list[p4r.TableEntry]:
        """Every entry of `tables` (all tables when none is named) as the switch encodes it, in canonical form."""
        ids = [self.schema.tables[name].id for name in tables] or [0]
        entities = [p4r.Entity(table_entry=p4r.TableEntry(table_id=table_id)) for table_id in ids]
        return canonical(entity.table_entry for entity in self._read(entities))

    def entry(self, key: fy.P4TableEntry) -> p4r.TableEntry | None:
        """The entry with the table, match and priority of `key` (its action is ignored), None when there is none."""
        message = key.encode_entry(self.schema)
        message.ClearField("action")
        try:
            found = self._read([p4r.Entity(table_entry=message)])
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return found[0].table_entry if found else None

    def encode(self, *entries: fy.P4TableEntry) -> list[p4r.TableEntry]:
        """`entries` encoded for this switch's pipeline, in the canonical form of `entry_messages`."""
        return canonical(entry.encode_entry(self.schema) for entry in entries)

    def entries(self, *tables: str) -> list[fy.P4TableEntry]:
        """Every entry of `tables`, decoded."""
        return [
            fy.P4TableEntry.decode(p4r.Entity(table_entry=entry), self.schema) for entry in self.entry_messages(*tables)
        ]

    def counter(self, name: str) -> dict[int, tuple[int, int]]:
        """Packets and bytes of every cell of an indexed counter, by index."""
        entity = p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=self.schema.counters[name].id))
        return {
            found.counter_entry.index.index: (
                found.counter_entry.data.packet_count,
                found.counter_entry.data.byte_count,
            )
            for found in self._read([entity])
        }

    def _read(self, entities: list[p4r.Entity]) -> list[p4r.Entity]:
        request = p4r.ReadRequest(device_id=self._device_id, entities=entities)
        return [entity for response in self._stub.Read(request, timeout=READ_TIMEOUT_S) for entity in response.entities]


def summary_ms(samples_s: Sequence[float]) -> dict[str, float]:
    """p50, p99 and max of `samples_s`, in milliseconds."""
    ms = sorted(sample * 1000 for sample in samples_s)
    p99 = statistics.quantiles(ms, n=100, method="inclusive")[98] if len(ms) > 1 else ms[0]
    return {"p50": round(statistics.median(ms), 3), "p99": round(p99, 3), "max": round(ms[-1], 3), "n": len(ms)}


class ProcessUsage:
    """CPU seconds and resident memory of a process, from /proc."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._tick = os.sysconf("SC_CLK_TCK")

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self._pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self._tick  # utime, stime

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self._pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
        return 0.0
