//! offcpu's compiled core, imported by Python as `offcpu._core`.
//!
//! It records the scheduler in the kernel (`recorder`): the BPF programs of
//! src/bpf/offcpu.bpf.c loaded with libbpf, their records drained from the ring
//! buffer to the capture by a thread of its own, without Python's lock. It reads
//! perf.data (`perf_reader`, on `perf_file` and `tracing_formats`): the scheduler's
//! events in time order. And it pairs them into off-CPU intervals and adds them up
//! (`pairing`), for every reader: perf.data's in a thread per time slice, the events
//! other readers decode in Python handed over as columns (`model_inputs`). And it follows
//! the wake-up links of the findings' chains to their roots (`root_shares`).

mod elf_files;
mod files;
mod model_inputs;
mod pairing;
mod perf_file;
mod perf_reader;
mod quick;
mod recorder;
mod root_shares;
mod symbols;
mod tracing_formats;
pub mod unwind;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::panic::PanicException;
use pyo3::prelude::*;

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

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // A panic becomes the error it is caught as (PerfDataError, or pyo3's PanicException, which
    // Python turns into one line): the default hook would print it on stderr too.
    std::panic::set_hook(Box::new(|_| {}));
    m.add_class::<recorder::BpfRecording>()?;
    m.add("BpfError", m.py().get_type::<BpfError>())?;
    m.add_class::<perf_reader::PerfData>()?;
    m.add("PerfDataError", m.py().get_type::<PerfDataError>())?;
    m.add("PanicException", m.py().get_type::<PanicException>())?;
    m.add_function(wrap_pyfunction!(perf_reader::prev_state_name, m)?)?;
    m.add_class::<symbols::KernelSymbols>()?;
    m.add_class::<symbols::ElfSymbols>()?;
    m.add_class::<symbols::Symbol>()?;
    m.add_function(wrap_pyfunction!(symbols::elf_build_id, m)?)?;
    m.add_function(wrap_pyfunction!(symbols::elf_symbol_address, m)?)?;
    m.add_class::<model_inputs::Slice>()?;
    m.add_class::<model_inputs::Tally>()?;
    m.add_function(wrap_pyfunction!(model_inputs::merge, m)?)?;
    m.add_function(wrap_pyfunction!(root_shares::root_shares, m)?)?;
    m.add("NAMES", pairing::NAMES)?;
    m.add("STATES", pairing::STATES)?;
    m.add("SEEDED_CHAINS", pairing::SEEDED_CHAINS)?;
    m.add("TIMELINE_WAITS", pairing::TIMELINE_WAITS)?;
    m.add("RECORD_SIZE", recorder::RECORD_SIZE)?;
    m.add("NOT_TAKEN", recorder::NOT_TAKEN)?;
    Ok(())
}
