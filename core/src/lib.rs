//! offcpu's compiled core, imported by Python as `offcpu._core`.
//!
//! It records the scheduler in the kernel (`recorder`): the BPF programs of
//! src/bpf/offcpu.bpf.c loaded with libbpf, their records drained from the ring
//! buffer to the capture by a thread of its own, without Python's lock.

mod recorder;
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

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<recorder::BpfRecording>()?;
    m.add("BpfError", m.py().get_type::<BpfError>())?;
    m.add("RECORD_SIZE", recorder::RECORD_SIZE)?;
    m.add("NOT_TAKEN", recorder::NOT_TAKEN)?;
    Ok(())
}
