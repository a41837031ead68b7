//! The tracepoints' formats perf saved at record time (the TRACING_DATA feature
//! section): where each field of a tracepoint's raw data is, and how perf prints
//! sched_switch's prev_state, read from its print format.

use std::collections::HashMap;

const TRACING_MAGIC: &[u8] = b"\x17\x08\x44tracing";

/// A tracepoint field as its format gives it.
#[derive(Clone, Copy)]
pub struct Field {
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
}

impl Field {
    /// The field's integer in a tracepoint's raw data (None when it runs past the end or is
    /// not 1, 2, 4 or 8 bytes long).
    pub fn integer(&self, raw: &[u8]) -> Option<i64> {
        let bytes = raw.get(self.offset..self.offset.checked_add(self.size)?)?;
        let mut word = [0u8; 8];
        word[..self.size.min(8)].copy_from_slice(bytes.get(..self.size.min(8))?);
        let value = u64::from_le_bytes(word);
        let bits = match self.size {
            1 | 2 | 4 | 8 => self.size * 8,
            _ => return None,
        };
        if self.signed && bits < 64 {
            let shift = 64 - bits;
            Some(((value << shift) as i64) >> shift)
        } else {
            Some(value as i64)
        }
    }
}

/// One tracepoint's format.
pub struct Tracepoint {
    pub full_name: String,
    pub id: u64,
    pub fields: HashMap<String, Field>,
    pub print_fmt: String,
}

/// Reads the tracing data section front to back.
struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn string(&mut self) -> Option<&'a [u8]> {
        let rest = self.data.get(self.at..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        self.at += end + 1;
        rest.get(..end)
    }

    fn number(&mut self, size: usize) -> Option<u64> {
        let bytes = self.data.get(self.at..self.at.checked_add(size)?)?;
        self.at += size;
        let mut word = [0u8; 8];
        word.get_mut(..size)?.copy_from_slice(bytes);
        Some(u64::from_le_bytes(word))
    }

    fn block(&mut self, size_bytes: usize) -> Option<&'a [u8]> {
        let length = usize::try_from(self.number(size_bytes)?).ok()?;
        let block = self.data.get(self.at..self.at.checked_add(length)?)?;
        self.at += length;
        Some(block)
    }
}

/// The tracepoints by id: after a magic, version, endianness, long size and page size come
/// the ring buffer's header_page and header_event, the ftrace formats, then each system's
/// event formats (the text of tracefs' events/SYSTEM/NAME/format), with 8-byte sizes.
/// Empty when unreadable.
pub fn tracepoints(section: &[u8]) -> HashMap<u64, Tracepoint> {
    read_tracepoints(section).unwrap_or_default()
}

fn read_tracepoints(section: &[u8]) -> Option<HashMap<u64, Tracepoint>> {
    if !section.starts_with(TRACING_MAGIC) {
        return None;
    }
    let mut cursor = Cursor {
        data: section,
        at: TRACING_MAGIC.len(),
    };
    cursor.string()?; // version
    if cursor.number(1)? != 0 {
        return None; // big endian
    }
    cursor.number(1)?; // sizeof(long)
    cursor.number(4)?; // page size
    for expected in [&b"header_page"[..], b"header_event"] {
        if cursor.string()? != expected {
            return None;
        }
        cursor.block(8)?;
    }
    for _ in 0..cursor.number(4)? {
        cursor.block(8)?; // ftrace's own events
    }
    let mut found = HashMap::new();
    for _ in 0..cursor.number(4)? {
        let system = String::from_utf8_lossy(cursor.string()?).into_owned();
        for _ in 0..cursor.number(4)? {
            let text = String::from_utf8_lossy(cursor.block(8)?).into_owned();
            if let Some(tracepoint) = parse_format(&system, &text) {
                found.insert(tracepoint.id, tracepoint);
            }
        }
    }
    Some(found)
}

/// A tracefs format text ("name: ...", "ID: ...", "format:" and its fields, "print fmt: ...").
fn parse_format(system: &str, text: &str) -> Option<Tracepoint> {
    let mut name = None;
    let mut id = None;
    let mut print_fmt = String::new();
    let mut fields = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("name: ") {
            name =
                Some(rest).filter(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace));
        } else if let Some(rest) = line.strip_prefix("ID: ") {
            id = rest.parse::<u64>().ok();
        } else if let Some(rest) = line.strip_prefix("print fmt: ") {
            print_fmt = rest.to_string();
        } else if let Some((field_name, field)) = parse_field(line) {
            fields.insert(field_name, field);
        }
    }
    Some(Tracepoint {
        full_name: format!("{system}:{}", name?),
        id: id?,
        fields,
        print_fmt,
    })
}

/// "\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;"
fn parse_field(line: &str) -> Option<(String, Field)> {
    let rest = line.trim_start().strip_prefix("field:")?;
    let mut parts = rest.split(';').map(str::trim);
    let declaration = parts.next()?;
    let mut number = |key: &str| parts.next()?.strip_prefix(key)?.parse::<usize>().ok();
    let offset = number("offset:")?;
    let size = number("size:")?;
    let signed = number("signed:")? == 1;
    let declared = declaration.split_whitespace().last()?;
    let name = declared.split('[').next()?.to_string();
    Some((
        name,
        Field {
            offset,
            size,
            signed,
        },
    ))
}

/// How perf prints sched_switch's prev_state: the bits under `mask` as __print_flags names
/// joined by `delimiter` (`zero` when none is set); the '+' after them offcpu drops.
pub struct StateNames {
    mask: i128,
    flags: Vec<(i128, String)>,
    delimiter: String,
    zero: String,
}

impl StateNames {
    pub fn name(&self, state: i64) -> String {
        let mut value = i128::from(state) & self.mask;
        if value == 0 {
            return self.zero.clone();
        }
        let mut names = Vec::new();
        for (bit, name) in &self.flags {
            if *bit != 0 && value & bit == *bit {
                names.push(name.clone());
                value &= !bit;
            }
        }
        if value != 0 {
            names.push(format!("0x{value:x}"));
        }
        names.join(&self.delimiter)
    }

    /// The print format's prev_state part, when it has the shape of kernels since 4.14:
    /// `(REC->prev_state & (MASK)) ? __print_flags(REC->prev_state & (MASK), "|", { 0x01, "S" },
    /// ...) : "R"`.
    pub fn of(print_fmt: &str) -> Option<StateNames> {
        const TEST: &str = "(REC->prev_state & ";
        const FLAGS: &str = ") ? __print_flags(REC->prev_state & ";
        for (start, _) in print_fmt.match_indices(TEST) {
            let after = start + TEST.len();
            for (separator, _) in print_fmt[after..].match_indices(FLAGS) {
                let mask = &print_fmt[after..after + separator];
                let rest = &print_fmt[after + separator + FLAGS.len()..];
                if let Some(found) = rest
                    .strip_prefix(mask)
                    .and_then(|rest| Self::after_mask(mask, rest))
                {
                    return found;
                }
            }
        }
        None
    }

    /// The rest after the second mask: `, "DELIMITER", FLAGS) : "ZERO"`. Some(None): the shape
    /// is there but a number is not.
    fn after_mask(mask: &str, rest: &str) -> Option<Option<StateNames>> {
        let rest = rest.strip_prefix(", \"")?;
        let (delimiter, mut rest) = rest.split_once('"')?;
        rest = rest.strip_prefix(", ")?;
        let mut flags = Vec::new();
        let mut valid = true;
        while let Some(flag) = rest.strip_prefix('{') {
            let (value, after) = flag.trim_start_matches(' ').split_once(',')?;
            let after = after.trim_start_matches(' ').strip_prefix('"')?;
            let (name, after) = after.split_once('"')?;
            rest = after.trim_start_matches(' ').strip_prefix('}')?;
            rest = rest
                .strip_prefix(',')
                .unwrap_or(rest)
                .trim_start_matches(' ');
            if value.is_empty() || !value.chars().all(|c| c.is_ascii_hexdigit() || c == 'x') {
                return None;
            }
            match literal(value) {
                Some(value) => flags.push((value, name.to_string())),
                None => valid = false,
            }
        }
        if flags.is_empty() && valid {
            return None;
        }
        let rest = rest.strip_prefix(") : \"")?;
        let (zero, _) = rest.split_once('"')?;
        let mask = constant(mask);
        Some(match (mask, valid) {
            (Some(mask), true) => Some(StateNames {
                mask,
                flags,
                delimiter: delimiter.to_string(),
                zero: zero.to_string(),
            }),
            _ => None,
        })
    }
}

/// A C integer literal of a print format: hexadecimal, or decimal without a leading 0.
fn literal(text: &str) -> Option<i128> {
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        return i128::from_str_radix(hex, 16).ok();
    }
    if text.len() > 1 && text.starts_with('0') {
        return None;
    }
    text.parse::<i128>().ok()
}

/// The value of a constant expression of a print format: numbers, | & << >> + - and
/// parentheses, by C's (and Python's) precedence; None for anything else.
pub fn constant(expression: &str) -> Option<i128> {
    let tokens = tokens(expression)?;
    let mut parser = Parser {
        tokens,
        at: 0,
        depth: 0,
    };
    let value = parser.or()?;
    (parser.at == parser.tokens.len()).then_some(value)
}

#[derive(Clone, PartialEq)]
enum Token {
    Number(i128),
    Op(&'static str),
}

fn tokens(expression: &str) -> Option<Vec<Token>> {
    let mut tokens = Vec::new();
    let bytes = expression.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &expression[at..];
        if bytes[at] == b' ' {
            at += 1;
        } else if bytes[at].is_ascii_digit() {
            let length = rest
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            tokens.push(Token::Number(literal(&rest[..length])?));
            at += length;
        } else {
            let op = ["<<", ">>", "|", "&", "+", "-", "(", ")"]
                .into_iter()
                .find(|op| rest.starts_with(op))?;
            tokens.push(Token::Op(op));
            at += op.len();
        }
    }
    Some(tokens)
}

/// Parentheses nested deeper than this are not a constant of a print format (the kernel's
/// nest a few deep): the parser recurses once for each, and a crafted format would overflow
/// the stack.
const MAX_DEPTH: usize = 64;

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    /// how many parentheses the parser is inside
    depth: usize,
}

impl Parser {
    fn next_is(&mut self, ops: &[&'static str]) -> Option<&'static str> {
        match self.tokens.get(self.at) {
            Some(Token::Op(op)) if ops.contains(op) => {
                self.at += 1;
                Some(op)
            }
            _ => None,
        }
    }

    fn or(&mut self) -> Option<i128> {
        let mut value = self.and()?;
        while self.next_is(&["|"]).is_some() {
            value |= self.and()?;
        }
        Some(value)
    }

    fn and(&mut self) -> Option<i128> {
        let mut value = self.shift()?;
        while self.next_is(&["&"]).is_some() {
            value &= self.shift()?;
        }
        Some(value)
    }

    fn shift(&mut self) -> Option<i128> {
        let mut value = self.sum()?;
        while let Some(op) = self.next_is(&["<<", ">>"]) {
            let by = u32::try_from(self.sum()?).ok().filter(|by| *by < 64)?;
            value = if op == "<<" {
                value.checked_shl(by)?
            } else {
                value >> by
            };
        }
        Some(value)
    }

    fn sum(&mut self) -> Option<i128> {
        let mut value = self.atom()?;
        while let Some(op) = self.next_is(&["+", "-"]) {
            let right = self.atom()?;
            value = if op == "+" {
                value.checked_add(right)?
            } else {
                value.checked_sub(right)?
            };
        }
        Some(value)
    }

    fn atom(&mut self) -> Option<i128> {
        match self.tokens.get(self.at).cloned() {
            Some(Token::Number(value)) => {
                self.at += 1;
                Some(value)
            }
            Some(Token::Op("(")) if self.depth < MAX_DEPTH => {
                self.at += 1;
                self.depth += 1;
                let value = self.or()?;
                self.depth -= 1;
                self.next_is(&[")"])?;
                Some(value)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parentheses_nested_too_deeply_are_no_constant_and_no_overflow() {
        assert_eq!(constant("((1 << 2)) | (((1))) + 1"), Some(6));
        let deep = |depth: usize| format!("{}1{}", "(".repeat(depth), ")".repeat(depth));
        assert_eq!(constant(&deep(MAX_DEPTH)), Some(1));
        assert_eq!(constant(&deep(MAX_DEPTH + 1)), None);
        assert_eq!(constant(&deep(1_000_000)), None);
    }
}
