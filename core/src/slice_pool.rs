//! A reader's time slices, cut where it chooses, decoded and paired in a pool of as many threads as there are CPUs
//! (or slices): a slice holds its decoder, its unwinder and its pairing state while it runs,
//! so no more run at once than there are CPUs to run them, however many slices a capture is
//! cut into (offcpu.model.engine.slice_count: by its size, not by the reading machine).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::engine::SliceResult;
use crate::perf::perf_file::FileError;

/// The consecutive slices of start_ns..=end_ns (first, last ns, both included) cut at `cuts`
/// (in order; a cut not after the last one, or at or after end_ns, is passed over).
pub fn cut_at(start_ns: i64, end_ns: i64, cuts: impl IntoIterator<Item = i64>) -> Vec<(i64, i64)> {
    let mut bounds = vec![start_ns];
    for cut in cuts {
        if bounds.last().is_some_and(|last| *last < cut) && cut < end_ns {
            bounds.push(cut);
        }
    }
    bounds.push(end_ns + 1);
    bounds
        .windows(2)
        .map(|pair| (pair[0], pair[1] - 1))
        .collect()
}

/// How many threads pair `slices` slices.
pub fn threads_for(slices: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(slices)
        .max(1)
}

/// `pair(index, stop)` of each of `count` slices, in a pool of `threads_for(count)` threads;
/// `poll(slices done, waiting)` while they run (`waiting`: they are not all done; an error
/// stops them) and once they are all done. `poll` may park the calling thread while it waits:
/// the pool unparks it as each slice is done. The first failure is the one returned: it stops
/// the others, which may fail for that alone.
pub fn pair_in_pool<E: From<FileError>>(
    count: usize,
    pair: impl Fn(usize, &AtomicBool) -> Result<SliceResult, FileError> + Sync,
    mut poll: impl FnMut(usize, bool) -> Result<(), E>,
) -> Result<Vec<SliceResult>, E> {
    let (next, done, stop) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicBool::new(false),
    );
    let results: Mutex<Vec<Option<SliceResult>>> = Mutex::new((0..count).map(|_| None).collect());
    let failed: Mutex<Option<FileError>> = Mutex::new(None);
    let caller = std::thread::current();
    std::thread::scope(|scope| -> Result<(), E> {
        for _ in 0..threads_for(count) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= count {
                    break;
                }
                let result =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pair(index, &stop)))
                        .unwrap_or_else(|panic| {
                            Err(FileError::Damaged(format!(
                                "the reader failed on a time slice: {}",
                                crate::panic_message(&*panic)
                            )))
                        });
                let first_failure = result.is_err() && !stop.swap(true, Ordering::Relaxed);
                match result {
                    Err(failure) if first_failure => *lock(&failed) = Some(failure),
                    Err(_) => {}
                    Ok(paired) => lock(&results)[index] = Some(paired),
                }
                done.fetch_add(1, Ordering::Relaxed);
                caller.unpark();
            });
        }
        // Every slice is counted done, whether it failed or not (a failure stops the others early)
        while done.load(Ordering::Relaxed) < count {
            if let Err(error) = poll(done.load(Ordering::Relaxed), true) {
                stop.store(true, Ordering::Relaxed);
                return Err(error); // the scope waits for the threads, which stop soon
            }
        }
        poll(done.load(Ordering::Relaxed), false)
    })?;
    if let Some(failure) = failed.into_inner().unwrap_or_else(PoisonError::into_inner) {
        return Err(failure.into());
    }
    let results = results.into_inner().unwrap_or_else(PoisonError::into_inner);
    let interrupted = || FileError::Io("interrupted".into());
    Ok(results
        .into_iter()
        .map(|result| result.ok_or_else(interrupted))
        .collect::<Result<_, _>>()?)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::cut_at;

    #[test]
    fn slices_are_cut_at_each_cut_after_the_last_and_before_the_end() {
        // 30 twice counts once; 10 is not after 30; 120 is past the end (99)
        assert_eq!(
            cut_at(0, 99, [30, 30, 10, 60, 120]),
            vec![(0, 29), (30, 59), (60, 99)]
        );
        assert_eq!(cut_at(5, 9, []), vec![(5, 9)]);
    }
}
