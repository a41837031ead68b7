"""The native reader on fresh recordings of the examples, against perf script on the same files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from offcpu.machine.running_kernel import save_kernel_symbols
from offcpu.reading.native_reader import NativeReader, unsupported
from offcpu.reading.symbols import demangle, load_symbols
from tests.conftest import OFFCPU, example, run_offcpu
from tests.native_compare import CHAINED, KeepingSink, first_difference, model_difference, native_events, script_events


def _record(directory: Path, *arguments: str, env: dict[str, str] | None = None) -> Path:
    result = run_offcpu("record", "--backend", "perf", "-o", str(directory), *arguments, env=env)
    assert result.returncode == 0, result.stderr
    return directory / "perf.data"


def test_a_command_reads_as_perf_script_shows_it(perf: str, example_capture) -> None:  # type: ignore[no-untyped-def]
    assert first_difference(perf, example_capture("thread_churn") / "perf.data") is None


def test_a_whole_machine_reads_as_perf_script_shows_it(perf: str, tmp_path: Path) -> None:
    program = subprocess.Popen([str(example("mmap_contention")), "-t", "4", "-s", "10"], stdout=subprocess.DEVNULL)
    try:
        perf_data = _record(tmp_path / "cap", "-a", "-d", "0.3")
    finally:
        program.kill()
        program.wait()
    assert first_difference(perf, perf_data) is None


def _read_slice(reader: NativeReader, time_slice: tuple[int, int]) -> list[tuple]:
    sink = KeepingSink()
    reader.read(sink, time_slice)
    return [event for event in sink.events if time_slice[0] <= event[1] <= time_slice[1]]


def test_slices_read_apart_make_the_whole(perf: str, example_capture) -> None:  # type: ignore[no-untyped-def]
    capture = example_capture("futex_contention")
    info = json.loads((capture / "capture.json").read_text())
    reader = NativeReader(capture / "perf.data")
    whole, _ = native_events(capture / "perf.data")
    slices = reader.time_slices(info["window_start_ns"], info["window_end_ns"], 2)
    parts = [_read_slice(reader, time_slice) for time_slice in slices]
    for (first, last), part in zip(slices, parts, strict=True):
        assert part == [event for event in whole if first <= event[1] <= last]
        assert len(part) > 0.25 * len(whole)  # slices of the file's records, not of its time
    chains = {event[-1] for part in parts for event in part if event[0] in CHAINED}
    named = reader.stacks(chains)
    _, expected_stacks = script_events(perf, capture / "perf.data")
    assert set(named.values()) <= set(expected_stacks.values())


def _with_new_build_id(source: Path, target: Path) -> bytes:
    """A copy of an ELF file with a build id of its own (so that no cache knows it)."""
    data = bytearray(source.read_bytes())
    sections = subprocess.run(["readelf", "-SW", str(source)], capture_output=True, text=True, check=True).stdout
    note = next(line for line in sections.splitlines() if " .note.gnu.build-id " in line)
    offset, size = (int(field, 16) for field in note.split("]", 1)[1].split()[3:5])
    new_id = bytes(reversed(data[offset + size - 20:offset + size]))
    data[offset + size - 20:offset + size] = new_id
    target.write_bytes(bytes(data))
    target.chmod(0o755)
    return new_id


@pytest.mark.parametrize("change", ["removed", "replaced"])
def test_a_binary_gone_since_the_recording_is_said_and_shown_by_offset(perf: str, tmp_path: Path,
                                                                       change: str) -> None:
    binary = tmp_path / "futex_copy"
    build_id = _with_new_build_id(example("futex_contention"), binary)
    perf_data = _record(tmp_path / "cap", "-d", "1", "--", str(binary), "-t", "4", "-s", "0.5")
    perf_cache = Path(os.environ.get("PERF_BUILDID_DIR") or Path.home() / ".debug")
    shutil.rmtree(perf_cache / ".build-id" / build_id.hex()[:2] / build_id.hex()[2:], ignore_errors=True)
    if change == "replaced":  # as a package upgrade does: the new file is renamed over the old
        shutil.copy(example("idle_pool"), tmp_path / "new")
        (tmp_path / "new").rename(binary)
    else:
        binary.unlink()
    events, reader = native_events(perf_data)
    stacks = reader.stacks({event[-1] for event in events if event[0] in CHAINED})
    assert [sentence for sentence in reader.binary_notes if str(binary) in sentence] and \
        len(reader.binary_notes) == len(set(reader.binary_notes))
    frames = {frame for stack in stacks.values() for frame in stack.frames}
    assert any(frame.startswith("[futex_copy+0x") for frame in frames)
    if change == "removed":  # perf script shows [unknown] there, and nothing else differs
        assert first_difference(perf, perf_data) is None


def _replace_by_a_copy(binary: Path) -> None:
    """The file replaced by a copy of itself (a new inode: what another machine with the same
    package, or a reinstall, has), renamed over it as a package upgrade does."""
    shutil.copy(binary, binary.with_name("same"))
    binary.with_name("same").rename(binary)


def _named_frames(perf_data: Path) -> tuple[set[str], NativeReader]:
    """Every frame the native reader names in perf.data's call chains, and the reader."""
    events, reader = native_events(perf_data)
    stacks = reader.stacks({event[-1] for event in events if event[0] in CHAINED})
    return {frame for stack in stacks.values() for frame in stack.frames}, reader


def test_the_same_file_elsewhere_names_its_frames(perf: str, tmp_path: Path) -> None:
    # Given a recording of a program, and then the program's file replaced by a copy of itself
    # (a new inode: what another machine with the same package, or a reinstall, has)
    binary = tmp_path / "futex_copy"
    shutil.copy(example("futex_contention"), binary)
    perf_data = _record(tmp_path / "cap", "-d", "1", "--", str(binary), "-t", "4", "-s", "0.5")
    _replace_by_a_copy(binary)
    # Then perf.data holds its build id (MMAP2 records, --buildid-mmap), by which the copy is
    # known to be the same file: its frames are named, and nothing is said missing
    frames, reader = _named_frames(perf_data)
    assert "worker" in frames and not any(frame.startswith("[futex_copy+0x") for frame in frames)
    assert not [sentence for sentence in reader.binary_notes if str(binary) in sentence]


# The frames a thread's stack begins in: a stack that reaches one was unwound whole
THREAD_ROOTS = ("_start", "clone3", "clone", "__clone")


def _folded(capture: Path, reader: str) -> dict[str, int]:
    """The folded report of a capture by one reader: µs by stack."""
    result = run_offcpu("report", "folded", "--reader", reader, str(capture))
    assert result.returncode == 0, result.stderr
    return {stack: int(us) for stack, us in (line.rsplit(" ", 1) for line in result.stdout.splitlines())}


def _unwound_whole_us(folded: dict[str, int]) -> int:
    """The time in stacks that reach the frame their thread began in (after its name, and the
    marker of a thread asleep all the recording)."""
    return sum(us for stack, us in folded.items() if set(stack.split(";")[1:3]) & set(THREAD_ROOTS))


def _dwarf_recording_of_running(program: str, capture: Path) -> Path:
    """A second's --call-graph dwarf recording of an example at work (by its pid)."""
    running = subprocess.Popen([str(example(program)), "-t", "4", "-s", "3"], stdout=subprocess.DEVNULL,
                               cwd=capture.parent)
    try:
        time.sleep(0.5)
        return _record(capture, "--call-graph", "dwarf", "--pid", str(running.pid), "-d", "1").parent
    finally:
        running.kill()
        running.wait()


@pytest.mark.parametrize("program", ["cpp_names", "rocksdb_writers", "offcpu"])
def test_dwarf_stacks_are_unwound_by_the_core_as_far_as_by_perf_script(tmp_path: Path, cpp_capture: Path,
                                                                         program: str) -> None:
    # Given a --call-graph dwarf recording: templated C++ through libstdc++; RocksDB's writers at
    # work (from its start, the first calls through the PLT go through ld.so's lazy binding, whose
    # frame framehop cannot unwind: 327 µs of 7.3 s ended a frame short of perf script's); offcpu
    # reading a capture (CPython, and its core linked by lld, whose code is mapped from a page
    # of the segment before it)
    if program == "cpp_names":
        capture = cpp_capture
    elif program == "offcpu":
        # (its symbols bound at its start: a preemption in ld.so's lazy binding, which framehop cannot
        # unwind, ends a stack short, and one that lands there during CPython's start is a share of it;
        # 16 KiB of stack copied: from the sleep of the core's pair, whose frame is 3.5 KiB with the
        # core's crates inlined, perf's default 8 KiB ends a frame or two short of _start)
        capture = _record(tmp_path / "cap", "--call-graph", "dwarf,16384", "--", str(OFFCPU), "report", "folded",
                          "--reader", "native", "--time", "0,1", str(cpp_capture),
                          env={**os.environ, "LD_BIND_NOW": "1"}).parent
    else:
        capture = _dwarf_recording_of_running(program, tmp_path / "cap")
    assert unsupported(capture / "perf.data") is None
    # Then the core unwinds its user stacks: the same time in all, and at least as much of it in
    # stacks unwound whole as perf script (which unwinds them with libdw)
    native, script = _folded(capture, "native"), _folded(capture, "perf-script")
    assert sum(native.values()) == sum(script.values())
    if program == "offcpu":
        # (but in __vfork, where a thread waits for the child that shares its stack to exec: the
        # child has written over the stack the sample copied, and framehop stops there)
        native, script = ({stack: us for stack, us in folded.items() if ";__vfork;" not in stack}
                          for folded in (native, script))
    assert _unwound_whole_us(native) >= _unwound_whole_us(script) > 0.5 * sum(script.values())


def test_compressed_records_read_as_perf_script_shows_them(perf: str, tmp_path: Path) -> None:
    # Given a recording of a program by perf with its records compressed (perf record -z), its events
    # told apart as offcpu's are (PERF_SAMPLE_IDENTIFIER)
    compressed = tmp_path / "compressed.data"
    subprocess.run([perf, "record", "-z", "-q", "-g", "--sample-identifier", "--switch-events", "-o", str(compressed),
                    "-e", "sched:sched_switch", "-e", "sched:sched_waking", "--", str(example("futex_contention")),
                    "-t", "4", "-s", "0.3"], check=True, capture_output=True)
    # Then the core decompresses them: the same events as perf script, read in any slices (perf
    # writes no build ids with -z: the kernel's frames are named from its symbols saved now; the
    # crate orders events of the same nanosecond on different CPUs otherwise than perf does here)
    assert unsupported(compressed) is None
    assert first_difference(perf, compressed, save_kernel_symbols(tmp_path), ties_in_any_order=True) is None
    reader = NativeReader(compressed)
    whole, _ = native_events(compressed)
    slices = reader.time_slices(whole[0][1], whole[-1][1], 2)
    assert [event for time_slice in slices for event in _read_slice(reader, time_slice)] == whole


def test_piped_files_are_unsupported(perf: str, tmp_path: Path) -> None:
    piped = tmp_path / "piped.data"
    with piped.open("wb") as output:
        subprocess.run([perf, "record", "-q", "-o", "-", "-e", "sched:sched_switch", "--", "sleep", "0.05"],
                       check=True, stdout=output, stderr=subprocess.DEVNULL)
    assert "pipe" in (unsupported(piped) or "")


@pytest.mark.parametrize("name", ["futex_contention", "mmap_contention", "thread_churn"])
def test_both_readers_make_the_same_model_of_a_fresh_recording(perf: str, example_capture, name: str) -> None:  # type: ignore[no-untyped-def]
    capture = example_capture(name)
    for slices in (1, 2):
        difference = model_difference(capture, slices)
        assert difference is None, f"{difference}; first event apart: {first_difference(perf, capture / 'perf.data')}"


# One thread reads the clock through the vdso in a loop while others sleep: the timers that
# wake the sleepers often interrupt it there, so the wakers' stacks end in the vdso.
CLOCK_READER = """
import threading, time
def sleeper():
    for _ in range(400):
        time.sleep(0.001)
def clock_reader():
    start = time.monotonic()
    while time.monotonic() - start < 1.0:
        pass
threads = [threading.Thread(target=sleeper) for _ in range(4)] + [threading.Thread(target=clock_reader)]
[thread.start() for thread in threads]
[thread.join() for thread in threads]
"""


def test_vdso_frames_are_named_and_the_vdso_travels(tmp_path: Path) -> None:
    # Given a Python program recorded while it reads the clock (perf.data names the vdso
    # without a build id, and perf's own build-id pass, which would cache it, is skipped)
    capture = tmp_path / "cap"
    _record(capture, "--", "python3", "-c", CLOCK_READER)
    # When it is reported on
    folded = run_offcpu("report", "folded", "--waker", str(capture))
    text = run_offcpu("report", "text", str(capture))
    # Then the vdso's frames have their names, and nothing is said gone or changed
    assert folded.returncode == 0 and text.returncode == 0, folded.stderr + text.stderr
    assert "__vdso_clock_gettime" in folded.stdout, folded.stdout
    assert "[vdso+0x" not in folded.stdout and "gone or changed" not in text.stdout
    # And the capture keeps the vdso's image, by which they are named on another machine
    saved = load_symbols(str(capture / "vdso"), None)
    table = subprocess.run(["readelf", "-sW", str(capture / "vdso")], capture_output=True, text=True, check=True).stdout
    value = next(int(fields[1], 16) for fields in (line.split() for line in table.splitlines())
                 if fields and fields[-1].split("@")[0] == "__vdso_clock_gettime")  # (a name@@VERSION)
    found = saved.find(value, demangle) if saved is not None else None  # (the vdso's code is at its offsets)
    assert found is not None and found.name == "__vdso_clock_gettime"


@pytest.mark.parametrize("copied", [False, True])
def test_a_file_without_a_build_id_is_named_from_its_path(recording_perf: str, tmp_path: Path, copied: bool) -> None:
    # Given a program recorded by perf without build ids in its MMAP2 records (perf before
    # 5.12 records none), and then, or not, replaced by a copy of itself (another inode)
    binary = tmp_path / "futex_copy"
    shutil.copy(example("futex_contention"), binary)
    perf_data = tmp_path / "perf.data"
    subprocess.run([recording_perf, "record", "-q", "-g", "-e", "sched:sched_switch", "-o", str(perf_data), "--",
                    str(binary), "-t", "4", "-s", "0.3"], check=True, capture_output=True)
    if copied:
        _replace_by_a_copy(binary)
    # When its stacks are named
    frames, reader = _named_frames(perf_data)
    # Then its frames are named from the file at the path, as perf script names them, and
    # only a copy is said to be unchecked (once, with its path)
    assert "worker" in frames and not any(frame.startswith("[futex_copy+0x") for frame in frames)
    said = [sentence for sentence in reader.binary_notes if str(binary) in sentence]
    assert len(said) == (1 if copied else 0) and "gone or changed" not in " ".join(said), reader.binary_notes
    assert first_difference(recording_perf, perf_data) is None
