//! bpf-records.bin walked, checked and cut into slices, each expected value worked out by hand.

use std::path::PathBuf;

use super::*;

/// A records file of these records in a directory of its own (removed by the caller).
fn written(name: &str, records: &[Record]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("offcpu-records-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let path = dir.join("bpf-records.bin");
    let bytes: Vec<u8> = records.iter().flat_map(Record::bytes).collect();
    std::fs::write(&path, bytes).expect("the records");
    path
}

fn wait(since: u64, woken: u64, back: u64) -> Record {
    Record {
        kind: WAIT,
        pid: 7,
        tid: 8,
        since_ns: since,
        woken_ns: woken,
        back_ns: back,
        kernel_stack: NOT_TAKEN,
        user_stack: NOT_TAKEN,
        waker_kernel_stack: NOT_TAKEN,
        waker_user_stack: NOT_TAKEN,
        ..Record::default()
    }
}

#[test]
fn a_field_beyond_the_kernels_limits_is_named_with_its_largest_value() {
    // tid 5,000,000 and 6,000,000 in two records, more than PID_MAX_LIMIT (2^22 = 4,194,304);
    // a cpu of 70,000 too, but the tid is checked first
    let path = written(
        "limits",
        &[
            Record {
                tid: 5_000_000,
                cpu: 70_000,
                ..wait(1, 0, 2)
            },
            Record {
                tid: 6_000_000,
                ..wait(3, 0, 4)
            },
        ],
    );
    let error = RecordsFile::open(&path).err();
    std::fs::remove_dir_all(path.parent().expect("its directory")).expect("removed");
    match error {
        Some(FileError::Damaged(what)) => assert_eq!(
            what,
            "a record whose tid is 6,000,000, more than the 4,194,304 it can be"
        ),
        _ => panic!("no damage found"),
    }
}

#[test]
fn records_of_unknown_kinds_and_one_cut_short_are_unreadable() {
    let path = written(
        "unknown",
        &[
            wait(1, 0, 2),
            Record {
                kind: 9,
                tid: 1 << 30,
                ..wait(3, 0, 4)
            },
        ],
    );
    let mut bytes = std::fs::read(&path).expect("read");
    bytes.extend([0u8; 50]); // a last record written in part
    std::fs::write(&path, bytes).expect("written");
    let walked = RecordsFile::open(&path);
    std::fs::remove_dir_all(path.parent().expect("its directory")).expect("removed");
    // an unknown kind's fields are not checked: 1 unknown + 1 cut short
    assert_eq!(walked.ok().map(|walked| walked.unreadable()), Some(2));
}

#[test]
fn slices_are_cut_where_equal_shares_of_the_waits_times_fall() {
    // the times from 50 to 1000: 100, 200 (the first wait, never woken: 0 is before the start),
    // 300, 350, 400; sorted, the cut of two slices is the time of rank 5 * 1 / 2 = 2 (300), of
    // three the times of ranks 5 / 3 = 1 (200) and 10 / 3 = 3 (350); a fork's time is no wait's
    let path = written(
        "slices",
        &[
            wait(100, 0, 200),
            Record {
                kind: FORK,
                ..wait(120, 0, 0)
            },
            wait(300, 350, 400),
        ],
    );
    let walked = RecordsFile::open(&path).ok().expect("walked");
    let two = walked.time_slices(50, 1000, 2).ok();
    let three = walked.time_slices(50, 1000, 3).ok();
    let one = walked.time_slices(50, 1000, 1).ok();
    std::fs::remove_dir_all(path.parent().expect("its directory")).expect("removed");
    assert_eq!(two, Some(vec![(50, 299), (300, 1000)]));
    assert_eq!(three, Some(vec![(50, 199), (200, 349), (350, 1000)]));
    assert_eq!(one, Some(vec![(50, 1000)]));
}

#[test]
fn numbers_are_grouped_by_thousands() {
    assert_eq!(
        [0, 999, 1000, 4_194_304, 9_223_372_036_854_775_807].map(grouped),
        [
            "0",
            "999",
            "1,000",
            "4,194,304",
            "9,223,372,036,854,775,807"
        ]
    );
}
