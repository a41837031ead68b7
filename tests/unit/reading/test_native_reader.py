"""The native reader on committed captures, against perf script on the same files, and on bad input."""

from __future__ import annotations

import itertools
import random
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from offcpu._core import prev_state_name
from offcpu.errors import OffcpuError
from offcpu.reading import symbols
from offcpu.reading.native_reader import NativeReader, open_perf_data, unsupported
from offcpu.reading.symbols import demangle, without_parameters
from tests.fixtures import HERE, capture_info
from tests.native_compare import KeepingSink, first_difference, native_events
from tests.perf_data import dumped_counts, event_counts

NATIVE_FIXTURES = ("native_futex_pid", "native_cpp_command")
FUZZ_SECONDS = 3.0


@pytest.mark.parametrize("name", NATIVE_FIXTURES)
def test_events_equal_perf_script(perf: str, name: str) -> None:
    assert first_difference(perf, HERE / name / "perf.data") is None


@pytest.mark.parametrize("name", sorted(path.parent.name for path in HERE.glob("*/perf.data")))
def test_records_are_counted_as_perf_counts_them(perf: str, name: str) -> None:
    path = HERE / name / "perf.data"
    counts = open_perf_data(path).record_counts()
    assert counts["samples"] == sum(event_counts(path).values())
    assert counts["samples"] > 0 or capture_info(name).samples == 0  # (deadlock_pid, stuck_pid: nothing ran)
    dumped = dumped_counts(path)
    assert counts["switch_records"] == dumped.switch_records
    assert counts["lost_events"] == max(dumped.lost, dumped.lost_samples)


def test_a_fixture_has_every_kind_of_event() -> None:
    events, _ = native_events(HERE / "native_cpp_command" / "perf.data")
    kinds = {event[0] for event in events}
    assert kinds >= {"sched_switch", "sched_waking", "switch_in", "switch_out", "fork", "exit", "comm"}


def test_an_exited_threads_last_switch_is_read_as_its_own() -> None:
    # Given a whole machine's capture while a program's threads exit: perf gives an exited
    # thread's last sched_switch the tid -1 (perf script shows ":-1  20592/-1 ...
    # prev_pid=2453 ... prev_state=X" at 604.482865821)
    events, reader = native_events(HERE / "exits_all" / "perf.data")
    switches = {(event[1], event[4]): event for event in events if event[0] == "sched_switch"}
    # Then it is the exited thread's, read whole
    assert reader.skipped == 0
    assert switches[(604_482_865_821, 2453)][3:8] == (20592, 2453, 2433, "thread_per_requ", "X")
    assert not any(tid == -1 for _, tid in switches)


def test_each_program_begun_in_a_process_has_the_maps_of_its_generation() -> None:
    # Given tar_gzip_command, as perf script --show-task-events shows it: tar (24723) exec'd
    # (its generation 1) forks 24725 (1, with tar's maps), which execs sh (2) and forks 24726
    # (1, with sh's), which execs gzip (2)
    records = open_perf_data(HERE / "tar_gzip_command" / "perf.data").task_records()
    begun = [record[1:] for record in records if record[0] == "begin"]
    assert begun == [(24723, 1, (24723, 0)), (24725, 1, (24723, 1)), (24725, 2, (24725, 1)),
                     (24726, 1, (24725, 2)), (24726, 2, (24726, 1))]
    # Then each program's own maps are filed under its generation, after those it kept
    maps = symbols.TaskHistory.replay(records).mappings
    paths = {key: [Path(mapping.path).name for mapping in mapped] for key, mapped in maps.items()}
    tar = ["tar", "ld-linux-x86-64.so.2", "[vdso]", "libacl.so.1.1.2301", "libselinux.so.1", "libc.so.6",
           "libpcre2-8.so.0.11.2"]
    sh = [*tar, "dash", "ld-linux-x86-64.so.2", "[vdso]", "libc.so.6"]
    assert paths == {(24723, 1): tar, (24725, 1): tar, (24725, 2): sh, (24726, 1): sh,
                     (24726, 2): [*sh, "gzip", "ld-linux-x86-64.so.2", "[vdso]", "libc.so.6"]}


def test_prev_state_is_read_from_the_format() -> None:
    fmt = ('"prev_state=%s%s", (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002) + 1) << 1) - 1)) ? '
           '__print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002) + 1) << 1) - 1), "|", '
           '{ 0x00000001, "S" }, { 0x00000002, "D" }) : "R", REC->prev_state & (((0x00000000 | 0x00000001 | '
           '0x00000002) + 1) << 1) ? "+" : ""')
    assert [prev_state_name(fmt, state) for state in (0, 1, 2, 3, 8)] == ["R", "S", "D", "S|D", "R"]


def _masked(mask: str) -> str:
    return (f'"prev_state=%s", (REC->prev_state & ({mask})) ? __print_flags(REC->prev_state & ({mask}), "|", '
            '{ 0x00000001, "S" }) : "R"')


def test_the_mask_is_arithmetic_and_nothing_else() -> None:
    # ((0x1 | 0x2) + 1) << 1 is 8: a bit no flag names is shown as a number, a bit outside the mask not at all
    assert [prev_state_name(_masked("((0x1 | 0x2) + 1) << 1"), state) for state in (8, 16)] == ["0x8", "R"]
    assert prev_state_name(_masked("__import__('os')"), 1) is None


def test_parameters_are_dropped_as_perf_drops_them() -> None:
    # perf 6.1 shows, for instance, shop::Basket<std::pair<int, long> >::fill (see test_events_equal_perf_script)
    assert without_parameters("shop::Basket<std::pair<int, long> >::fill(int)") == \
        "shop::Basket<std::pair<int, long> >::fill"
    assert without_parameters("void shop::take<int>(std::vector<int, std::allocator<int> >&) const") == \
        "shop::take<int>"
    assert without_parameters("main::{lambda()#1}::operator()() const") == "main::{lambda()#1}::operator()"


def test_a_thunk_keeps_its_parameters_as_perf_shows_it() -> None:
    # perf 6.1 showed "non-virtual thunk to LIRGenerator::block_do(BlockBegin*)" in HotSpot's libjvm
    # (fixture java_monitor_sleep_twin), as c++filt -p does: a special name is printed whole
    assert demangle("_ZThn8_N12LIRGenerator8block_doEP10BlockBegin") == \
        "non-virtual thunk to LIRGenerator::block_do(BlockBegin*)"
    assert demangle("_ZN12LIRGenerator8block_doEP10BlockBegin") == "LIRGenerator::block_do"


def test_rust_names_lose_their_hash_as_perf_shows_them() -> None:
    # (perf 6.1 printed libbpf_rs::ringbuf::RingBufferBuilder::build for offcpu's own core)
    assert demangle("_ZN9libbpf_rs7ringbuf17RingBufferBuilder5build17h0123456789abcdefE") == \
        "libbpf_rs::ringbuf::RingBufferBuilder::build"
    # and without the suffix of a function LLVM made local (perf 6.1, py-spy's hashbrown in a whole-machine recording)
    assert demangle("_ZN9hashbrown3raw21RawTable$LT$T$C$A$GT$14reserve_rehash17h7188ab7e5ad9d507E.llvm."
                    "4164894986928040906") == "hashbrown::raw::RawTable<T,A>::reserve_rehash"


def test_a_rust_name_the_demangler_cannot_finish_is_kept_and_prints_nothing(capsys) -> None:
    # a v0 name with a `dyn for<'a>` binder, of rustc's own library (woken by a recorded thread while
    # rustc built beside it): the demangler gave up and printed "<alloc::raw_vec::RawVec<...dyn for<'?"
    # on stdout, before a report's json
    name = ("_RNvMs3_NtCslNYArtu3iFV_5alloc7raw_vecINtB5_6RawVecINtNtB7_5boxed3BoxDG_INtNtNtCsgEmfK2I1SDS_4core3ops8"
            "function2FnTINtNtNtCsdadwybgsbvk_12rustc_middle2ty7context6TyCtxtL0_EEEp6OutputIBN_DINtNtCsa4mAjElOM1d_"
            "10rustc_lint6passes12LateLintPassL0_EEL0_ENtNtCs3MG2ofusW15_21rustc_data_structures6marker7DynSyncNtB3Z_"
            "7DynSendEL_EE8grow_oneB33_")
    assert demangle(name) == name
    assert capsys.readouterr().out == ""


def test_a_plt_stub_is_named_after_its_function_demangled() -> None:
    # (perf 6.1 showed rocksdb::DBImpl::WriteContext::~WriteContext@plt in RocksDB's writers)
    assert demangle("_ZN7rocksdb6DBImpl12WriteContextD1Ev@plt") == "rocksdb::DBImpl::WriteContext::~WriteContext@plt"
    assert demangle("@plt") == "@plt" and demangle("write@plt") == "write@plt"


def test_a_report_of_a_c_programs_capture_loads_no_demangler_nor_the_lock_table(tmp_path: Path) -> None:
    # Given a capture of a C program (no mangled name in its stacks): its folded report needs no
    # demangler (cxxfilt runs ldconfig twice as it loads: 10-20 ms of a report) and no lock table
    capture = tmp_path / "cap"
    shutil.copytree(HERE / "native_futex_pid", capture)
    listing = "import sys; from offcpu.cli import main; main(sys.argv[1:]); print(*sys.modules, file=sys.stderr)"
    done = subprocess.run([sys.executable, "-c", listing, "report", "folded", str(capture)], capture_output=True,
                          text=True, check=True)
    assert "futex_contention" in done.stdout
    assert set(done.stderr.split()).isdisjoint({"cxxfilt", "rust_demangler", "offcpu.diagnosis.locktable"})


def test_plt_stubs_are_named_in_relocation_order_as_perf_61_names_them() -> None:
    # Given this process's libc, whose .rela.plt ends in IFUNC relocations that name no symbol:
    # perf 6.1 names the stub after .plt's first (the resolver's) by each relocation in turn,
    # "realloc@plt", ..., and "@plt" for an IFUNC's (perf script showed "@plt" in a thread_churn run)
    libc = next(line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                if line.split()[-1].endswith("/libc.so.6"))
    relocations = subprocess.run(["readelf", "-rW", libc], capture_output=True, text=True, check=True).stdout
    table = relocations.split("'.rela.plt'", 1)[1].splitlines()[2:]
    expected = []
    for line in itertools.takewhile(str.strip, table):
        fields = line.split()
        expected.append("@plt" if fields[2] == "R_X86_64_IRELATIVE" else fields[4].split("@")[0] + "@plt")
    sections = subprocess.run(["readelf", "-SW", libc], capture_output=True, text=True, check=True).stdout
    if "@plt" not in expected or " .plt.sec " in sections:  # (perf 6.1 reads no .plt.sec: a CET build's)
        pytest.skip("this libc has no unnamed PLT stubs, or has .plt.sec: Debian's has the first and not the second")
    plt_offset = int(next(line for line in sections.splitlines() if " .plt " in line).split("]", 1)[1].split()[3], 16)
    loaded = symbols.load_symbols(libc, None)
    assert loaded is not None
    named = [loaded.find(plt_offset + 16 * (number + 1), symbols.demangle) for number in range(len(expected))]
    assert [symbol.name if symbol else None for symbol in named] == expected


def test_a_file_of_the_other_byte_order_is_unsupported(tmp_path: Path) -> None:
    copy = tmp_path / "perf.data"
    data = bytearray((HERE / "native_futex_pid" / "perf.data").read_bytes())
    data[:8] = data[:8][::-1]
    copy.write_bytes(bytes(data))
    reason = unsupported(copy)
    assert reason is not None and "byte order" in reason
    with pytest.raises(OffcpuError, match="byte order"):
        NativeReader(copy)


@pytest.mark.parametrize("content", [b"", b"PERFILE2", b"\x1f\x8b\x08\x00 a gzip file" * 10, bytes(range(256)) * 40],
                         ids=["empty", "magic only", "another tool's file", "random"])
def test_what_is_not_perf_data_is_one_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "perf.data"
    path.write_bytes(content)
    with pytest.raises(OffcpuError) as raised:
        NativeReader(path)
    assert "\n" not in raised.value.format_message()


def test_a_cut_file_is_one_error(tmp_path: Path) -> None:
    original = (HERE / "native_futex_pid" / "perf.data").read_bytes()
    for cut in (100, 1000, len(original) // 2, len(original) - 9):
        path = tmp_path / "perf.data"
        path.write_bytes(original[:cut])
        with pytest.raises(OffcpuError, match="perf.data"):
            NativeReader(path)


def _read_damaged(path: Path) -> None:
    """Read as a report would: every event, then the chains' names."""
    try:
        reader = NativeReader(path)
        sink = KeepingSink()
        reader.read(sink)
        reader.stacks({event[-1] for event in sink.events if event[0] in ("sched_switch", "sched_waking")})
    except OffcpuError:
        pass


def test_fuzzed_files_raise_nothing_but_offcpu_errors(tmp_path: Path) -> None:
    """Random cuts and bit flips of a capture, and random bytes, for a few seconds: no other exception."""
    original = (HERE / "native_futex_pid" / "perf.data").read_bytes()
    chooser = random.Random(13)
    path = tmp_path / "perf.data"
    deadline = time.monotonic() + FUZZ_SECONDS
    tried = 0
    while time.monotonic() < deadline:
        damaged = bytearray(original)
        for _ in range(chooser.randint(1, 20)):
            damaged[chooser.randrange(len(damaged))] ^= 1 << chooser.randrange(8)
        if chooser.random() < 0.3:
            damaged = damaged[:chooser.randrange(len(damaged))]
        if chooser.random() < 0.05:
            damaged = bytearray(chooser.randbytes(chooser.randrange(2000)))
        path.write_bytes(bytes(damaged))
        _read_damaged(path)
        tried += 1
    assert tried > 10


def _record_offsets(data: bytes, record_type: int) -> list[int]:
    """Where the records of a type are, by the sizes in their headers (perf.data-file-format.txt)."""
    start, size = struct.unpack_from("<QQ", data, 40)  # the data section
    offset, found = start, []
    while offset < start + size:
        kind, _, length = struct.unpack_from("<IHH", data, offset)
        if kind == record_type:
            found.append(offset)
        offset += length
    return found


def test_unknown_record_types_are_counted(tmp_path: Path) -> None:
    """A record of a type no perf writes (its header rewritten) is skipped and counted."""
    source = HERE / "native_cpp_command" / "perf.data"
    reader = NativeReader(source)
    data = bytearray(source.read_bytes())
    exit_record = _record_offsets(bytes(data), 4)[0]  # an EXIT record
    data[exit_record] = 60  # unknown kernel record type
    copy = tmp_path / "perf.data"
    copy.write_bytes(bytes(data))
    damaged = NativeReader(copy)
    assert damaged.skipped == reader.skipped + 1
    events, _ = native_events(copy)
    original, _ = native_events(source)
    assert len([e for e in events if e[0] == "exit"]) == len([e for e in original if e[0] == "exit"]) - 1


@pytest.mark.parametrize(("lost", "lost_samples"), [(1000, 77), (77, 1000)])
def test_lost_events_are_what_the_records_of_losses_carry(perf: str, tmp_path: Path, lost: int,
                                                          lost_samples: int) -> None:
    # Given a perf.data whose first EXIT record is rewritten as a LOST record of `lost` events
    # (its id where the exit's pids were) and its second as LOST_SAMPLES of `lost_samples`
    source = HERE / "native_cpp_command" / "perf.data"
    data = bytearray(source.read_bytes())
    first, second = _record_offsets(bytes(data), 4)[:2]
    struct.pack_into("<I", data, first, 2)  # PERF_RECORD_LOST: header, id, lost, sample_id
    struct.pack_into("<Q", data, first + 16, lost)
    struct.pack_into("<I", data, second, 13)  # PERF_RECORD_LOST_SAMPLES: header, lost, sample_id
    struct.pack_into("<Q", data, second + 8, lost_samples)
    copy = tmp_path / "perf.data"
    copy.write_bytes(bytes(data))
    dumped = dumped_counts(copy)
    assert (dumped.lost_records, dumped.lost, dumped.lost_samples) == (1, lost, lost_samples)  # as perf reads them
    # Then the events lost are the larger of the two: each sees the same losses, and may miss some
    counts = open_perf_data(copy).record_counts()
    assert counts["lost_events"] == 1000
    assert counts["samples"] == open_perf_data(source).record_counts()["samples"]
    assert open_perf_data(copy).unknown_records() == open_perf_data(source).unknown_records()


def test_kallsyms_hidden_by_kptr_restrict_names_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user from whom kernel.kptr_restrict hides kernel addresses reads /proc/kallsyms with
    every address 0: the kernel's frames stay unnamed (the scan of 0-address symbols took a minute)."""
    data = open_perf_data(HERE / "native_futex_pid" / "perf.data")
    recorded = next(build_id for _, build_id, _, kernel in data.build_ids() if kernel)
    hidden = tmp_path / "kallsyms"
    hidden.write_text("0000000000000000 T _text\n0000000000000000 t do_one_initcall\n0000000000000000 T schedule\n")
    monkeypatch.setattr(symbols, "PROC_KALLSYMS", hidden)
    monkeypatch.setattr(symbols, "running_kernel_build_id", lambda: recorded)
    assert symbols.kernel_symbols_for(None, recorded) is None
    shown = tmp_path / "shown"
    shown.write_text("ffffffff81000000 T _text\nffffffff81000100 T schedule\n")
    monkeypatch.setattr(symbols, "PROC_KALLSYMS", shown)
    table = symbols.kernel_symbols_for(None, recorded)
    assert table is not None
    found = table.find(0xffffffff81000104)
    assert found is not None and found.name == "schedule"


@pytest.mark.parametrize("first_line", [b"ffffffff81000000 T _text", b"# build-id 4a5", b"# build-id zz", b"\xff\xfe"])
def test_a_saved_kallsyms_without_its_build_id_line_is_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 first_line: bytes) -> None:
    # Given a saved kallsyms whose first line is not '# build-id HEX', and a running kernel other than the recorded
    data = open_perf_data(HERE / "native_futex_pid" / "perf.data")
    recorded = next(build_id for _, build_id, _, kernel in data.build_ids() if kernel)
    monkeypatch.setattr(symbols, "running_kernel_build_id", lambda: b"another kernel")
    saved = tmp_path / "kallsyms"
    saved.write_bytes(first_line + b"\nffffffff81000000 T _text\nffffffff81000100 T schedule\n")
    # Then it is not used (nothing says which kernel it is of), and nothing else can be
    assert symbols.kernel_symbols_for(saved, recorded) is None
    # While with the line offcpu writes, naming the recorded kernel, it is
    saved.write_bytes(b"# build-id " + recorded.hex().encode() + b"\nffffffff81000000 T _text\n")
    table = symbols.kernel_symbols_for(saved, recorded)
    assert table is not None and table.find(0xffffffff81000004) is not None


def test_a_build_id_longer_than_perf_writes_is_a_counted_skip(tmp_path: Path) -> None:
    """An MMAP2 record whose build id says it has more than 20 bytes is damaged: counted, not a crash."""
    source = HERE / "exits_all" / "perf.data"  # recorded with build ids in its MMAP2 records
    data = bytearray(source.read_bytes())
    with_build_id = [at for at in _record_offsets(bytes(data), 10)
                     if struct.unpack_from("<H", data, at + 4)[0] & 1 << 14]  # misc: PERF_RECORD_MISC_MMAP_BUILD_ID
    data[with_build_id[0] + 8 + 32] = 21  # the build id's size, after the header, pid, tid, address, length, offset
    copy = tmp_path / "perf.data"
    copy.write_bytes(bytes(data))
    assert NativeReader(copy).skipped == NativeReader(source).skipped + 1


def test_a_name_longer_than_a_page_is_read_whole(tmp_path: Path) -> None:
    # Given a program with a function whose name is 5,000 characters (a C++ template's can pass 4,096)
    name = "f" + "x" * 4999
    source = tmp_path / "long.c"
    source.write_text(f"void {name}(void) {{}}\nint main(void) {{ {name}(); return 0; }}\n")
    binary = tmp_path / "long"
    subprocess.run(["gcc", "-O0", "-o", str(binary), str(source)], check=True)
    symbols_out = subprocess.run(["nm", str(binary)], capture_output=True, text=True, check=True).stdout
    address = next(int(line.split()[0], 16) for line in symbols_out.splitlines() if line.split()[-1] == name)
    segments = subprocess.run(["readelf", "-lW", str(binary)], capture_output=True, text=True, check=True).stdout
    offset = next(address - int(fields[2], 16) + int(fields[1], 16)
                  for fields in (line.split() for line in segments.splitlines() if line.strip().startswith("LOAD"))
                  if int(fields[2], 16) <= address < int(fields[2], 16) + int(fields[4], 16))
    # When it is looked up at its offset in the file
    loaded = symbols.load_symbols(str(binary), None)
    assert loaded is not None
    found = loaded.find(offset, symbols.demangle)
    # Then it has its whole name
    assert found is not None and found.name == name
