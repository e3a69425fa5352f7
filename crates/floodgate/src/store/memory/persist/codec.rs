//! Entries as the log and the snapshot hold them: each `length (u32 LE) | crc32 (u32 LE) |
//! payload`, the payload a key's state, its removal, a reservation record, a snapshot's end, or a
//! group of entries that stand or fall together; and the files' headers.

use floodgate_core::{LeaseState, LogState, QuotaState, SlidingState, Timestamp, WindowState};

use crate::store::memory::Kept;
use crate::store::memory::slot::State;

pub(super) const WAL_MAGIC: &[u8; 8] = b"FGWAL\0\0\x01";
pub(super) const SNAP_MAGIC: &[u8; 8] = b"FGSNP\0\0\x01";
pub(super) const HEADER: usize = 8;
/// The largest entry (a sliding log's entries bound it).
const MAX_ENTRY: usize = 256 << 20;

const PUT: u8 = 1;
const DELETE: u8 = 2;
const RECORD: u8 = 3;
const END: u8 = 4;
/// Entries that stand or fall together: replay applies all of them or, when the group is torn, none.
const GROUP: u8 = 5;

/// The state tag of a quota written before quotas kept their previous period's count: start,
/// count. Still read (the previous count as 0), no longer written.
const QUOTA_WITHOUT_PREV: u8 = 4;
/// The state tag of a quota: start, count, the previous period's count.
const QUOTA: u8 = 10;

/// Appends one framed entry: `payload` writes it.
fn frame(buf: &mut Vec<u8>, payload: impl FnOnce(&mut Vec<u8>)) {
    let at = buf.len();
    buf.extend_from_slice(&[0; 8]);
    payload(buf);
    let len = (buf.len() - at - 8) as u32;
    let crc = crc32fast::hash(&buf[at + 8..]);
    buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
    buf[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
}

fn put_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buf.extend_from_slice(bytes);
}

fn put_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// A key's state after a change (or its removal, when it holds none).
pub(crate) fn encode_key(buf: &mut Vec<u8>, key: &[u8], state: &State, expires_secs: u32) {
    frame(buf, |b| {
        let tag = match state {
            State::Tat(_) => 1,
            State::Gcra(_) => 2,
            State::Window(_) => 3,
            State::Quota(_) => QUOTA,
            State::Budget(_) => 5,
            State::Sliding(_) => 6,
            State::Log(_) => 7,
            State::Lease(_) => 8,
            State::Blocked(_) => 9,
            State::Empty | State::Dead | State::Reserved => {
                b.push(DELETE);
                put_bytes(b, key);
                return;
            }
        };
        b.push(PUT);
        put_bytes(b, key);
        b.extend_from_slice(&expires_secs.to_le_bytes());
        b.push(tag);
        match state {
            State::Tat(t) | State::Gcra(t) | State::Blocked(t) => put_u64(b, *t),
            State::Window(w) | State::Budget(w) => {
                put_u64(b, w.start);
                put_u64(b, w.count);
            }
            State::Quota(q) => {
                put_u64(b, q.start);
                put_u64(b, q.count);
                put_u64(b, q.prev);
            }
            State::Sliding(s) => {
                put_u64(b, s.start);
                put_u64(b, s.prev);
                put_u64(b, s.curr);
            }
            State::Log(log) => {
                put_u64(b, log.entries.len() as u64);
                for (t, c) in &log.entries {
                    put_u64(b, *t);
                    put_u64(b, *c);
                }
            }
            State::Lease(l) => {
                put_u64(b, l.next_id);
                put_u64(b, l.leases.len() as u64);
                for (id, until, cost) in &l.leases {
                    put_u64(b, *id);
                    put_u64(b, *until);
                    put_u64(b, *cost);
                }
            }
            State::Empty | State::Dead | State::Reserved => unreachable!("returned above"),
        }
    });
}

/// A key's removal.
pub(crate) fn encode_delete(buf: &mut Vec<u8>, key: &[u8]) {
    encode_key(buf, key, &State::Empty, 0);
}

/// A reservation record as it is now.
pub(crate) fn encode_record(buf: &mut Vec<u8>, id: &[u8], r: &Kept) {
    frame(buf, |b| {
        b.push(RECORD);
        put_bytes(b, id);
        put_bytes(b, &r.body);
        put_u64(b, r.expires_at.as_micros());
        put_u64(b, r.forget_at.as_micros());
        match &r.settled {
            Some(s) => {
                b.push(1);
                put_bytes(b, s);
            }
            None => b.push(0),
        }
    });
}

/// Entries that stand or fall together, as one framed entry: `entries` writes them (framed by the
/// functions above). Not nested. The group's checksum covers them, so theirs are zeroed: a group
/// torn off the tail then holds nothing that reads as a valid entry of its own, and is dropped
/// whole as a torn tail rather than taken for corruption before one.
pub(crate) fn encode_group(buf: &mut Vec<u8>, entries: impl FnOnce(&mut Vec<u8>)) {
    frame(buf, |b| {
        b.push(GROUP);
        let mut pos = b.len();
        entries(b);
        while pos + 8 <= b.len() {
            let len = u32::from_le_bytes([b[pos], b[pos + 1], b[pos + 2], b[pos + 3]]) as usize;
            b[pos + 4..pos + 8].fill(0);
            pos += 8 + len;
        }
    });
}

/// A snapshot's end: the number of entries it holds.
pub(super) fn encode_end(buf: &mut Vec<u8>, count: u64) {
    frame(buf, |b| {
        b.push(END);
        put_u64(b, count);
    });
}

/// One decoded entry.
pub(super) enum Entry {
    Put(Box<[u8]>, State, u32),
    Delete(Box<[u8]>),
    Record(Box<[u8]>, Kept),
    End(u64),
    Group(Vec<Entry>),
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// A count of items of `size` bytes each, checked against what is left.
    fn count(&mut self, size: usize) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        (n.checked_mul(size)? <= self.bytes.len()).then_some(n)
    }
}

pub(super) fn decode(payload: &[u8]) -> Option<Entry> {
    let mut r = Reader { bytes: payload };
    let entry = match r.u8()? {
        PUT => {
            let key = r.bytes()?.into();
            let expires = r.u32()?;
            let state = match r.u8()? {
                1 => State::Tat(r.u64()?),
                2 => State::Gcra(r.u64()?),
                3 => State::Window(WindowState { start: r.u64()?, count: r.u64()? }),
                QUOTA_WITHOUT_PREV => State::Quota(QuotaState { start: r.u64()?, count: r.u64()?, prev: 0 }),
                5 => State::Budget(WindowState { start: r.u64()?, count: r.u64()? }),
                QUOTA => State::Quota(QuotaState { start: r.u64()?, count: r.u64()?, prev: r.u64()? }),
                6 => State::Sliding(SlidingState { start: r.u64()?, prev: r.u64()?, curr: r.u64()? }),
                7 => {
                    let n = r.count(16)?;
                    let mut log = LogState::default();
                    for _ in 0..n {
                        log.entries.push_back((r.u64()?, r.u64()?));
                    }
                    State::Log(Box::new(log))
                }
                8 => {
                    let next_id = r.u64()?;
                    let n = r.count(24)?;
                    let mut leases = Vec::with_capacity(n);
                    for _ in 0..n {
                        leases.push((r.u64()?, r.u64()?, r.u64()?));
                    }
                    State::Lease(Box::new(LeaseState { leases, next_id }))
                }
                9 => State::Blocked(r.u64()?),
                _ => return None,
            };
            Entry::Put(key, state, expires)
        }
        DELETE => Entry::Delete(r.bytes()?.into()),
        RECORD => {
            let id = r.bytes()?.into();
            let body = r.bytes()?.to_vec();
            let expires_at = Timestamp::from_micros(r.u64()?);
            let forget_at = Timestamp::from_micros(r.u64()?);
            let settled = match r.u8()? {
                0 => None,
                1 => Some(r.bytes()?.to_vec()),
                _ => return None,
            };
            Entry::Record(id, Kept { body, expires_at, forget_at, settled })
        }
        END => Entry::End(r.u64()?),
        GROUP => {
            let bytes = r.bytes;
            r.bytes = &[];
            let mut entries = Vec::new();
            let mut pos = 0;
            while pos < bytes.len() {
                let (payload, end) = grouped_at(bytes, pos)?;
                match decode(payload)? {
                    Entry::Group(_) | Entry::End(_) => return None,
                    entry => entries.push(entry),
                }
                pos = end;
            }
            Entry::Group(entries)
        }
        _ => return None,
    };
    r.bytes.is_empty().then_some(entry)
}

/// The valid entry at `pos`, if one is there: its payload and end.
pub(super) fn entry_at(bytes: &[u8], pos: usize) -> Result<(&[u8], usize), &'static str> {
    let rest = &bytes[pos..];
    if rest.len() < 8 {
        return Err("an entry header cut short");
    }
    let len = u32::from_le_bytes(rest[..4].try_into().unwrap_or_default()) as usize;
    let crc = u32::from_le_bytes(rest[4..8].try_into().unwrap_or_default());
    if len == 0 || len > MAX_ENTRY {
        return Err("an impossible entry length");
    }
    if rest.len() < 8 + len {
        return Err("an entry cut short");
    }
    let payload = &rest[8..8 + len];
    if crc32fast::hash(payload) != crc {
        return Err("a checksum mismatch");
    }
    Ok((payload, pos + 8 + len))
}

/// The entry of a group at `pos` (see [`encode_group`]): its payload and end.
fn grouped_at(bytes: &[u8], pos: usize) -> Option<(&[u8], usize)> {
    let header = bytes.get(pos..pos + 8)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if len == 0 || header[4..] != [0; 4] {
        return None;
    }
    Some((bytes.get(pos + 8..pos + 8 + len)?, pos + 8 + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quota state of the one entry in `bytes`, with its key and expiry.
    fn quota_in(bytes: &[u8]) -> (Box<[u8]>, QuotaState, u32) {
        let (payload, end) = entry_at(bytes, 0).expect("a valid entry");
        assert_eq!(end, bytes.len());
        match decode(payload) {
            Some(Entry::Put(key, State::Quota(q), expires)) => (key, q, expires),
            _ => panic!("not a quota's state"),
        }
    }

    #[test]
    fn a_quota_keeps_its_previous_count_on_disk() {
        let state = QuotaState { start: 1_736_895_600_000_000, count: 12, prev: 34 };
        let mut buf = Vec::new();
        encode_key(&mut buf, b"k", &State::Quota(state), 1_739_574_000);
        assert_eq!(quota_in(&buf), (b"k".to_vec().into_boxed_slice(), state, 1_739_574_000));
    }

    #[test]
    fn a_quota_written_before_previous_counts_were_kept_still_loads() {
        // What a store of the previous release wrote: tag 4, start and count.
        let mut buf = Vec::new();
        frame(&mut buf, |b| {
            b.push(PUT);
            put_bytes(b, b"k");
            b.extend_from_slice(&1_736_895_600u32.to_le_bytes());
            b.push(QUOTA_WITHOUT_PREV);
            put_u64(b, 1_734_217_200_000_000);
            put_u64(b, 7);
        });
        let (_, state, expires) = quota_in(&buf);
        assert_eq!(state, QuotaState { start: 1_734_217_200_000_000, count: 7, prev: 0 });
        assert_eq!(expires, 1_736_895_600);
    }
}
