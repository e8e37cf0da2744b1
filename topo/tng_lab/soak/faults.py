"""The faults of a soak, one small class each: `inject` makes it happen and returns the evidence that it did (or
raises NotInjected), `heal` undoes it and returns the evidence of that. A fault that cannot run on this lab says why
(`unavailable`), and the schedule leaves it out.

Link faults go through linkem's control socket (docs/linkem.md, "Control protocol"); the UE address change renumbers
the UE's interface, which the agents follow as a migration; the kills are SIGKILL to the process playing a role
and a restart; the partition blackholes the switch namespace's loopback traffic to and from BMv2's P4Runtime port."""

from __future__ import annotations

import random
import re
import time

from tng_lab import bmv2, linkem
from tng_lab.netns import LabError, sh
from tng_lab.soak.lab import PROXY_SERVER_PORT, SoakLab, wait_listening

OUTAGE = "loss=100%"
LOSS_BURST = "loss=5%"
DELAY_BURST = "delay=250ms"
FLAP_STEP_S = (0.5, 2.0)
RENUMBERED_HOST = 52  # the UE's temporary address on the renumbered link: 10.1.i.52
PARTITION_PREF = 10  # ip rule preferences of the partition; the local table moves behind them meanwhile
LOCAL_PREF = 100


class NotInjected(LabError):
    """The fault could not be made to happen; the message says why."""


class Fault:
    name = ""
    hold_s: tuple[float, float] = (5.0, 15.0)  # how long it lasts, drawn from the schedule's generator
    undo_failed_injection = True  # heal after an injection that failed half-way (a kill that failed did nothing)
    inject_takes_hold = False  # inject itself lasts the hold (flapping), rather than the runner waiting it out
    touches_switch = False  # it disturbs the controller or the switch: a policy churn check follows it

    @property
    def label(self) -> str:
        """The fault as the report names it: its kind and, for a link fault, the link."""
        link = getattr(self, "link", None)
        return f"{self.name} ({link})" if link else self.name

    def unavailable(self, soak: SoakLab) -> str | None:
        """Why this fault cannot run on this lab, or None."""
        return None

    def inject(self, soak: SoakLab, rng: random.Random, hold_s: float) -> str:
        raise NotImplementedError

    def heal(self, soak: SoakLab) -> str:
        raise NotImplementedError


def _specs(soak: SoakLab, link: str) -> dict[str, str]:
    reply = linkem.request(soak.plan.path(link).control, {"cmd": "get"})
    return {"ab": reply["ab"], "ba": reply["ba"]}


def _set(soak: SoakLab, link: str, direction: str, spec: str) -> None:
    linkem.request(soak.plan.path(link).control, {"cmd": "set", "dir": direction, "spec": spec})


def _dropped_loss(soak: SoakLab, link: str) -> int:
    counters = linkem.counters(soak.plan.path(link).control)
    return counters.down.dropped_loss + counters.up.dropped_loss


class _LinkSpecFault(Fault):
    """Changes one link's spec in both directions for a while, then puts back what was there."""

    spec = ""

    def __init__(self, link: str) -> None:
        self.link = link
        self._before: dict[str, str] = {}
        self._dropped = 0

    def inject(self, soak: SoakLab, rng: random.Random, hold_s: float) -> str:
        self._before = _specs(soak, self.link)
        self._dropped = _dropped_loss(soak, self.link)
        _set(soak, self.link, "both", self.spec)
        now = _specs(soak, self.link)
        key = self.spec.split("=")[0]
        if not all(f"{self.spec}" in now[d].split(",") for d in ("ab", "ba")):
            raise NotInjected(f"linkem of {self.link} does not show {self.spec} ({now}); {key} unchanged")
        return f"{self.link}: linkem now {now['ab']} down, {now['ba']} up"

    def heal(self, soak: SoakLab) -> str:
        lost = _dropped_loss(soak, self.link) - self._dropped
        for direction, spec in self._before.items():
            _set(soak, self.link, direction, spec)
        now = _specs(soak, self.link)
        if now != self._before:
            raise LabError(f"linkem of {self.link} did not take its spec back: {now} instead of {self._before}")
        return f"{self.link}: spec restored; {lost} packets dropped by linkem's loss meanwhile"


class LinkDown(_LinkSpecFault):
    name = "link-down"
    spec = OUTAGE


class LossBurst(_LinkSpecFault):
    name = "loss-burst"
    spec = LOSS_BURST


class DelayBurst(_LinkSpecFault):
    name = "delay-burst"
    spec = DELAY_BURST


class BothLinksFlap(Fault):
    """Both links go down and up at random instants for the whole hold (each state lasts FLAP_STEP_S), both at
    once part of the time; `inject` does the flapping, `heal` leaves both up."""

    name = "links-flap"
    hold_s = (8.0, 16.0)
    inject_takes_hold = True

    def __init__(self, links: tuple[str, str]) -> None:
        self.links = links
        self._before: dict[str, dict[str, str]] = {}

    def inject(self, soak: SoakLab, rng: random.Random, hold_s: float) -> str:
        self._before = {link: _specs(soak, link) for link in self.links}
        deadline = time.monotonic() + hold_s
        changes, both_down = 0, 0
        while time.monotonic() < deadline:
            down = {link for link in self.links if rng.random() < 0.6}
            for link in self.links:
                _set(soak, link, "both", OUTAGE if link in down else "loss=0%")
            changes += 1
            both_down += len(down) == len(self.links)
            time.sleep(rng.uniform(*FLAP_STEP_S))
        return f"{changes} link states over {hold_s:.1f} s, {both_down} of them with both links down"

    def heal(self, soak: SoakLab) -> str:
        for link, specs in self._before.items():
            for direction, spec in specs.items():
                _set(soak, link, direction, spec)
        return "both links back to their specs"


class UeAddressChange(Fault):
    """The UE's address on one link is replaced by another in the same subnet (a renumbering, as after a radio
    re-attaches); `heal` renumbers back. tng migrates its channels; a kernel TCP socket bound to the old address
    loses its connection (its next round starts over)."""

    name = "ue-address-change"
    hold_s = (10.0, 25.0)

    def __init__(self, link: str) -> None:
        self.link = link

    def _addresses(self, soak: SoakLab) -> tuple[str, str, str, str]:
        path = soak.plan.path(self.link)
        new = re.sub(r"\.\d+$", f".{RENUMBERED_HOST}", path.ue_address)
        return path.ue_address, new, path.ue_if, str(path.table)

    def _owned(self, soak: SoakLab) -> set[str]:
        _, _, interface, _ = self._addresses(soak)
        listed = sh(["ip", "-n", soak.plan.ue_ns, "-o", "-4", "addr", "show", "dev", interface])
        return set(re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", listed))

    def _renumber(self, soak: SoakLab, old: str, new: str) -> str:
        _, _, interface, table = self._addresses(soak)
        ns = soak.plan.ue_ns
        sh(["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.conf.{interface}.promote_secondaries=1"])
        sh(["ip", "-n", ns, "addr", "add", f"{new}/24", "dev", interface])
        if f"from {new} lookup {table}" not in sh(["ip", "-n", ns, "rule", "show"]):
            sh(["ip", "-n", ns, "rule", "add", "from", new, "table", table])
        sh(["ip", "-n", ns, "addr", "del", f"{old}/24", "dev", interface])
        owned = self._owned(soak)
        if new not in owned or old in owned:
            raise NotInjected(f"{interface} holds {sorted(owned)} after renumbering {old} -> {new}")
        return f"{self.link}: UE address {old} -> {new} ({interface} now holds {', '.join(sorted(owned))})"

    def inject(self, soak: SoakLab, rng: random.Random, hold_s: float) -> str:
        old, new, _, _ = self._addresses(soak)
        return self._renumber(soak, old, new)

    def heal(self, soak: SoakLab) -> str:
        old, new, _, _ = self._addresses(soak)
        return self._renumber(soak, new, old)


class _Kill(Fault):
    """SIGKILL to the process of `role`; `heal` starts its successor."""

    role = ""
    hold_s = (1.0, 5.0)
    undo_failed_injection = False

    def inject(self, soak: SoakLab, rng: random.Random, hold_s: float) -> str:
        if self.role not in soak.registry.roles():
            raise NotInjected(f"no {self.role} process is registered (it exited before)")
        pid = soak.kill(self.role)
        return f"{self.role} pid {pid} killed (SIGKILL) and gone"

    def heal(self, soak: SoakLab) -> str:
        pid = self._restart(soak)
        return f"{self.role} restarted as pid {pid}"

    def _restart(self, soak: SoakLab) -> int:
        raise NotImplementedError


class KillPerfServer(_Kill):
    name = "kill-tng-server"
    role = "perf-server"

    def _restart(self, soak: SoakLab) -> int:
        return soak.restart_perf_server()


class KillProxyServer(_Kill):
    """The `tng serve` behind `tng proxy`: its successor knows none of the proxy's connections, so the proxy must
    connect again (and the HTTP bodies fetched after that must still be right)."""

    name = "kill-tng-serve"
    role = "tng-serve"

    def heal(self, soak: SoakLab) -> str:
        said = super().heal(soak)
        wait_listening(soak.plan.server_ns, "u", PROXY_SERVER_PORT, "tng serve")
        return f"{said}, listening on UDP port {PROXY_SERVER_PORT}"

    def _restart(self, soak: SoakLab) -> int:
        return soak.restart(self.role)


def _needs_bmv2(soak: SoakLab) -> str | None:
    return None if soak.choice.bmv2 else "needs BMv2 and the controller (this run uses Linux forwarding)"


class _KillSwitchSide(_Kill):
    """A kill on the switch's side (BMv2 or its controller): healed once the switch is CONNECTED again."""

    touches_switch = True
    reconnected = ""  # what happened between the restart and CONNECTED

    def unavailable(self, soak: SoakLab) -> str | None:
        return _needs_bmv2(soak)

    def heal(self, soak: SoakLab) -> str:
        said = super().heal(soak)
        waited = soak.wait_connected()
        filled = self._after_connected(soak)
        soak.registry.mark_ready(self.role)
        return f"{said}; {self.reconnected}switch CONNECTED after {waited} s{filled}"

    def _after_connected(self, soak: SoakLab) -> str:
        return ""


class KillController(_KillSwitchSide):
    name = "kill-controller"
    role = "controller"

    def _restart(self, soak: SoakLab) -> int:
        return soak.restart_controller()


class KillBmv2(_KillSwitchSide):
    name = "kill-bmv2"
    role = "bmv2"
    reconnected = "the controller pushed the pipeline again, "

    def _restart(self, soak: SoakLab) -> int:
        return soak.restart_bmv2()

    def _after_connected(self, soak: SoakLab) -> str:
        """A new BMv2 starts with an empty packet pool: its warm-up fills it, as the first one's did."""
        return f"; its buffers filled once: {soak.fill_switch_buffers()}"


class KillHelper(_Kill):
    """The VISIBLE retransmission helper on its switch port: while it is gone the controller must tell the switch
    (helper_down: no boosting, no local retransmission) and, once it is back, turn VISIBLE on under a new epoch."""

    touches_switch = True
    name = "kill-helper"
    role = "helper"

    def unavailable(self, soak: SoakLab) -> str | None:
        if (no_switch := _needs_bmv2(soak)) is not None:
            return no_switch
        if soak.plan.helper_port is None:
            return (
                "the scenario runs the VISIBLE helper inside the controller (helper = 'cpu'), not as a process of "
                "its own; kill-controller kills it with the controller"
            )
        return None

    def inject(self, soak: SoakLab, rng: random.Random, hold_s: float) -> str:
        said = super().inject(soak, rng, hold_s)
        return f"{said}; the controller took VISIBLE off: helper {soak.wait_helper(down=True)}"

    def heal(self, soak: SoakLab) -> str:
        said = super().heal(soak)
        return f"{said}; the controller put VISIBLE back: helper {soak.wait_helper(down=False)}"

    def _restart(self, soak: SoakLab) -> int:
        return soak.restart_helper()


class ControllerSwitchPartition(Fault):
    """Packets to and from BMv2's P4Runtime port on the switch namespace's loopback are blackholed (policy routing
    rules ahead of the local table): the controller and the switch stay up but cannot talk."""

    name = "controller-switch-partition"
    touches_switch = True
    hold_s = (8.0, 20.0)

    def unavailable(self, soak: SoakLab) -> str | None:
        return _needs_bmv2(soak)

    def _rules(self, soak: SoakLab, action: str) -> None:
        ns = soak.plan.switch_ns
        port = str(bmv2.GRPC_PORT)
        blackholes = [("dport", PARTITION_PREF), ("sport", PARTITION_PREF + 1)]
        if action == "add":
            for selector, pref in blackholes:
                sh(["ip", "-n", ns, "rule", "add", "pref", str(pref), "ipproto", "tcp", selector, port, "blackhole"])
            sh(["ip", "-n", ns, "rule", "add", "pref", str(LOCAL_PREF), "lookup", "local"])
            sh(["ip", "-n", ns, "rule", "del", "pref", "0", "lookup", "local"])
        else:
            sh(["ip", "-n", ns, "rule", "add", "pref", "0", "lookup", "local"])
            sh(["ip", "-n", ns, "rule", "del", "pref", str(LOCAL_PREF), "lookup", "local"])
            for _, pref in blackholes:
                sh(["ip", "-n", ns, "rule", "del", "pref", str(pref)])

    def inject(self, soak: SoakLab, rng: random.Random, hold_s: float) -> str:
        if not soak.p4runtime_reachable():
            raise NotInjected("BMv2's P4Runtime port is unreachable before the partition")
        self._rules(soak, "add")
        if soak.p4runtime_reachable():
            raise NotInjected("BMv2's P4Runtime port is still reachable with the blackhole rules in place")
        return f"P4Runtime port {bmv2.GRPC_PORT} unreachable in the switch namespace (connect times out)"

    def heal(self, soak: SoakLab) -> str:
        self._rules(soak, "del")
        if not soak.p4runtime_reachable():
            raise LabError("BMv2's P4Runtime port is still unreachable after the partition healed")
        return f"P4Runtime reachable again; switch CONNECTED after {soak.wait_connected()} s"


def every_fault(soak: SoakLab) -> list[Fault]:
    """One instance of every fault on this lab (the links of its LWIP pair)."""
    lwip = soak.plan.lwip
    assert lwip is not None  # the soak scenario names its LTE and Wi-Fi links
    links = (lwip.lte, lwip.wifi)
    return [
        *(LinkDown(link) for link in links),
        *(DelayBurst(link) for link in links),
        *(LossBurst(link) for link in links),
        UeAddressChange(lwip.wifi),
        BothLinksFlap(links),
        KillBmv2(),
        KillController(),
        KillHelper(),
        KillPerfServer(),
        ControllerSwitchPartition(),
        KillProxyServer(),
    ]


KINDS = tuple(
    kind.name
    for kind in (
        LinkDown,
        DelayBurst,
        LossBurst,
        UeAddressChange,
        BothLinksFlap,
        KillBmv2,
        KillController,
        KillHelper,
        KillPerfServer,
        ControllerSwitchPartition,
        KillProxyServer,
    )
)  # what `--faults` may name
