//! The chains' roots for offcpu.diagnosis.roots (engine::root_shares), without Python's lock.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::engine::root_shares::fixed_point;

/// Each row's shares by label (see fixed_point).
#[pyfunction]
pub fn root_shares(
    py: Python<'_>,
    rows: usize,
    labels: usize,
    own: Vec<(usize, usize, f64)>,
    carried: Vec<(usize, usize, f64)>,
    rounds: usize,
    settled: f64,
) -> PyResult<Vec<Vec<f64>>> {
    py.detach(|| fixed_point(rows, labels, &own, &carried, rounds, settled))
        .ok_or_else(|| PyValueError::new_err("a row or label number out of range"))
}
