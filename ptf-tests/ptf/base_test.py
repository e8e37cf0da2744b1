"""PTF plumbing: P4Runtime through finsy (pipeline push, P4Info name lookups), writes undone after every test."""

from __future__ import annotations

from pathlib import Path

import ptf
import ptf.testutils as testutils
from ptf import config
from ptf.base_tests import BaseTest
from tng_p4.p4rt import CounterValue, SyncSwitch


class P4RuntimeTest(BaseTest):
    """Connects to the switch named by the test params grpcaddr, p4info, config and device_id."""

    def setUp(self) -> None:
        super().setUp()
        self.dataplane = ptf.dataplane_instance
        self.dataplane.flush()
        self.switch = SyncSwitch(
            self.test_param("grpcaddr"),
            p4info=Path(self.test_param("p4info")),
            p4blob=Path(self.test_param("config")),
            device_id=int(self.test_param("device_id")),
        )
        self.switch.open()
        self.addCleanup(self.switch.close)

    def test_param(self, name: str) -> str:
        value = testutils.test_param_get(name)
        if value is None:
            self.fail(f"test parameter {name!r} missing (run through python -m tng_p4.run_ptf)")
        return str(value)

    def swports(self) -> list[int]:
        """The switch ports PTF is attached to, ascending."""
        return sorted(port for _device, port in config["port_map"])

    def counters(self, name: str) -> dict[int, CounterValue]:
        """Every cell of the indexed counter `name` (a P4Info name), checked to exist in the P4Info."""
        size = self.switch.schema.counters[name].size
        cells = self.switch.counters(name)
        self.assertEqual(len(cells), size, f"counter {name} returned {len(cells)} of {size} cells")
        return cells
