//! The engine: from scheduler events to the off-CPU model's inputs.
//!
//! A thread is off CPU from its switch-out to its next switch-in, both placed where the
//! kernel switches: at sched_switch, which fires as the scheduler has picked the next thread
//! and gives the leaving thread's stack and state. A thread comes back at the sched_switch
//! that names it as next; when the thread that left was not recorded (the idle task, another
//! process), perf's record of the switch-in, less the switch's cost measured in the capture,
//! says when. The time perf spends between the switch and its record of it is charged by the
//! kernel to the thread coming in: it counts as that thread's time on CPU, and is shown apart
//! as the observer's cost, never as waiting. The wakeup in between, recorded in the waker's
//! context with the waker's stack, splits the time off CPU into blocked time and run-queue
//! delay. This needs sched_switch alone, so it works on kernels without schedstats.
//!
//! The window is cut into time slices, paired in parallel. Each slice is a state machine
//! over its own events (`SliceBuilder`); waits that cross a slice boundary leave a tail in
//! one slice and a head in the next, and `merge` joins them, so that a slice never needs
//! another slice's events. Names, states and call chains are ids (`Id`) into tables the
//! caller keeps; the engine knows the few in `events` by their ids.
//!
//! Laid out by concern: what it is handed (`events`), what it adds up (`totals`, `tally`),
//! a slice's state machine (`slice`), the slices joined (`merge`), the µs the model is kept
//! in (`micros`), the tables that number names, states and chains (`interning`), and a live
//! window's chains numbered anew (`renumber`).

pub mod events;
pub mod interning;
pub mod merge;
pub mod micros;
mod ordered;
pub mod renumber;
pub mod root_shares;
pub mod slice;
pub mod tally;
#[cfg(test)]
mod tests;
pub mod totals;

pub use events::*;
pub use merge::{at_start, merge};
pub use slice::{SliceBuilder, SliceResult};
pub use tally::Tally;
