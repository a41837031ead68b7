//! The kernel's symbols as /proc/kallsyms lists them (a capture saves a copy): read here,
//! where a Python loop over its ~150,000 lines took a tenth of a second.

use pyo3::prelude::*;

/// The kallsyms lines perf takes symbols from ("ADDRESS TYPE NAME", with TYPE one of
/// `types`, the address in at most 16 hex digits and a name after it): each one's address,
/// where its name starts and its line ends in `text`, and its type.
#[pyfunction]
pub fn kallsyms_lines(text: &[u8], types: &[u8]) -> (Vec<u64>, Vec<usize>, Vec<usize>, Vec<u8>) {
    let (mut addresses, mut name_starts, mut line_ends, mut kinds) =
        (vec![], vec![], vec![], vec![]);
    let mut line_start = 0;
    for line in text.split(|&byte| byte == b'\n') {
        let line_end = line_start + line.len();
        if let Some(space) = line.iter().position(|&byte| byte == b' ') {
            let kept = (1..=16).contains(&space)
                && space + 3 < line.len()
                && types.contains(&line[space + 1])
                && line[space + 2] == b' ';
            let address = std::str::from_utf8(&line[..space])
                .ok()
                .filter(|digits| digits.bytes().all(|digit| digit.is_ascii_hexdigit()))
                .and_then(|digits| u64::from_str_radix(digits, 16).ok());
            if let (true, Some(address)) = (kept, address) {
                addresses.push(address);
                name_starts.push(line_start + space + 3);
                line_ends.push(line_end);
                kinds.push(line[space + 1]);
            }
        }
        line_start = line_end + 1;
    }
    (addresses, name_starts, line_ends, kinds)
}
