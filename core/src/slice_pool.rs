//! A reader's time slices decoded and paired in a pool of as many threads as there are CPUs
//! (or slices): a slice holds its decoder, its unwinder and its pairing state while it runs,
//! so no more run at once than there are CPUs to run them, however many slices a capture is
//! cut into (offcpu.model.engine.slice_count: by its size, not by the reading machine).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::engine::SliceResult;
use crate::perf::perf_file::FileError;

/// How many threads pair `slices` slices.
pub fn threads_for(slices: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(slices)
        .max(1)
}

/// `pair(index, stop)` of each of `count` slices, in a pool of `threads_for(count)` threads;
/// `poll(slices done, waiting)` while they run (`waiting`: they are not all done; an error
/// stops them) and once they are all done. The first failure is the one returned: it stops
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
    std::thread::scope(|scope| -> Result<(), E> {
        let workers: Vec<_> = (0..threads_for(count))
            .map(|_| {
                scope.spawn(|| loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= count {
                        break;
                    }
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        pair(index, &stop)
                    }))
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
                })
            })
            .collect();
        while workers.iter().any(|worker| !worker.is_finished()) {
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
