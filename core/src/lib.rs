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

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<recorder::BpfRecording>()?;
    m.add("BpfError", m.py().get_type::<BpfError>())?;
    m.add_class::<perf_reader::PerfData>()?;
    m.add("PerfDataError", m.py().get_type::<PerfDataError>())?;
    m.add_function(wrap_pyfunction!(perf_reader::prev_state_name, m)?)?;
    m.add_class::<symbols::KernelSymbols>()?;
    m.add_class::<symbols::ElfSymbols>()?;
    m.add_class::<symbols::Symbol>()?;
    m.add_function(wrap_pyfunction!(symbols::elf_build_id, m)?)?;
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
