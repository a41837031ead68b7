//! A perf.data's records read where they are in the file's map (`Rounds`), in the order the
//! crate `linux-perf-data` gives them, without its copy of each record (`Order`): perf writes
//! a round (the records up to a FINISHED_ROUND) after every record two rounds before, so once
//! a round is read, the records held whose key is at most the latest of the rounds before it
//! can go, in order of time, then of offset.

use std::collections::VecDeque;

use byteorder::LittleEndian;
use linux_perf_event_reader::{
    get_record_timestamp, RawData, RawEventRecord, RecordParseInfo, RecordType,
};

use super::perf_file::{damaged, u16_at, u32_at, FileError, Opened, FINISHED_ROUND};

/// Where a record goes in the order: its time (none for perf's own records, and the kernel's
/// without one), then its offset. Every offset is past the file's header, so the least key
/// (None, 0) is below every record's, as the crate's first key is.
type Key = (Option<u64>, u64);

/// The records of a data section from one round on, in the crate's order; perf's own records
/// are ordered with the rest but not given out.
pub struct Rounds<'m> {
    opened: &'m Opened,
    data: &'m [u8],
    position: usize,
    order: Order,
}

impl<'m> Rounds<'m> {
    /// From the round that begins at offset `start`.
    pub fn new(opened: &'m Opened, start: u64) -> Result<Self, FileError> {
        Ok(Rounds {
            opened,
            data: opened.up_to_data_end()?,
            position: usize::try_from(start).unwrap_or(usize::MAX),
            order: Order::default(),
        })
    }

    /// The next of the kernel's records, with the index of its event.
    pub fn next_record(&mut self) -> Result<Option<(usize, RawEventRecord<'m>)>, FileError> {
        loop {
            if self.order.ready.is_empty() {
                self.read_round()?;
            }
            let Some(at) = self.order.ready.pop_front() else {
                return Ok(None);
            };
            let (kind, misc, body) = self.record_at(at)?;
            if let Some((attr_index, parse_info)) = self.event_of(kind, body) {
                let record = RawEventRecord::new(kind, misc, RawData::Single(body), parse_info);
                return Ok(Some((attr_index, record)));
            }
        }
    }

    /// Read records until a round lets some go, or to the end of the data.
    fn read_round(&mut self) -> Result<(), FileError> {
        while self.position < self.data.len() {
            let at = self.position;
            let (kind, _, body) = self.record_at(at)?;
            self.position = at + 8 + body.len();
            if kind.0 == FINISHED_ROUND {
                self.order.finish_round();
                if !self.order.ready.is_empty() {
                    return Ok(());
                }
                continue;
            }
            let time = self.event_of(kind, body).and_then(|(_, parse_info)| {
                get_record_timestamp::<LittleEndian>(kind, RawData::Single(body), &parse_info)
            });
            self.order.hold((time, at as u64), at);
        }
        self.order.finish();
        Ok(())
    }

    /// The type, misc and body of the record at offset `at`.
    fn record_at(&self, at: usize) -> Result<(RecordType, u16, &'m [u8]), FileError> {
        let data = self.data;
        let cut_short = || damaged(format!("the record at byte {at} is cut short"));
        let kind = u32_at(data, at).ok_or_else(cut_short)?;
        let misc = u16_at(data, at + 4).ok_or_else(cut_short)?;
        let size = usize::from(u16_at(data, at + 6).ok_or_else(cut_short)?);
        if size < 8 {
            return Err(damaged(format!("the record at byte {at} has size {size}")));
        }
        let body = data.get(at + 8..at + size).ok_or_else(cut_short)?;
        Ok((RecordType(kind), misc, body))
    }

    /// The index of a kernel's record's event, and how its records are laid out; None for
    /// perf's own records.
    fn event_of(&self, kind: RecordType, body: &[u8]) -> Option<(usize, RecordParseInfo)> {
        if kind.is_user_type() {
            return None;
        }
        let attr_index = self.opened.attr_index(kind, body);
        let attr = self.opened.attrs.get(attr_index)?;
        Some((attr_index, attr.parse_info))
    }
}

/// Records (by offset) put in order a round at a time.
#[derive(Default)]
struct Order {
    /// Held, not yet in order; and in order, to go.
    held: Vec<(Key, usize)>,
    ready: VecDeque<usize>,
    /// The latest key of the rounds before the last one finished, the latest of all, and how
    /// many of those held are at most the former (they go when the round being read finishes).
    before: Key,
    latest: Key,
    at_most_before: usize,
}

impl Order {
    fn hold(&mut self, key: Key, at: usize) {
        if key <= self.before {
            self.at_most_before += 1;
        } else if key > self.latest {
            self.latest = key;
        }
        self.held.push((key, at));
    }

    /// A round read: those held at most the latest key of the rounds before it go, in order.
    fn finish_round(&mut self) {
        if self.at_most_before > 0 {
            self.held.sort_unstable_by_key(|(key, _)| *key);
            let going = self.held.drain(..self.at_most_before);
            self.ready.extend(going.map(|(_, at)| at));
        }
        self.before = self.latest;
        self.at_most_before = self.held.len();
    }

    /// The end of the data: every record held goes, in order.
    fn finish(&mut self) {
        self.held.sort_unstable_by_key(|(key, _)| *key);
        self.ready.extend(self.held.drain(..).map(|(_, at)| at));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(order: &mut Order) -> Vec<usize> {
        order.ready.drain(..).collect()
    }

    #[test]
    fn a_round_goes_once_the_next_one_is_read_and_a_late_record_goes_with_it() {
        // Records at offsets 100.., their times: round 1 holds 20 and 10, round 2 holds 30,
        // 15 (written late: before round 1's latest) and 25; round 3 holds 40
        let mut order = Order::default();
        order.hold((Some(20), 100), 100);
        order.hold((Some(10), 108), 108);
        order.finish_round();
        assert_eq!(
            ready(&mut order),
            Vec::<usize>::new(),
            "round 2 may go before them"
        );
        order.hold((Some(30), 116), 116);
        order.hold((Some(15), 124), 124);
        order.hold((Some(25), 132), 132);
        order.finish_round();
        // what is at most 20 (round 1's latest): 10, 15, 20; 25 and 30 wait for round 3
        assert_eq!(ready(&mut order), vec![108, 124, 100]);
        order.hold((Some(40), 140), 140);
        order.finish_round();
        assert_eq!(ready(&mut order), vec![132, 116]);
        order.finish();
        assert_eq!(ready(&mut order), vec![140]);
    }

    #[test]
    fn records_without_a_time_go_first_and_equal_times_in_file_order() {
        let mut order = Order::default();
        order.hold((Some(5), 124), 124);
        order.hold((None, 116), 116);
        order.hold((Some(5), 100), 100);
        order.hold((None, 108), 108);
        order.finish();
        assert_eq!(ready(&mut order), vec![108, 116, 100, 124]);
    }
}
