//! What the waits that peers ended came down to, followed along the wake-up links: the
//! fixed point of offcpu.diagnosis.roots.root_shares, reached here because it may take
//! thousands of rounds over every link.

/// Each row's shares by label: a row's own parts (`own`: row, label, share) plus, for each
/// of its links (`carried`: waiter row, waker row, share, sorted by waiter), that share of
/// the waker row's shares; round after round from the own parts, until no share moves by
/// more than `settled` or `rounds` have been made. Rows are numbered from 0 to `rows`,
/// labels from 0 to `labels`; None when a number is out of range.
pub fn fixed_point(
    rows: usize,
    labels: usize,
    own: &[(usize, usize, f64)],
    carried: &[(usize, usize, f64)],
    rounds: usize,
    settled: f64,
) -> Option<Vec<Vec<f64>>> {
    let cell =
        |row: usize, label: usize| (row < rows && label < labels).then(|| row * labels + label);
    let mut fixed = vec![0.0; rows * labels];
    for &(row, label, share) in own {
        fixed[cell(row, label)?] += share;
    }
    if carried
        .iter()
        .any(|&(waiter, waker, _)| waiter >= rows || waker >= rows)
    {
        return None;
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
    Some(
        (0..rows)
            .map(|row| shares[row * labels..][..labels].to_vec())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::fixed_point;

    #[test]
    fn a_wait_behind_a_waiter_comes_down_to_what_that_one_waited_for() {
        // row 0 waited half its time behind row 1's wait, which was all at a disk (label 0),
        // and the other half behind its waker on CPU (label 1)
        let own = vec![(0, 1, 0.5), (1, 0, 1.0)];
        let shares = fixed_point(2, 2, &own, &[(0, 1, 0.5)], 2000, 1e-6);
        assert_eq!(shares, Some(vec![vec![0.5, 0.5], vec![1.0, 0.0]]));
    }

    #[test]
    fn waits_that_end_in_each_other_come_down_to_nothing_of_their_own() {
        // rows 0 and 1 each waited all their time behind the other: no root of its own
        // ever enters the rows (the findings call what is left going round turns)
        let shares = fixed_point(2, 1, &[], &[(0, 1, 1.0), (1, 0, 1.0)], 2000, 1e-6);
        assert_eq!(shares, Some(vec![vec![0.0], vec![0.0]]));
    }

    #[test]
    fn a_row_out_of_range_is_refused() {
        assert_eq!(fixed_point(1, 1, &[(1, 0, 1.0)], &[], 10, 1e-6), None);
        assert_eq!(fixed_point(1, 1, &[], &[(0, 1, 1.0)], 10, 1e-6), None);
    }
}
