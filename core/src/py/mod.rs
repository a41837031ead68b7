//! The module Python imports, `offcpu._core`: the classes and functions of the rest of the
//! core, wrapped for Python; the core's panics caught at its boundary.

mod bpf_records;
mod model_inputs;
mod pairing;
mod perf_data;
mod roots;

use std::collections::HashMap;

use pyo3::panic::PanicException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::bpf::{record, recorder};
use crate::engine;
use crate::perf::{perf_file, symbols};
use crate::{BpfError, PerfDataError};

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // A panic becomes the error it is caught as (PerfDataError, or pyo3's PanicException, which
    // Python turns into one line): the default hook would print it on stderr too.
    std::panic::set_hook(Box::new(|_| {}));
    m.add_class::<recorder::BpfRecording>()?;
    m.add("BpfError", m.py().get_type::<BpfError>())?;
    m.add_class::<perf_data::PerfData>()?;
    m.add("PerfDataError", m.py().get_type::<PerfDataError>())?;
    m.add("PanicException", m.py().get_type::<PanicException>())?;
    m.add_function(wrap_pyfunction!(perf_data::prev_state_name, m)?)?;
    m.add_class::<symbols::KernelSymbols>()?;
    m.add_class::<symbols::ElfSymbols>()?;
    m.add_class::<symbols::Symbol>()?;
    m.add_function(wrap_pyfunction!(symbols::elf_build_id, m)?)?;
    m.add_function(wrap_pyfunction!(symbols::elf_symbol_address, m)?)?;
    m.add_class::<bpf_records::BpfRecords>()?;
    m.add_class::<bpf_records::HeldRecords>()?;
    m.add_class::<bpf_records::ExecGenerations>()?;
    m.add_class::<model_inputs::Slice>()?;
    m.add_class::<model_inputs::Tally>()?;
    m.add_function(wrap_pyfunction!(model_inputs::merge, m)?)?;
    m.add_function(wrap_pyfunction!(roots::root_shares, m)?)?;
    m.add("NAMES", engine::NAMES)?;
    m.add("STATES", engine::STATES)?;
    m.add("SEEDED_CHAINS", engine::SEEDED_CHAINS)?;
    m.add("TIMELINE_WAITS", engine::TIMELINE_WAITS)?;
    m.add("SUB_WINDOWS", engine::SUB_WINDOWS)?;
    for (name, kind) in [
        ("SCHED_SWITCH", engine::SCHED_SWITCH),
        ("SCHED_WAKING", engine::SCHED_WAKING),
        ("SWITCH_IN", engine::SWITCH_IN),
        ("SWITCH_OUT", engine::SWITCH_OUT),
        ("THREAD_FORK", engine::THREAD_FORK),
        ("THREAD_EXIT", engine::THREAD_EXIT),
        ("THREAD_COMM", engine::THREAD_COMM),
    ] {
        m.add(name, kind)?;
    }
    m.add("UNKNOWN_CPU", engine::UNKNOWN_CPU)?;
    m.add("RECORD_SIZE", record::RECORD_SIZE)?;
    m.add("RECORD_FIELDS", record::FIELDS.to_vec())?;
    m.add(
        "RECORD_KINDS",
        HashMap::from([
            ("wait", record::WAIT),
            ("fork", record::FORK),
            ("exit", record::EXIT),
            ("comm", record::COMM),
        ]),
    )?;
    m.add("NOT_TAKEN", record::NOT_TAKEN)?;
    m.add("EXEC", crate::bpf::decode::EXEC)?;
    m.add("NO_RUNTIME_STACK", crate::bpf::decode::NO_RUNTIME_STACK)?;
    m.add("STATE_LETTERS", record::STATE_LETTERS)?;
    m.add_function(wrap_pyfunction!(state_letter, m)?)?;
    m.add("PERF_MAGIC", PyBytes::new(m.py(), perf_file::MAGIC))?;
    Ok(())
}

/// The state letter perf prints for a BPF wait's switch-out (bpf::record::state_letter).
#[pyfunction]
fn state_letter(state: u32, exit_state: u32, preempted: bool) -> char {
    record::state_letter(state, exit_state, preempted)
}
