//! What both readers' `pair` do around their own decoding: the target's threads at the start
//! keyed, Ctrl-C and progress looked at while the slices are paired in the pool, the slices'
//! results merged into one tally.

use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use pyo3::prelude::*;

use super::model_inputs::Tally;
use crate::engine::interning::{locked, Keys};
use crate::engine::{self, SliceResult};

/// How often the thread that waits for the slices looks for Ctrl-C and progress, at least: it
/// is woken as each slice is done (the pool unparks it).
const POLL: Duration = Duration::from_millis(20);

/// The threads when recording began: (tid, name, state).
pub type AtStart = Vec<(i32, String, String)>;

/// The merged tally of the slices `pair_slices` pairs with the keys it is given and `poll`
/// (slices done, waiting), how many records could not be decoded, and the keys.
pub fn paired<Chain: Clone + Eq + Hash>(
    py: Python<'_>,
    window: (i64, i64),
    at_start: AtStart,
    counted: (i64, i64),
    on_done: Option<Bound<'_, PyAny>>,
    pair_slices: impl FnOnce(
        &Mutex<Keys<Chain>>,
        &mut dyn FnMut(usize, bool) -> PyResult<()>,
    ) -> PyResult<Vec<SliceResult>>,
) -> PyResult<(Tally, u64, Keys<Chain>)> {
    let keys = Mutex::new(Keys::default());
    let threads_at_start = {
        let mut keys = locked(&keys);
        at_start
            .into_iter()
            .map(|(tid, name, state)| (tid, keys.names.id(&name), keys.states.id(&state)))
            .collect()
    };
    let mut reported = 0;
    let mut poll = |done: usize, waiting: bool| -> PyResult<()> {
        if waiting {
            py.detach(|| std::thread::park_timeout(POLL));
            py.check_signals()?;
        }
        if let Some(on_done) = on_done.as_ref().filter(|_| done != reported) {
            on_done.call1((done,))?;
        }
        reported = done;
        Ok(())
    };
    let results = pair_slices(&keys, &mut poll)?;
    let (tally, skipped) = engine::merge(
        results,
        window,
        &engine::at_start(threads_at_start),
        Some(counted),
    );
    let keys = keys.into_inner().unwrap_or_else(PoisonError::into_inner);
    Ok((Tally { tally }, skipped, keys))
}
