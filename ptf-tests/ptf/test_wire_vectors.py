"""PTF, tng_wire: one test per wire vector; valid ones are forwarded unchanged, malformed ones dropped and counted.

PTF has no parametrisation, so a test class per vector is generated: WireVector_<vector name>.
"""

from __future__ import annotations

from ptf.testutils import group
from tng_base import TngWireTest
from tng_p4.vectors import Vector, load_wire_vectors


def vector_test(vector: Vector) -> type[TngWireTest]:
    def runTest(self: TngWireTest) -> None:
        self.runVectorTest(vector)

    name = "WireVector_" + vector.name.replace("-", "_")
    attributes = {"runTest": runTest, "__doc__": vector.description, "__module__": __name__, "__qualname__": name}
    return group("tng_wire")(group("wire_vectors")(type(name, (TngWireTest,), attributes)))


# Module-level names are what PTF collects, so each class is bound to its own name and to nothing else.
globals().update({test.__name__: test for test in map(vector_test, load_wire_vectors())})
