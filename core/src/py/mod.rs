//! The module Python imports, `offcpu._core`: the classes and functions of the rest of the
//! core, wrapped for Python; the core's panics caught at its boundary.

mod model_inputs;
mod perf_data;
mod roots;

use pyo3::panic::PanicException;
use pyo3::prelude::*;

use crate::bpf::recorder;
use crate::engine;
use crate::perf::symbols;
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
    m.add_class::<model_inputs::Slice>()?;
    m.add_class::<model_inputs::Tally>()?;
    m.add_function(wrap_pyfunction!(model_inputs::merge, m)?)?;
    m.add_function(wrap_pyfunction!(roots::root_shares, m)?)?;
    m.add("NAMES", engine::NAMES)?;
    m.add("STATES", engine::STATES)?;
    m.add("SEEDED_CHAINS", engine::SEEDED_CHAINS)?;
    m.add("TIMELINE_WAITS", engine::TIMELINE_WAITS)?;
    m.add("RECORD_SIZE", recorder::RECORD_SIZE)?;
    m.add("NOT_TAKEN", recorder::NOT_TAKEN)?;
    Ok(())
}
