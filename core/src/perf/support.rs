//! What the native reader decodes, and why it does not read a file as `perf script` would.

use super::decoder::{SAMPLE_STACK_USER, SWITCH_TRACEPOINT, WAKING_TRACEPOINTS};
use super::perf_file::{self, Shape};
use super::reader::PerfReader;
use super::tracing_formats::{StateNames, Tracepoint};

const SWITCH_FIELDS: [&str; 4] = ["prev_comm", "prev_pid", "prev_state", "next_pid"];
const WAKING_FIELDS: [&str; 1] = ["pid"]; // the woken thread
const TEXT_FIELDS: [&str; 1] = ["prev_comm"];

// perf_event_attr.sample_type bits
const SAMPLE_TID: u64 = 1 << 1;
const SAMPLE_TIME: u64 = 1 << 2;
const SAMPLE_READ: u64 = 1 << 4;
const SAMPLE_BRANCH_STACK: u64 = 1 << 11;
const SAMPLE_REGS_USER: u64 = 1 << 12;
const SAMPLE_IDENTIFIER: u64 = 1 << 16;
/// The machine whose user stacks the core unwinds (perf's HEADER_ARCH)
const UNWOUND_ARCHITECTURE: &str = "x86_64";

/// Why the native reader cannot read this file as perf script would (one sentence), or None.
pub fn why_unsupported(data: &PerfReader) -> Option<String> {
    let opened = match &data.shape {
        Shape::Swapped => return Some("perf.data was written on a machine of the other byte order, which the native reader does not decode".into()),
        Shape::Pipe => return Some("perf.data was written through a pipe (perf record -o -), which the native reader does not decode".into()),
        Shape::File(opened) => opened,
    };
    for attr in &opened.attrs {
        let sample_type = attr.sample_type;
        if sample_type & SAMPLE_STACK_USER != 0 && sample_type & SAMPLE_REGS_USER == 0 {
            return Some("perf.data has user stacks to unwind (--call-graph dwarf) without their registers, which the native reader needs".into());
        }
        if sample_type & SAMPLE_STACK_USER != 0
            && opened.feature_string(perf_file::FEATURE_ARCH).as_deref()
                != Some(UNWOUND_ARCHITECTURE)
        {
            return Some("perf.data has user stacks to unwind (--call-graph dwarf) of another machine than x86_64, which the native reader does not unwind".into());
        }
        if sample_type & SAMPLE_BRANCH_STACK != 0 {
            return Some("perf.data has branch stacks (--call-graph lbr), which the native reader does not decode".into());
        }
        if sample_type & SAMPLE_READ != 0 {
            return Some("perf.data's samples carry counter values (PERF_SAMPLE_READ), which the native reader does not decode".into());
        }
        if sample_type & SAMPLE_TID == 0 {
            return Some("perf.data's samples do not say their thread (PERF_SAMPLE_TID), which the native reader needs".into());
        }
        if !attr.sample_id_all || sample_type & SAMPLE_TIME == 0 {
            return Some("perf.data's records carry no time stamps (sample_id_all), which the native reader needs".into());
        }
    }
    if opened.attrs.len() > 1
        && !opened
            .attrs
            .iter()
            .all(|attr| attr.sample_type & SAMPLE_IDENTIFIER != 0)
    {
        return Some("perf.data's events are not told apart by PERF_SAMPLE_IDENTIFIER, which the native reader needs".into());
    }
    let time_at = |attr: &perf_file::Attr| attr.parse_info.sample_record_time_offset_from_start;
    if opened
        .attrs
        .windows(2)
        .any(|pair| time_at(&pair[0]) != time_at(&pair[1]))
    {
        return Some("perf.data's events lay out their times differently, which the native reader does not decode".into());
    }
    let Some(switch) = data.tracepoint(SWITCH_TRACEPOINT) else {
        return Some("perf.data holds no sched:sched_switch format in its tracing data, which the native reader needs".into());
    };
    if StateNames::of(&switch.print_fmt).is_none() {
        return Some(
            "perf.data's sched_switch prints prev_state in a way the native reader does not decode"
                .into(),
        );
    }
    let wanted = std::iter::once((SWITCH_TRACEPOINT, &SWITCH_FIELDS[..])).chain(
        WAKING_TRACEPOINTS
            .iter()
            .map(|name| (*name, &WAKING_FIELDS[..])),
    );
    for (name, fields) in wanted {
        if let Some(tracepoint) = data.tracepoint(name) {
            if !decodable(tracepoint, fields) {
                return Some(format!(
                    "perf.data's {name} format lacks the fields the native reader needs ({})",
                    fields.join(", ")
                ));
            }
        }
    }
    None
}

/// Whether the format has the wanted fields, integers of 1, 2, 4 or 8 bytes but the names.
fn decodable(tracepoint: &Tracepoint, wanted: &[&str]) -> bool {
    wanted
        .iter()
        .all(|name| match tracepoint.fields.get(*name) {
            Some(field) => TEXT_FIELDS.contains(name) || matches!(field.size, 1 | 2 | 4 | 8),
            None => false,
        })
}
