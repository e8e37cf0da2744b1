"""`make soak`: tng-lab's LWIP topology under every kind of traffic at once and a seeded schedule of faults, with
invariants checked all along (docs/soak.md)."""
