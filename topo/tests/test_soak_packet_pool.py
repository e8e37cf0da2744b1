"""BMv2's packet pool as the soak counts it: the uprobe's address from binutils' output, the hits from tracefs, and
what the resources rule leaves out of the switch's RSS."""

from __future__ import annotations

import subprocess

import pytest
from tng_lab.soak.packet_pool import (
    DEFAULT_QUEUE,
    IN_FLIGHT,
    INPUT_BUFFER,
    OUTPUT_BUFFER,
    SYMBOL,
    CounterUnavailable,
    SwitchPool,
    buffer_bound,
    file_offset,
    profile_hits,
    symbol_address,
)

# As `nm -D` and `readelf -lW` print them for simple_switch_grpc (a PIE: its text segment's addresses are its offsets)
# and for a binary whose text segment is mapped away from its file offset.
NM = f"""                 U _ZNK2bm10PHVFactory5resetEv
0000000000158790 T {SYMBOL}
00000000001587f0 T _ZN2bm10PHVFactoryD1Ev
"""
READELF = """
Program Headers:
  Type           Offset   VirtAddr           PhysAddr           FileSiz  MemSiz   Flg Align
  PHDR           0x000040 0x0000000000000040 0x0000000000000040 0x0002d8 0x0002d8 R   0x8
  LOAD           0x000000 0x0000000000000000 0x0000000000000000 0x0c7ad0 0x0c7ad0 R   0x1000
  LOAD           0x0c8000 0x00000000000c8000 0x00000000000c8000 0x1504ad 0x1504ad R E 0x1000
  LOAD           0x292770 0x0000000000293770 0x0000000000293770 0x00ef50 0x01ac50 RW  0x1000
"""
SHIFTED = """
  LOAD           0x001000 0x0000000000401000 0x0000000000401000 0x002000 0x002000 R E 0x1000
"""
PROFILE = """  /usr/local/bin/simple_switch_grpc phv_create_41                                   357
  /usr/local/bin/simple_switch_grpc phv_create_4                                      12
"""


def test_the_uprobe_goes_at_the_symbols_file_offset() -> None:
    address = symbol_address(NM, SYMBOL)
    assert address == 0x158790
    assert file_offset(READELF, address) == 0x158790
    assert file_offset(SHIFTED, 0x401234) == 0x1234


def test_a_binary_without_the_symbol_or_segment_is_refused_by_name() -> None:
    with pytest.raises(CounterUnavailable, match=SYMBOL):
        symbol_address("                 U " + SYMBOL + "\n", SYMBOL)  # used, not defined: another binary's
    nm = subprocess.run(["nm", "-D", "/bin/true"], capture_output=True, text=True, check=True).stdout
    with pytest.raises(CounterUnavailable, match=SYMBOL):
        symbol_address(nm, SYMBOL)
    with pytest.raises(CounterUnavailable, match="0x900000"):
        file_offset(READELF, 0x900000)


def test_hits_are_read_for_this_soaks_own_event() -> None:
    assert profile_hits(PROFILE, "phv_create_41") == 357
    assert profile_hits(PROFILE, "phv_create_4") == 12
    with pytest.raises(CounterUnavailable, match="phv_create_5"):
        profile_hits(PROFILE, "phv_create_5")


def test_the_bound_is_what_simple_switchs_buffers_hold() -> None:
    assert (
        buffer_bound([100, 100, None, None, None]) == INPUT_BUFFER + OUTPUT_BUFFER + 200 + 3 * DEFAULT_QUEUE + IN_FLIGHT
    )


class Counts:
    def __init__(self) -> None:
        self.hits = 0

    def __call__(self) -> int:
        return self.hits


def test_the_pool_is_counted_per_life_and_measured_at_a_fill() -> None:
    counts = Counts()
    counts.hits = 40  # an earlier switch's
    pool = SwitchPool(counts, bound=500)
    pool.new_life()
    assert pool.phvs() == 0 and pool.held_bytes() is None  # nothing left out before a fill measured a PHV
    counts.hits = 45
    assert "too few" in pool.measure(0, 100_000, pool.phvs(), 100_500)
    assert pool.held_bytes() is None
    counts.hits = 240  # the fill made 195 more: 112 KiB each
    said = pool.measure(5, 100_000, pool.phvs(), 100_000 + 195 * 112)
    assert said == "195 PHVs made (200 held), 112 KiB each"
    assert pool.held_bytes() == 200 * 112 * 1024
    pool.measure(0, 0, 100, 100 * 130)  # a later fill's dearer PHVs: the cheaper figure stays, the least left out
    assert pool.kib_per_phv == 112
    counts.hits = 2040  # 2000 PHVs: more than the buffers hold, so packets that never leave; their RSS counts
    assert pool.held_bytes() == 500 * 112 * 1024
    pool.new_life()  # a restarted switch starts with an empty pool
    assert pool.phvs() == 0 and pool.held_bytes() == 0


def test_an_unreadable_count_leaves_nothing_out() -> None:
    def gone() -> int:
        raise CounterUnavailable("uprobe phv_create_41 is not in uprobe_profile")

    pool = SwitchPool(gone, bound=500, kib_per_phv=112)
    assert pool.phvs() is None
    assert pool.held_bytes() is None  # the whole RSS counts
