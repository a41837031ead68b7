"""Captures that name what is not theirs to read, or whose perf.data was crafted: a FIFO, a
device, a sparse file of 20 GB in place of a capture's files, a tracepoint's print format
nested past any stack, an AUX area record that asks for an exabyte, and random damage. A
report of each ends in a few seconds with exit 0 or 2 and one line, in bounded memory:
never a hang, a traceback, a crash or an exit 1 (which would read as a finding).

The perf.data files are a fixture's (recorded by perf), changed at the offsets its header
gives (perf's tools/perf/Documentation/perf.data-file-format.txt)."""

from __future__ import annotations

import os
import random
import resource
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, run_offcpu

FIXTURES = Path(__file__).parents[2] / "fixtures"
PERF_FIXTURE = FIXTURES / "lock_chain"
SPARSE_BYTES = 20 << 30
REPORT_TIMEOUT_S = 10
MAX_RSS_KB = 1 << 20  # 1 GiB: a report of a fixture takes ~100 MB; /dev/zero took 3.4 GB before
DATA_SECTION_AT = 40  # the header's (offset, size) of the data section
FEATURES_AT = 72  # the header's bitmap of the feature sections, 256 bits
TRACING_DATA = 1  # the feature bit of the tracepoints' formats
EVENT_DESC = 12  # the feature bit of the events' descriptions
EVENT_TYPES_AT = 56  # the header's (offset, size) of the event_types section, which perf left in 2012
AUXTRACE = 71
MUTATIONS = 40
SEED = 34


def report(capture: Path) -> tuple[subprocess.CompletedProcess[str], float, int]:
    """`offcpu report text CAPTURE`, how long it took, and at least its peak memory (KB): the
    largest of this process's children so far."""
    started = time.monotonic()
    result = run_offcpu("report", "text", str(capture), timeout=REPORT_TIMEOUT_S * 3)
    return result, time.monotonic() - started, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def assert_refused_promptly(capture: Path, *words: str) -> None:
    result, elapsed, _ = report(capture)
    assert elapsed < REPORT_TIMEOUT_S, f"took {elapsed:.1f} s"
    assert_one_line_error(result, *words)


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    """A copy of a capture recorded with perf, its perf.data included."""
    copy = tmp_path / "cap"
    shutil.copytree(PERF_FIXTURE, copy)
    return copy


def test_a_fifo_named_perf_data_is_refused_at_once(capture: Path) -> None:
    (capture / "perf.data").unlink()
    os.mkfifo(capture / "perf.data")
    assert_refused_promptly(capture, "perf.data")


def test_a_link_to_a_device_named_perf_data_is_never_read(capture: Path) -> None:
    (capture / "perf.data").unlink()
    (capture / "perf.data").symlink_to("/dev/zero")
    assert_refused_promptly(capture, "perf.data")


def test_a_sparse_file_of_20_gb_named_perf_data_is_refused_in_bounded_memory(capture: Path) -> None:
    with open(capture / "perf.data", "wb") as file:
        file.truncate(SPARSE_BYTES)
    result, elapsed, peak_kb = report(capture)
    assert elapsed < REPORT_TIMEOUT_S and peak_kb < MAX_RSS_KB, (elapsed, peak_kb)
    assert_one_line_error(result, "perf.data")


def test_metadata_sized_past_the_file_of_a_sparse_perf_data_is_refused_in_bounded_memory(capture: Path) -> None:
    """The header's feature sections claim 16 GB of a file made 20 GB by a hole after its data."""
    path = capture / "perf.data"
    data = bytearray(path.read_bytes())
    table = feature_table_at(data)
    struct.pack_into("<QQ", data, table, len(data) + 4096, 16 << 30)
    path.write_bytes(data)
    with open(path, "r+b") as file:
        file.truncate(SPARSE_BYTES)
    result, elapsed, peak_kb = report(capture)
    assert elapsed < REPORT_TIMEOUT_S and peak_kb < MAX_RSS_KB, (elapsed, peak_kb)
    assert_one_line_error(result, "perf.data")


def feature_table_at(data: bytes | bytearray) -> int:
    """Where the (offset, size) of each feature section are: right after the data section."""
    offset, size = struct.unpack_from("<QQ", data, DATA_SECTION_AT)
    return offset + size


def feature_bits(data: bytes | bytearray) -> int:
    return int.from_bytes(data[FEATURES_AT:FEATURES_AT + 32], "little")


def feature_section_entry(data: bytes | bytearray, feature: int) -> int:
    """Where the (offset, size) of `feature`'s section is: one entry per bit set, in bit order."""
    bits = feature_bits(data)
    assert bits >> feature & 1, f"no feature {feature} in this perf.data"
    before = bin(bits & ((1 << feature) - 1)).count("1")
    return feature_table_at(data) + 16 * before


def test_an_aux_area_record_asking_for_an_exabyte_is_refused(capture: Path) -> None:
    """The first record made an AUXTRACE whose trace (read after the record, by the size it
    gives) would be 2^60 bytes."""
    path = capture / "perf.data"
    data = bytearray(path.read_bytes())
    first, _ = struct.unpack_from("<QQ", data, DATA_SECTION_AT)
    size = struct.unpack_from("<H", data, first + 6)[0]
    assert size >= 16
    struct.pack_into("<I", data, first, AUXTRACE)
    struct.pack_into("<Q", data, first + 8, 1 << 60)
    path.write_bytes(data)
    assert_refused_promptly(capture, "perf.data", "AUX")


def test_events_described_the_old_way_by_a_terabyte_are_refused(capture: Path) -> None:
    """The events' descriptions (EVENT_DESC) taken out, and the event_types section, which the
    crate reads instead, made 1 TB long."""
    path = capture / "perf.data"
    data = bytearray(path.read_bytes())
    entry = feature_section_entry(data, EVENT_DESC)
    table_end = feature_table_at(data) + 16 * bin(feature_bits(data)).count("1")
    data[entry:table_end - 16] = data[entry + 16:table_end]  # the entries after it move up one
    data[FEATURES_AT + EVENT_DESC // 8] &= ~(1 << EVENT_DESC % 8) & 0xff
    struct.pack_into("<QQ", data, EVENT_TYPES_AT, 0, 1 << 40)
    path.write_bytes(data)
    assert_refused_promptly(capture, "perf.data", "event_types")


def test_a_print_format_nested_past_any_stack_is_no_crash(capture: Path) -> None:
    """sched_switch's print format, read for the names of prev_state, made 200,000
    parentheses deep (a new tracing data section at the end of the file)."""
    path = capture / "perf.data"
    data = bytearray(path.read_bytes())
    entry = feature_section_entry(data, TRACING_DATA)
    offset, size = struct.unpack_from("<QQ", data, entry)
    section = bytes(data[offset:offset + size])
    name = section.index(b"name: sched_switch\n")
    length = struct.unpack_from("<Q", section, name - 8)[0]
    text = section[name:name + length]
    line_start = text.index(b"print fmt: ")
    line_end = text.index(b"\n", line_start)
    nested = b"(" * 200_000 + b"1" + b")" * 200_000
    line = (b'print fmt: "", (REC->prev_state & ' + nested + b") ? __print_flags(REC->prev_state & " + nested
            + b', "|", { 0x01, "S" }) : "R"')
    text = text[:line_start] + line + text[line_end:]
    crafted = section[:name - 8] + struct.pack("<Q", len(text)) + text + section[name + length:]
    struct.pack_into("<QQ", data, entry, len(data), len(crafted))
    path.write_bytes(bytes(data) + crafted)
    result, elapsed, _ = report(capture)
    assert elapsed < REPORT_TIMEOUT_S * 3, f"took {elapsed:.1f} s"
    assert_exit_0_or_one_line(result)


def assert_exit_0_or_one_line(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode in (0, 2), (result.returncode, result.stderr[-2000:])
    if result.returncode == 2:
        assert_one_line_error(result)


def test_random_damage_to_the_header_and_records_is_exit_0_or_one_line(capture: Path) -> None:
    """Bytes changed at random (a fixed seed) where perf.data says what it holds: its header,
    the attributes, the feature table and the first records."""
    path = capture / "perf.data"
    original = path.read_bytes()
    data_start = struct.unpack_from("<Q", original, DATA_SECTION_AT)[0]
    table = feature_table_at(original)
    regions = [(0, 104), (104, data_start), (data_start, data_start + 4096), (table, table + 16 * 12)]
    chooser = random.Random(SEED)
    for _ in range(MUTATIONS):
        data = bytearray(original)
        start, end = chooser.choice(regions)
        for _ in range(chooser.randint(1, 4)):
            at = chooser.randrange(start, min(end, len(data)))
            data[at] = chooser.choice((0, 0xff, 0x80, chooser.randrange(256)))
        path.write_bytes(data)
        (capture / "model.json").unlink(missing_ok=True)
        result, elapsed, peak_kb = report(capture)
        assert elapsed < REPORT_TIMEOUT_S * 3 and peak_kb < MAX_RSS_KB, (elapsed, peak_kb)
        assert_exit_0_or_one_line(result)
