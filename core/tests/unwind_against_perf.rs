//! The unwinder against perf's own DWARF unwinding of the same capture (the reference):
//! for every sample, the user frames that both have are the same addresses, and the
//! unwinder reaches as deep as perf.
//!
//! The capture is `$OFFCPU_DWARF_CAPTURE` when set, else a recording of an example made
//! here (`perf record --call-graph dwarf`, as root; scripts/setup builds the examples).
//! Without perf the test is skipped, except in CI (CI=true), where it fails.

use std::collections::HashMap;
use std::env;
use std::fs::{self, File};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::Command;

use _core::unwind::{Unwinder, UserRegs};
use linux_perf_data::linux_perf_event_reader::constants::{
    PERF_REG_X86_BP, PERF_REG_X86_IP, PERF_REG_X86_SP,
};
use linux_perf_data::linux_perf_event_reader::{EventRecord, Mmap2FileId};
use linux_perf_data::{PerfFileReader, PerfFileRecord};

const PROT_EXEC: u32 = 4;
/// Addresses from here up are the kernel's.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// A sample's thread and time, in nanoseconds: how perf script's lines are matched.
type SampleKey = (i32, u64);

#[test]
fn unwinds_user_stacks_as_perf_does() {
    let Some(capture) = capture() else {
        return;
    };
    let reference = perf_script_user_frames(capture.path());
    let ours = unwind_all(capture.path());

    let (mut compared, mut missing) = (0, 0);
    let (mut skipping, mut different) = (Vec::new(), Vec::new());
    let (mut our_frames, mut perf_frames) = (0, 0);
    for (key, perf) in reference.iter().filter(|(_, perf)| !perf.is_empty()) {
        let Some(ours) = ours.get(key) else {
            missing += 1;
            continue;
        };
        compared += 1;
        our_frames += ours.len();
        perf_frames += perf.len();
        if ours.starts_with(perf) {
            continue;
        }
        if skips_frames_of(ours, perf) {
            skipping.push((key, ours, perf));
        } else {
            different.push((key, ours, perf));
        }
    }
    eprintln!(
        "{compared} samples compared; frames: {our_frames} unwound here, {perf_frames} by perf; \
         {} skipping frames of perf's, {} different",
        skipping.len(),
        different.len()
    );
    assert!(compared > 0, "the capture has no samples with user stacks");
    assert_eq!(missing, 0, "samples perf unwound and the test did not see");
    assert!(
        different.is_empty(),
        "stacks unlike perf's or shallower (sample, ours, perf's): {:x?}",
        &different[..different.len().min(5)]
    );
    // framehop recovers only rip, rsp and rbp: where a function keeps its frame in another
    // register (ld.so's _dl_runtime_resolve, the first call through a PLT entry) it
    // falls back to the frame pointers, and may skip the caller's frame.
    assert!(
        skipping.len() * 1000 <= compared,
        "too many stacks skip frames of perf's (sample, ours, perf's): {:x?}",
        &skipping[..skipping.len().min(5)]
    );
}

/// Whether `ours` is `perf`'s frames with some left out, down to the same root.
fn skips_frames_of(ours: &[u64], perf: &[u64]) -> bool {
    let mut perf_frames = perf.iter();
    let in_order = ours
        .iter()
        .all(|frame| perf_frames.any(|perf_frame| perf_frame == frame));
    in_order && ours.last() == perf.last()
}

/// A capture given, or one recorded here, deleted with its folder when the test ends.
enum Capture {
    Given(PathBuf),
    Recorded(PathBuf),
}

impl Capture {
    fn path(&self) -> &Path {
        match self {
            Capture::Given(path) | Capture::Recorded(path) => path,
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Capture::Recorded(path) = self {
            if let Some(dir) = path.parent() {
                let _ = fs::remove_dir_all(dir);
            }
        }
    }
}

/// The capture to read, or `None` when it cannot be made here (the test is skipped).
fn capture() -> Option<Capture> {
    if let Some(path) = env::var_os("OFFCPU_DWARF_CAPTURE").filter(|path| !path.is_empty()) {
        return Some(Capture::Given(PathBuf::from(path)));
    }
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
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bin/thread_churn");
    assert!(
        example.exists(),
        "{} is missing: run scripts/setup",
        example.display()
    );
    let dir = env::temp_dir().join(format!("offcpu-unwind-test-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("a temporary folder");
    let capture = Capture::Recorded(dir.join("perf.data"));
    // thread_churn: stacks through glibc (no frame pointers) in threads that come and go.
    let status = Command::new("perf")
        .args([
            "record",
            "-q",
            "--call-graph",
            "dwarf",
            "-e",
            "sched:sched_switch",
            "-o",
        ])
        .arg(capture.path())
        .arg("--")
        .arg(&example)
        .args(["-t", "4", "-S", "1", "-s", "0.3"])
        .status()
        .expect("perf record runs");
    assert!(
        status.success(),
        "perf record failed (it needs root): {status}"
    );
    Some(capture)
}

/// The user frames of each sample as perf script unwinds them, in its form: an address
/// in a file as the offset in that file. Its frames from the first that is in no file
/// on are left out: the example runs no JIT code, so such a frame is garbage that perf
/// read past the root of the stack (in a thread that clone3 has just started, its
/// return address is in the malloc arena).
fn perf_script_user_frames(capture: &Path) -> HashMap<SampleKey, Vec<u64>> {
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
        let frames = lines
            .map(|line| {
                line.trim()
                    .split_once(' ')
                    .expect("an address and its file")
            })
            .map(|(address, file)| {
                let address = u64::from_str_radix(address, 16).expect("a hex address");
                (address, file)
            })
            .filter(|&(address, _)| address < KERNEL_START)
            .take_while(|&(_, file)| {
                file == "([vdso])" || (file.starts_with("(/") && file != "(//anon)")
            })
            .map(|(address, _)| address)
            .collect();
        samples.insert((tid.parse().expect("tid"), time), frames);
    }
    samples
}

/// An executable mapping, to turn addresses into perf script's form.
struct Mapping {
    start: u64,
    end: u64,
    file_offset: u64,
}

/// The user frames of each sample with user registers, unwound here, in perf script's form.
fn unwind_all(capture: &Path) -> HashMap<SampleKey, Vec<u64>> {
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
                maps.push(Mapping {
                    start,
                    end,
                    file_offset: mmap.page_offset,
                });
            }
            EventRecord::Fork(fork) if fork.pid != fork.ppid => {
                unwinder.fork_process(fork.ppid, fork.pid);
                let parents = mappings.get(&fork.ppid).map(|maps| {
                    maps.iter()
                        .map(|m| Mapping {
                            start: m.start,
                            end: m.end,
                            file_offset: m.file_offset,
                        })
                        .collect()
                });
                mappings.insert(fork.pid, parents.unwrap_or_default());
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
    samples
}

/// perf script prints an address in a mapped file as its offset in the file.
fn perf_form(mappings: &[Mapping], address: u64) -> u64 {
    match mappings
        .iter()
        .find(|m| (m.start..m.end).contains(&address))
    {
        Some(m) => address - m.start + m.file_offset,
        None => address,
    }
}
