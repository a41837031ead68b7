//! The unwinder against perf's own DWARF unwinding of the same capture (the reference):
//! for every sample, the user frames that both have are the same addresses, and the
//! unwinder reaches as deep as perf.
//!
//! The captures are recordings made here (`perf record --call-graph dwarf`, as root;
//! scripts/setup builds the examples); `$OFFCPU_DWARF_CAPTURE` names another capture to
//! compare.
//! Without perf the tests are skipped, except in CI (CI=true), where they fail.

use std::collections::{HashMap, HashSet};
use std::env;
use std::fs::{self, File};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{self, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use _core::perf::unwind::{Unwinder, UserRegs};
use linux_perf_data::linux_perf_event_reader::constants::{
    PERF_REG_X86_BP, PERF_REG_X86_IP, PERF_REG_X86_SP,
};
use linux_perf_data::linux_perf_event_reader::{EventRecord, Mmap2FileId};
use linux_perf_data::{PerfFileReader, PerfFileRecord};

const PROT_EXEC: u32 = 4;
/// Addresses from here up are the kernel's.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;
/// How the examples run: 4 threads, with 1 MiB stacks for thread_churn, 0.3 s.
const EXAMPLE_ARGS: [&str; 6] = ["-t", "4", "-S", "1", "-s", "0.3"];

/// A sample's thread and time, in nanoseconds: how perf script's lines are matched.
type SampleKey = (i32, u64);

#[test]
fn unwinds_user_stacks_as_perf_does() {
    let given = env::var_os("OFFCPU_DWARF_CAPTURE").filter(|path| !path.is_empty());
    if let Some(capture) = given {
        assert_unwinds_as_perf(Path::new(&capture));
        return;
    }
    let Some(scratch) = Scratch::new() else {
        return;
    };
    let capture = scratch.0.join("perf.data");
    // thread_churn: stacks through glibc (no frame pointers), threads that come and go.
    record(&capture, &example("thread_churn"), &EXAMPLE_ARGS);
    assert_unwinds_as_perf(&capture);
}

/// A program whose own code has no `.eh_frame` tables (only `.debug_frame`) and no
/// frame pointers is unwound from its `.debug_frame`: perf 6.1 stops at its frames, this
/// unwinder goes on to the C library's frames that perf finds in the usual build.
#[test]
fn unwinds_code_described_only_by_debug_frame() {
    let Some(scratch) = Scratch::new() else {
        return;
    };
    let program = scratch.0.join("thread_churn");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/thread_churn.c");
    let status = Command::new("cc")
        .args(["-O2", "-g", "-pthread", "-fomit-frame-pointer"])
        .args([
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
            "-o",
        ])
        .arg(&program)
        .arg(&source)
        .status()
        .expect("cc runs (scripts/setup installs it)");
    assert!(
        status.success(),
        "{} does not build: {status}",
        source.display()
    );
    let capture = scratch.0.join("perf.data");
    record(&capture, &program, &EXAMPLE_ARGS);

    assert_unwinds_as_perf(&capture);

    // perf stops at the program's frames; what is past them, in the C library, is known
    // from perf's stacks of the example built as usual (with .eh_frame).
    let usual = scratch.0.join("usual.data");
    let usual_program = example("thread_churn");
    record(&usual, &usual_program, &EXAMPLE_ARGS);
    let is_example = |frame: &Frame| frame.file.ends_with("thread_churn");
    let known_callers: HashSet<Vec<u64>> = perf_script_user_frames(&usual)
        .values()
        .filter_map(|perf| callers_of_program(perf, is_example))
        .collect();
    let (ours, _) = unwind_all(&capture);
    let callers: Vec<Vec<u64>> = ours
        .values()
        .filter_map(|ours| callers_of_program(ours, is_example))
        .collect();
    assert!(!callers.is_empty(), "no stack went past the program's code");
    let unknown: Vec<_> = callers
        .iter()
        .filter(|c| !known_callers.contains(*c))
        .collect();
    assert!(
        unknown.is_empty(),
        "callers of the program perf does not know: {:x?} (perf's: {known_callers:x?})",
        &unknown[..unknown.len().min(5)]
    );
}

/// The frames past the program's first, out of it (the C library's, that called it).
fn callers_of_program(frames: &[Frame], in_program: impl Fn(&Frame) -> bool) -> Option<Vec<u64>> {
    let first = frames.iter().position(&in_program)?;
    let callers: Vec<u64> = frames[first..]
        .iter()
        .filter(|frame| !in_program(frame))
        .map(|frame| frame.address)
        .collect();
    (!callers.is_empty()).then_some(callers)
}

/// Asserts that the unwinder's stack of each sample is perf's, or deeper, but in a few
/// known cases; returns perf's.
fn assert_unwinds_as_perf(capture: &Path) -> HashMap<SampleKey, Vec<Frame>> {
    let reference = perf_script_user_frames(capture);
    let (ours, _) = unwind_all(capture);

    let mut code = Code::default();
    let (mut compared, mut missing) = (0, 0);
    let (mut parting, mut perf_skipping, mut garbage) = (Vec::new(), 0, Vec::new());
    let (mut our_frames, mut perf_frames) = (0, 0);
    for (key, perf) in reference.iter().filter(|(_, perf)| !perf.is_empty()) {
        let Some(ours_stack) = ours.get(key) else {
            missing += 1;
            continue;
        };
        let (ours, perf) = (addresses(ours_stack), addresses(perf));
        compared += 1;
        our_frames += ours.len();
        perf_frames += perf.len();
        if ours.starts_with(&perf) {
            continue;
        }
        if is_subsequence(&perf, &ours) && perf.first() == ours.first() {
            // perf's stack leaves out frames of ours: seen in libc's _nl_load_locale
            // (calling fstat64, which jumps to fstatat64) and ld.so's dl_main.
            perf_skipping += 1;
        } else if ours_stack.iter().skip(1).all(|frame| code.is_return(frame)) {
            parting.push((key, ours, perf));
        } else {
            garbage.push((key, ours, perf));
        }
    }
    eprintln!(
        "{compared} samples compared; frames: {our_frames} unwound here, {perf_frames} by perf; \
         {} parting from perf's, perf's skipping frames of {perf_skipping}, {} with garbage",
        parting.len(),
        garbage.len()
    );
    assert!(compared > 0, "the capture has no samples with user stacks");
    assert_eq!(missing, 0, "samples perf unwound and the test did not see");
    assert!(our_frames >= perf_frames, "fewer frames than perf's");
    assert!(
        garbage.is_empty(),
        "stacks unlike perf's, with callers after no call (sample, ours, perf's): {:x?}",
        &garbage[..garbage.len().min(5)]
    );
    // Seen: lazy binding, the first call through a PLT entry (framehop recovers only rip,
    // rsp and rbp, and ld.so's _dl_runtime_resolve keeps its frame in rbx; beside a
    // .debug_frame the linker's .eh_frame for the PLT is not read), at start mostly;
    // perf's wrong callers that follow a call (of uname: __gconv_find_transform, calling
    // another function; of _dl_relocate_object: _dl_call_fini).
    assert!(
        parting.len() * 100 <= compared,
        "too many stacks parting from perf's (sample, ours, perf's): {:x?}",
        &parting[..parting.len().min(5)]
    );
    reference
}

/// A child forked without exec has its parent's mappings: its stacks are unwound as
/// perf unwinds them.
#[test]
fn unwinds_a_forked_child() {
    let Some(scratch) = Scratch::new() else {
        return;
    };
    let capture = scratch.0.join("perf.data");
    let sleep_in_both = "import os, time\nos.fork()\nfor _ in range(200): time.sleep(0.001)";
    let python = Path::new("python3");
    record(&capture, python, &["-c", sleep_in_both]);
    assert_unwinds_as_perf(&capture);
}

/// A program replaced by another build after the recording: its unwind tables are not
/// used, so each stack ends at its first frame in the program (counted), as it stood.
#[test]
fn a_file_replaced_since_the_recording_ends_the_stacks_in_it() {
    let Some(scratch) = Scratch::new() else {
        return;
    };
    let program = scratch.0.join("thread_churn");
    fs::copy(example("thread_churn"), &program).expect("the example copies");
    let capture = scratch.0.join("perf.data");
    // Its build id is in its mapping's record (perf's header lists only the files of the
    // samples' ips, all in the kernel here); perf's build-id cache keeps no copy of it.
    record(&capture, &program, &EXAMPLE_ARGS);
    let reference = perf_script_user_frames(&capture);
    fs::copy(example("futex_contention"), &program).expect("another build replaces it");

    let (ours, unwinder) = unwind_all(&capture);

    let in_program = |frame: &Frame| Path::new(&frame.file) == program;
    let (mut reached_by_perf, mut parting) = (0, Vec::new());
    for (key, perf) in reference.iter().filter(|(_, perf)| !perf.is_empty()) {
        let ours = addresses(ours.get(key).expect("perf's sample unwound here"));
        let first = perf.iter().position(in_program);
        // Up to the program's frame and no further; where perf stops short of the
        // program, this unwinder may reach it.
        let expected = addresses(&perf[..first.map_or(perf.len(), |first| first + 1)]);
        let agrees = match first {
            Some(_) => ours == expected,
            None => ours.starts_with(&expected),
        };
        if first.is_some() {
            reached_by_perf += 1;
        }
        if !agrees {
            parting.push((key, ours, expected));
        }
    }
    assert!(reached_by_perf > 0, "no stack went through the program");
    // Lazy binding, as in assert_unwinds_as_perf.
    assert!(
        parting.len() * 100 <= reached_by_perf,
        "stacks unlike perf's (sample, ours, perf's up to the program): {:x?}",
        &parting[..parting.len().min(5)]
    );
    assert!(unwinder.stacks_stopped_at_unreadable() >= reached_by_perf as u64);
    let unreadable = unwinder.unreadable_files();
    assert_eq!(unreadable, [program.as_os_str().as_encoded_bytes()]);
}

/// Whether `short` is `long` with some frames left out.
fn is_subsequence(short: &[u64], long: &[u64]) -> bool {
    let mut long = long.iter();
    short.iter().all(|frame| long.any(|other| other == frame))
}

/// A folder of the test's own, deleted when it ends; `None` when perf is missing (and
/// not in CI, where that fails the test).
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Option<Self> {
        let perf_runs = Command::new("perf")
            .arg("--version")
            .output()
            .is_ok_and(|out| out.status.success());
        if !perf_runs {
            assert!(
                env::var("CI").as_deref() != Ok("true"),
                "perf is needed (scripts/setup installs it)"
            );
            eprintln!("skipped: perf is not installed");
            return None;
        }
        // Each test its own: they run at the same time.
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let folder = env::temp_dir().join(format!("offcpu-unwind-test-{}-{n}", process::id()));
        fs::create_dir_all(&folder).expect("a temporary folder");
        Some(Scratch(folder))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn example(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/bin")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/setup",
        path.display()
    );
    path
}

/// Records the switches of `program` with `args`, with DWARF stacks (root is needed), as
/// offcpu records: the files' build ids in their mappings' records (perf 6.1 may abort
/// in the pass that would read them at the end, "assertion failed at
/// util/build-id.c:1010"); without perf's build-id cache, which would keep copies of
/// the programs the tests build.
fn record(capture: &Path, program: &Path, args: &[&str]) {
    let output = Command::new("perf")
        .args(["record", "-q", "--call-graph", "dwarf"])
        .args(["-e", "sched:sched_switch"])
        .args(["--buildid-mmap", "--no-buildid-cache"])
        .arg("-o")
        .arg(capture)
        .arg("--")
        .arg(program)
        .args(args)
        .stdout(Stdio::null())
        .output()
        .expect("perf record runs");
    assert!(
        output.status.success(),
        "perf record failed (it needs root): {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A user frame as perf script prints it: an address in a file as the offset in it.
#[derive(Debug)]
struct Frame {
    address: u64,
    file: String,
}

fn addresses(frames: &[Frame]) -> Vec<u64> {
    frames.iter().map(|frame| frame.address).collect()
}

/// The user frames of each sample as perf script unwinds them, up to the first that is
/// garbage perf read past the root of a stack or off a wrong rule: a frame in no file
/// (JIT code is left out too; in a thread that clone3 has just started, perf's caller
/// is in the malloc arena) or a caller not right after a call instruction (in
/// ld.so's dl_main, perf's caller of _dl_lookup_symbol_x was padding in strncmp).
fn perf_script_user_frames(capture: &Path) -> HashMap<SampleKey, Vec<Frame>> {
    let output = Command::new("perf")
        .args([
            "script",
            "-F",
            "tid,time,ip,dso",
            "--ns",
            "--no-inline",
            "-i",
        ])
        .arg(capture)
        .output()
        .expect("perf script runs");
    assert!(
        output.status.success(),
        "perf script failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("perf script prints text");
    let mut samples = HashMap::new();
    let mut code = Code::default();
    for block in text.split("\n\n").filter(|block| !block.trim().is_empty()) {
        let mut lines = block.lines();
        let header = lines.next().expect("a sample's first line");
        let (tid, time) = header
            .trim()
            .trim_end_matches(':')
            .split_once(' ')
            .expect("tid and time");
        let (seconds, nanoseconds) = time.trim().split_once('.').expect("time in seconds");
        let time = seconds.parse::<u64>().expect("seconds") * 1_000_000_000
            + nanoseconds.parse::<u64>().expect("ns");
        let mut frames: Vec<Frame> = lines
            .map(|line| {
                let (address, file) = line.trim().split_once(' ').expect("address (file)");
                let address = u64::from_str_radix(address, 16).expect("a hex address");
                let file = file.trim_start_matches('(').trim_end_matches(')');
                Frame {
                    address,
                    file: file.to_owned(),
                }
            })
            .filter(|frame| frame.address < KERNEL_START)
            .take_while(|frame| frame.file == "[vdso]" || is_file(&frame.file))
            .collect();
        let callers = frames.iter().enumerate().skip(1);
        let garbage = callers
            .filter(|(_, frame)| !code.is_return(frame))
            .map(|(index, _)| index)
            .next();
        frames.truncate(garbage.unwrap_or(frames.len()));
        samples.insert((tid.parse().expect("tid"), time), frames);
    }
    samples
}

/// Whether perf names a file: not an anonymous map, nor JIT code it names by its map
/// (`/tmp/perf-PID.map`).
fn is_file(name: &str) -> bool {
    let jit = name.starts_with("/tmp/perf-") && name.ends_with(".map");
    name.starts_with('/') && name != "//anon" && !jit
}

/// The files that frames are in, read once.
#[derive(Default)]
struct Code(HashMap<String, Vec<u8>>);

impl Code {
    /// Whether a caller's frame follows a call instruction (unless it is in no file, or
    /// in the vdso, which are not on disk).
    fn is_return(&mut self, frame: &Frame) -> bool {
        if !is_file(&frame.file) {
            return true;
        }
        let code = self
            .0
            .entry(frame.file.clone())
            .or_insert_with(|| fs::read(&frame.file).expect("the file perf names"));
        follows_a_call(code, frame.address)
    }
}

/// Whether a caller's frame in perf's form (the byte before its return address, as an
/// offset in its file) ends a call instruction: `e8 rel32`, or `ff /2` (indirect, 2 to
/// 7 bytes long).
fn follows_a_call(code: &[u8], last_byte: u64) -> bool {
    let Ok(end) = usize::try_from(last_byte + 1) else {
        return false;
    };
    let byte = |back: usize| end.checked_sub(back).and_then(|at| code.get(at)).copied();
    let indirect = |length: usize| {
        byte(length) == Some(0xff) && byte(length - 1).is_some_and(|modrm| (modrm >> 3) & 7 == 2)
    };
    byte(5) == Some(0xe8) || (2..=7).any(indirect)
}

/// An executable mapping, to turn addresses into perf script's form.
#[derive(Clone)]
struct Mapping {
    start: u64,
    end: u64,
    file_offset: u64,
    file: String,
}

/// The user frames of each sample with user registers, unwound here, in perf script's
/// form; and the unwinder, for its counts.
fn unwind_all(capture: &Path) -> (HashMap<SampleKey, Vec<Frame>>, Unwinder) {
    let file = BufReader::new(File::open(capture).expect("the capture opens"));
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(file).expect("a perf.data file");
    let build_ids: HashMap<Vec<u8>, Vec<u8>> = perf_file
        .build_ids()
        .expect("the build ids")
        .into_values()
        .map(|dso| (dso.path, dso.build_id))
        .collect();
    let mut unwinder = Unwinder::new();
    let mut mappings: HashMap<i32, Vec<Mapping>> = HashMap::new();
    let mut samples = HashMap::new();
    while let Some(record) = record_iter.next_record(&mut perf_file).expect("a record") {
        let PerfFileRecord::EventRecord { record, .. } = record else {
            continue;
        };
        match record.parse().expect("a record parses") {
            EventRecord::Mmap2(mmap) if mmap.protection & PROT_EXEC != 0 => {
                let path = mmap.path.as_slice();
                let build_id = match &mmap.file_id {
                    Mmap2FileId::BuildId(id) => Some(id.as_slice()),
                    Mmap2FileId::InodeAndVersion(_) => {
                        build_ids.get(path.as_ref()).map(Vec::as_slice)
                    }
                };
                let (start, end) = (mmap.address, mmap.address + mmap.length);
                unwinder.add_mapping(mmap.pid, start, end, mmap.page_offset, &path, build_id);
                let maps = mappings.entry(mmap.pid).or_default();
                maps.retain(|m| m.end <= start || end <= m.start);
                let file_offset = mmap.page_offset;
                let file = String::from_utf8_lossy(&path).into_owned();
                maps.push(Mapping {
                    start,
                    end,
                    file_offset,
                    file,
                });
            }
            EventRecord::Fork(fork) if fork.pid != fork.ppid => {
                unwinder.fork_process(fork.ppid, fork.pid);
                let parents = mappings.get(&fork.ppid).cloned().unwrap_or_default();
                mappings.insert(fork.pid, parents);
            }
            EventRecord::Comm(comm) if comm.is_execve => {
                unwinder.forget_process(comm.pid);
                mappings.remove(&comm.pid);
            }
            EventRecord::Exit(exit) if exit.pid == exit.tid => {
                unwinder.forget_process(exit.pid);
                mappings.remove(&exit.pid);
            }
            EventRecord::Sample(sample) => {
                let (Some(pid), Some(tid), Some(time), Some(regs), Some((stack, dynamic_size))) = (
                    sample.pid,
                    sample.tid,
                    sample.timestamp,
                    sample.user_regs,
                    sample.user_stack,
                ) else {
                    continue;
                };
                let regs = UserRegs {
                    ip: regs.get(PERF_REG_X86_IP).expect("ip"),
                    sp: regs.get(PERF_REG_X86_SP).expect("sp"),
                    bp: regs.get(PERF_REG_X86_BP).expect("bp"),
                };
                let stack = stack.as_slice();
                let stack = &stack[..stack.len().min(dynamic_size as usize)];
                let frames = unwinder.unwind(pid, &regs, stack);
                let maps = mappings.get(&pid).map(Vec::as_slice).unwrap_or_default();
                let ip = frames.first().map(|&ip| perf_form(maps, ip));
                // perf (libdw) gives a caller's frame as the address before its return address.
                let callers = frames
                    .iter()
                    .skip(1)
                    .map(|&address| perf_form(maps, address - 1));
                samples.insert((tid, time), ip.into_iter().chain(callers).collect());
            }
            _ => {}
        }
    }
    (samples, unwinder)
}

/// A frame as perf script prints it: an address in a mapped file as its offset in it.
fn perf_form(mappings: &[Mapping], address: u64) -> Frame {
    match mappings
        .iter()
        .find(|m| (m.start..m.end).contains(&address))
    {
        Some(m) => Frame {
            address: address - m.start + m.file_offset,
            file: m.file.clone(),
        },
        None => Frame {
            address,
            file: "[unknown]".to_owned(),
        },
    }
}
