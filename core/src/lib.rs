//! offcpu's compiled core, imported by Python as `offcpu._core`.
//!
//! Laid out by concern:
//! - `bpf/`: recording the scheduler in the kernel: the BPF programs of bpf/offcpu.bpf.c
//!   loaded with libbpf, their records drained from the ring buffer to the capture by a
//!   thread of its own, without Python's lock (`recorder`); and those records read back.
//! - `perf/`: reading perf.data (`reader`, on `perf_file` and `tracing_formats`): the
//!   scheduler's events decoded in time order (`decoder`), user stacks unwound (`unwind`),
//!   and the symbols of the files they name (`symbols`, `elf_files`).
//! - `engine/`: the events paired into off-CPU intervals and added up, a time slice at a
//!   time, the slices joined, rounded to the model's µs; and the chains' roots followed
//!   along the wake-up links (`root_shares`).
//! - `generations`: the processes' exec generations, counted once for both readers.
//! - `slice_pool`: a reader's time slices paired in a pool of as many threads as CPUs.
//! - `py/`: the Python bindings alone, which call the rest.

mod bpf;
pub mod engine;
mod files;
mod generations;
pub mod perf;
mod py;
mod quick;
mod slice_pool;

use pyo3::create_exception;
use pyo3::exceptions::PyException;

create_exception!(
    _core,
    BpfError,
    PyException,
    "The BPF recording could not be set up or read (the kernel refused a program, a map, or an attach)."
);

create_exception!(
    _core,
    PerfDataError,
    PyException,
    "perf.data could not be read: args are (\"io\" or \"damaged\", what is wrong)."
);

/// What a panic said, for the error it becomes.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (
        payload.downcast_ref::<&str>(),
        payload.downcast_ref::<String>(),
    ) {
        (Some(message), _) => (*message).to_owned(),
        (_, Some(message)) => message.clone(),
        _ => "a panic".to_owned(),
    }
}

/// `read`, or None if it panics: a crate's assertion on a file it did not expect (an ELF file
/// a profiled process maps is anyone's) costs that file's names, not the report.
pub fn unless_panics<T>(read: impl FnOnce() -> Option<T>) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read))
        .ok()
        .flatten()
}
