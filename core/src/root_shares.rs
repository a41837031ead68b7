//! What the waits that peers ended came down to, followed along the wake-up links: the
//! fixed point of offcpu.findings._root_shares, reached here because it may take
//! thousands of rounds over every link.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Each row's shares by label: a row's own parts (`own`: row, label, share) plus, for each
/// of its links (`carried`: waiter row, waker row, share, sorted by waiter), that share of
/// the waker row's shares; round after round from the own parts, until no share moves by
/// more than `settled` or `rounds` have been made. Rows are numbered from 0 to `rows`,
/// labels from 0 to `labels`.
#[pyfunction]
pub fn root_shares(
    rows: usize,
    labels: usize,
    own: Vec<(usize, usize, f64)>,
    carried: Vec<(usize, usize, f64)>,
    rounds: usize,
    settled: f64,
) -> PyResult<Vec<Vec<f64>>> {
    let out_of_range = || PyValueError::new_err("a row or label number out of range");
    let cell =
        |row: usize, label: usize| (row < rows && label < labels).then(|| row * labels + label);
    let mut fixed = vec![0.0; rows * labels];
    for &(row, label, share) in &own {
        fixed[cell(row, label).ok_or_else(out_of_range)?] += share;
    }
    if carried
        .iter()
        .any(|&(waiter, waker, _)| waiter >= rows || waker >= rows)
    {
        return Err(out_of_range());
    }
    let mut shares = fixed.clone();
    let mut carried_in = vec![0.0; labels];
    for _ in 0..rounds {
        let mut following = fixed.clone();
        // a waiter's links summed first, then added to its own parts (as numpy's reduceat did)
        for links in carried.chunk_by(|first, next| first.0 == next.0) {
            carried_in.fill(0.0);
            for &(_, waker, share) in links {
                for (sum, waker_share) in carried_in
                    .iter_mut()
                    .zip(&shares[waker * labels..][..labels])
                {
                    *sum += share * waker_share;
                }
            }
            let waiter = links[0].0;
            for (cell, sum) in following[waiter * labels..][..labels]
                .iter_mut()
                .zip(&carried_in)
            {
                *cell += sum;
            }
        }
        let moved = following
            .iter()
            .zip(&shares)
            .map(|(after, before)| (after - before).abs())
            .fold(0.0, f64::max);
        shares = following;
        if moved <= settled {
            break;
        }
    }
    Ok((0..rows)
        .map(|row| shares[row * labels..][..labels].to_vec())
        .collect())
}
