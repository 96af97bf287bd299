//! The one home of the texts the durable wheel stores in Redis that Rust writes or reads: each
//! format's encoder and decoder, side by side, tested against the Lua that writes and reads the
//! same text (`src/durable/tests/formats.rs`, on a real server). docs/DESIGN.md's table of the
//! stored formats lists every one, this module's and the Lua-only ones.
//!
//! - [`Record`]: a pending task's record, the value under its key in `tasks`
//!   (`lua/includes/record.lua`): fixed fields, then tagged optional fields read by one loop
//!   that skips a tag it does not know, then the last error and the payload.
//! - [`Retry`]: the record's `r` field, a task's own retry settings.
//! - [`HistoryRun`]: one entry of the `history` list (`lua/includes/history.lua`), and the run a
//!   worker packs for it with each outcome.

use crate::durable::options::TaskOptions;

/// A pending task's record, read (record.lua's format):
/// `<due ms>:<deliveries>:<claim token>:<period ms>:<runs left>:<missed runs>:<optional fields><error length>:<error><payload>`,
/// each optional field `<tag letter><length>:<value>`: `c` the series' spec, `t` the trace
/// context, `r` the task's own retry settings ([`Retry`]), in any order; a tag this version does
/// not know is skipped (a record written by a later version reads), and kept in `unknown`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    pub(crate) due_ms: u64,
    pub(crate) deliveries: u32,
    /// The claim token, `0` while no worker holds the task.
    pub(crate) token: &'a [u8],
    /// The period of a fixed rate moved on in Lua, in ms; 0 for none.
    pub(crate) every_ms: u64,
    /// The runs of its series still to come, this one included; -1 for no limit.
    pub(crate) runs: i64,
    /// The missed-run policy's digit: `0` burst, `1` delay, `2` skip.
    pub(crate) missed: u8,
    pub(crate) spec: Option<&'a [u8]>,
    pub(crate) trace: Option<&'a [u8]>,
    pub(crate) retry: Option<&'a [u8]>,
    /// The optional fields of tags this version does not know: (tag, value), in their order.
    pub(crate) unknown: Vec<(u8, &'a [u8])>,
    pub(crate) error: &'a [u8],
    pub(crate) payload: &'a [u8],
}

impl<'a> Record<'a> {
    /// The record `text` reads as, or `None` for text not of its form (the scripts write none).
    pub(crate) fn read(text: &'a [u8]) -> Option<Record<'a>> {
        let mut rest = text;
        let due_ms = number(field(&mut rest)?)?;
        let deliveries = u32::try_from(number(field(&mut rest)?)?).unwrap_or(u32::MAX);
        let token = field(&mut rest)?;
        let every_ms = number(field(&mut rest)?)?;
        let runs = match field(&mut rest)? {
            [b'-', digits @ ..] => -i64::try_from(number(digits)?).ok()?,
            digits => i64::try_from(number(digits)?).ok()?,
        };
        let missed = match field(&mut rest)? {
            [digit] if digit.is_ascii_digit() => *digit,
            _ => return None,
        };
        let (mut spec, mut trace, mut retry, mut unknown) = (None, None, None, Vec::new());
        // The optional fields, up to the error's length (a digit).
        while let Some(&tag) = rest.first().filter(|b| b.is_ascii_alphabetic()) {
            rest = &rest[1..];
            let len = usize::try_from(number(field(&mut rest)?)?).ok()?;
            let value = rest.get(..len)?;
            rest = &rest[len..];
            // A known field left empty is absent, as record.lua reads it.
            let known = (!value.is_empty()).then_some(value);
            match tag {
                b'c' => spec = known,
                b't' => trace = known,
                b'r' => retry = known,
                _ => unknown.push((tag, value)),
            }
        }
        let error_len = usize::try_from(number(field(&mut rest)?)?).ok()?;
        let (error, payload) = (rest.get(..error_len)?, rest.get(error_len..)?);
        Some(Record { due_ms, deliveries, token, every_ms, runs, missed, spec, trace, retry, unknown, error, payload })
    }

    /// The record as text, as record.lua's `encode` writes it: the known optional fields in the
    /// order c, t, r, then the unknown ones as they were read. (The scripts write every record;
    /// this is the other half of the codec, for the tests that hold the two languages to it.)
    #[cfg(test)]
    pub(crate) fn write(&self) -> Vec<u8> {
        let mut out = format!(
            "{}:{}:{}:{}:{}:{}:",
            self.due_ms,
            self.deliveries,
            String::from_utf8_lossy(self.token),
            self.every_ms,
            self.runs,
            self.missed as char
        )
        .into_bytes();
        let known = [(b'c', self.spec), (b't', self.trace), (b'r', self.retry)];
        let known = known.into_iter().filter_map(|(tag, value)| Some((tag, value.filter(|v| !v.is_empty())?)));
        for (tag, value) in known.chain(self.unknown.iter().copied()) {
            out.push(tag);
            out.extend_from_slice(value.len().to_string().as_bytes());
            out.push(b':');
            out.extend_from_slice(value);
        }
        out.extend_from_slice(self.error.len().to_string().as_bytes());
        out.push(b':');
        out.extend_from_slice(self.error);
        out.extend_from_slice(self.payload);
        out
    }
}

/// A task's own retry settings, the record's `r` field: `<max attempts>/<backoff ms>`, either
/// number left out (empty) for the node's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Retry {
    pub(crate) max_attempts: Option<u32>,
    pub(crate) backoff_ms: Option<u64>,
}

impl Retry {
    /// The text of the record's retry field for a task's own `options`; "" for a task without
    /// settings of its own (its record has no such field).
    pub(crate) fn text_of(options: &TaskOptions) -> String {
        Retry { max_attempts: options.own_max_attempts(), backoff_ms: options.own_backoff_ms() }.write()
    }

    /// The task's own settings that a record's retry field holds.
    pub(crate) fn options_of(text: &[u8]) -> TaskOptions {
        let retry = Retry::read(text);
        let mut options = TaskOptions::new();
        if let Some(n) = retry.max_attempts {
            options = options.max_attempts(n);
        }
        if let Some(ms) = retry.backoff_ms {
            options = options.backoff(std::time::Duration::from_millis(ms));
        }
        options
    }

    /// The field's text; empty when both settings are the node's (the record has no such field).
    pub(crate) fn write(self) -> String {
        if self.max_attempts.is_none() && self.backoff_ms.is_none() {
            return String::new();
        }
        let max = self.max_attempts.map_or(String::new(), |n| n.to_string());
        let backoff = self.backoff_ms.map_or(String::new(), |ms| ms.to_string());
        format!("{max}/{backoff}")
    }

    /// The settings `text` holds; the node's (none of its own) for text that does not read.
    pub(crate) fn read(text: &[u8]) -> Retry {
        let text = std::str::from_utf8(text).unwrap_or("");
        let Some((max, backoff)) = text.split_once('/') else { return Retry::default() };
        Retry { max_attempts: max.parse().ok(), backoff_ms: backoff.parse().ok() }
    }
}

/// How a run ended, as a history entry's one-letter outcome says: `a`, `d` or `c`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Acknowledged,
    Dead,
    Cancelled,
    Snoozed,
}

/// One run in the wheel's history (history.lua's format):
/// `<ended ms>:<outcome>:<due ms>:<attempts>:<started ms>:<handler us>:<key length>:<key><error>`,
/// `started ms` and `handler us` empty when not known. A worker packs the part from the due
/// time to the key's length ([`HistoryRun::packed`]) with each outcome, so that the scripts only
/// join strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HistoryRun<'a> {
    pub(crate) ended_ms: u64,
    pub(crate) outcome: Ended,
    pub(crate) due_ms: u64,
    pub(crate) attempts: u32,
    /// When its handler started (ms on Redis's clock, as the worker's node estimates it) and how
    /// long it ran (µs); `None` when it never started or its last lease ran out.
    pub(crate) handler: Option<(u64, u64)>,
    pub(crate) key: &'a [u8],
    pub(crate) error: &'a [u8],
}

impl<'a> HistoryRun<'a> {
    /// The run of the delivery of `key` due at `due_ms`, its `attempt`-th, as a worker packs it:
    /// `<due ms>:<attempts>:<started ms>:<handler us>:<key length>:`.
    pub(crate) fn packed(key: &str, due_ms: u64, attempt: u32, handler: Option<(u64, u64)>) -> String {
        match handler {
            Some((started, took)) => format!("{due_ms}:{attempt}:{started}:{took}:{}:", key.len()),
            None => format!("{due_ms}:{attempt}:::{}:", key.len()),
        }
    }

    /// The entry `text` reads as, or `None` for text not of its form.
    pub(crate) fn read(text: &'a [u8]) -> Option<HistoryRun<'a>> {
        let mut rest = text;
        let ended_ms = number(field(&mut rest)?)?;
        let outcome = match field(&mut rest)? {
            b"a" => Ended::Acknowledged,
            b"d" => Ended::Dead,
            b"c" => Ended::Cancelled,
            b"s" => Ended::Snoozed,
            _ => return None,
        };
        let due_ms = number(field(&mut rest)?)?;
        let attempts = u32::try_from(number(field(&mut rest)?)?).unwrap_or(u32::MAX);
        let (started, took) = (field(&mut rest)?, field(&mut rest)?);
        let handler = match (number(started), number(took)) {
            (Some(started), Some(took)) => Some((started, took)),
            _ => None,
        };
        let key_len = usize::try_from(number(field(&mut rest)?)?).ok()?;
        let (key, error) = (rest.get(..key_len)?, rest.get(key_len..)?);
        Some(HistoryRun { ended_ms, outcome, due_ms, attempts, handler, key, error })
    }
}

/// The field before the next `:` of `rest`, which moves past it.
fn field<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let at = rest.iter().position(|&b| b == b':')?;
    let f = &rest[..at];
    *rest = &rest[at + 1..];
    Some(f)
}

/// A whole number written in decimal digits, as Lua's `%d+` reads one; `None` for anything
/// else (an empty field, a sign included).
fn number(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_record_text_reads_back_and_is_empty_without_settings() {
        assert_eq!(Retry::text_of(&TaskOptions::new()), "");
        let cases = [
            (TaskOptions::new().max_attempts(3), "3/"),
            (TaskOptions::new().backoff(Duration::from_millis(250)), "/250"),
            (TaskOptions::new().max_attempts(1).backoff(Duration::ZERO), "1/0"),
        ];
        for (options, text) in cases {
            assert_eq!(Retry::text_of(&options), text);
            assert_eq!(Retry::options_of(text.as_bytes()), options);
        }
        // A backoff is rounded up to whole ms.
        assert_eq!(Retry::text_of(&TaskOptions::new().backoff(Duration::from_micros(1500))), "/2");
    }

    const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 rojo=00f067aa0ba902b7";

    /// A record reads whole with its optional fields in any order, with a tag this version does
    /// not know (skipped, kept), and with none; the error and payload after them stay intact, and
    /// writing it back gives record.lua's order.
    #[test]
    fn a_record_reads_its_tagged_fields_in_any_order_and_skips_unknown_ones() {
        let spec = "0 every 100";
        let text =
            format!("1000:2:77:0:-1:2:r5:3/250t{}:{TRACE}c{}:{spec}x3:new4:boompay:load", TRACE.len(), spec.len());
        let r = Record::read(text.as_bytes()).expect("reads");
        assert_eq!((r.due_ms, r.deliveries, r.token, r.every_ms, r.runs, r.missed), (1000, 2, &b"77"[..], 0, -1, b'2'));
        assert_eq!((r.spec, r.trace, r.retry), (Some(spec.as_bytes()), Some(TRACE.as_bytes()), Some(&b"3/250"[..])));
        assert_eq!(
            (r.unknown.clone(), r.error, r.payload),
            (vec![(b'x', &b"new"[..])], &b"boom"[..], &b"pay:load"[..])
        );
        let written = String::from_utf8(r.write()).unwrap();
        assert_eq!(
            written,
            format!("1000:2:77:0:-1:2:c{}:{spec}t{}:{TRACE}r5:3/250x3:new4:boompay:load", spec.len(), TRACE.len())
        );
        assert_eq!(Record::read(written.as_bytes()).unwrap(), r);

        let plain = Record::read(b"5:0:0:0:0:0:0:x").expect("reads");
        assert_eq!((plain.spec, plain.trace, plain.retry, plain.payload), (None, None, None, &b"x"[..]));
        assert_eq!(plain.write(), b"5:0:0:0:0:0:0:x");
        let empty = Record::read(b"5:0:0:0:0:0:c0:r0:0:x").expect("reads");
        assert_eq!((empty.spec, empty.retry), (None, None), "an empty known field is absent, as in Lua");
        for bad in [
            &b""[..],
            b"5:0:0:0:0:0:",
            b"5:0:0:0:0:0:9:short",
            b"5:0:0:0:0:0:c9:x0:",
            b"+5:0:0:0:0:0:0:",
            b"5:0:0:0:0:22:0:",
        ] {
            assert_eq!(Record::read(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn retry_settings_round_trip_and_bad_text_is_the_nodes() {
        let own = Retry { max_attempts: Some(3), backoff_ms: Some(250) };
        assert_eq!(own.write(), "3/250");
        assert_eq!(Retry::read(b"3/250"), own);
        assert_eq!(Retry::read(b"/9"), Retry { max_attempts: None, backoff_ms: Some(9) });
        assert_eq!(Retry::default().write(), "");
        assert_eq!(Retry::read(b"nonsense"), Retry::default());
    }

    #[test]
    fn a_history_run_reads_what_a_worker_packed() {
        let packed = HistoryRun::packed("order:42", 1000, 2, Some((1005, 1500)));
        let text = format!("2000:a:{packed}order:42");
        let run = HistoryRun::read(text.as_bytes()).expect("reads");
        assert_eq!(
            run,
            HistoryRun {
                ended_ms: 2000,
                outcome: Ended::Acknowledged,
                due_ms: 1000,
                attempts: 2,
                handler: Some((1005, 1500)),
                key: b"order:42",
                error: b"",
            }
        );
        let dead = format!("2000:d:{}k:1boom", HistoryRun::packed("k:1", 1000, 5, None));
        let run = HistoryRun::read(dead.as_bytes()).expect("reads");
        assert_eq!((run.outcome, run.handler, run.key, run.error), (Ended::Dead, None, &b"k:1"[..], &b"boom"[..]));
        assert_eq!(HistoryRun::read(b"2000:z:1:1:::1:k"), None);
    }
}
