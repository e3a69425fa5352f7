//! `write: accept_async`: writes accepted while the upstream cannot take them, kept durably, replayed
//! once it can, and their outcome kept for the client to fetch.
//!
//! - **Accepting**: the whole request (method, path and query, headers, body up to
//!   `max_accepted_body`) is appended to `<state_dir>/accepted.log` and `fsync`ed **before** the
//!   client is answered `202 Accepted` with the write's id (`Location:
//!   /_floodgate/accepted/<id>`). Nothing answered 202 is lost across a crash or `kill -9`.
//! - **Replaying**: one task sends the pending writes to their route's upstream, oldest first, one
//!   at a time, while the route's breaker lets calls through; a write the upstream answered (any
//!   status below 500) is done, and its outcome (status, content type, the body's first 64 KiB)
//!   appended to the log; a 5xx or no answer leaves it pending, and the task waits before trying
//!   again.
//! - **Fetching**: `GET /_floodgate/accepted/<id>` on the gateway's listener answers
//!   `{"id", "state": "pending"}` or `{"id", "state": "delivered", "status", "content_type",
//!   "body"}`.
//!
//! The log's format is this module's own: a line `floodgate-accepted 1`, then records, each `u32`
//! length (little-endian) of what follows the kind, a kind byte (1 accepted, 2 outcome), the
//! fields (each a `u32` length and its bytes, or a fixed-width number), and an FNV-1a 64 checksum of
//! the kind and fields. Opening the log reads every whole record, cuts a torn last record (a crash in
//! the middle of an append), and rewrites the log with the pending writes and the last
//! [`KEPT_OUTCOMES`] outcomes, so that it stays bounded across restarts.

use std::collections::{HashMap, VecDeque};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::Notify;

/// The file in `state_dir`.
const FILE: &str = "accepted.log";
/// Its first line.
const MAGIC: &[u8] = b"floodgate-accepted 1\n";
/// Outcomes kept (in memory, and in the log across restarts).
pub(super) const KEPT_OUTCOMES: usize = 10_000;
/// The part of an outcome's body kept.
pub(super) const KEPT_BODY: usize = 64 << 10;

/// The queue cannot be opened or written.
#[derive(Debug, thiserror::Error)]
#[error("accepted writes ({path}): {source}")]
pub struct QueueError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

/// A write accepted for later.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Accepted {
    pub(super) id: String,
    pub(super) route: String,
    pub(super) method: String,
    pub(super) path_and_query: String,
    pub(super) headers: Vec<(String, Vec<u8>)>,
    pub(super) body: Bytes,
}

/// What the upstream answered to a replayed write.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct Delivered {
    pub(super) status: u16,
    pub(super) content_type: Option<String>,
    pub(super) body: String,
}

#[derive(Debug, Default)]
struct State {
    pending: VecDeque<Accepted>,
    outcomes: HashMap<String, Delivered>,
    /// Outcome ids, oldest first, to forget beyond [`KEPT_OUTCOMES`].
    order: VecDeque<String>,
}

/// The accepted writes: the log file and what it holds.
#[derive(Debug)]
pub(super) struct Queue {
    path: PathBuf,
    file: Arc<Mutex<std::fs::File>>,
    state: Mutex<State>,
    /// Woken when a write is accepted.
    pub(super) arrived: Notify,
}

impl Queue {
    /// Opens (or creates) the log in `dir`, recovering what it holds.
    pub(super) fn open(dir: &Path) -> Result<Queue, QueueError> {
        let path = dir.join(FILE);
        let fail = |source| QueueError { path: path.clone(), source };
        std::fs::create_dir_all(dir).map_err(fail)?;
        let text = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(fail(e)),
        };
        let mut state = State::default();
        let records = if text.is_empty() {
            Vec::new()
        } else if let Some(rest) = text.strip_prefix(MAGIC) {
            read_records(rest)
        } else {
            return Err(fail(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "not a log of accepted writes (its first line is not floodgate-accepted 1)",
            )));
        };
        for record in records {
            match record {
                Record::Accepted(accepted) => state.pending.push_back(accepted),
                Record::Delivered(id, delivered) => {
                    state.pending.retain(|a| a.id != id);
                    remember(&mut state, id, delivered);
                }
            }
        }
        // Rewrite: the pending writes and the outcomes kept, then swap it in atomically.
        let tmp = dir.join(format!("{FILE}.tmp"));
        let mut out = MAGIC.to_vec();
        for accepted in &state.pending {
            out.extend_from_slice(&encode(&Record::Accepted(accepted.clone())));
        }
        for id in &state.order {
            if let Some(delivered) = state.outcomes.get(id) {
                out.extend_from_slice(&encode(&Record::Delivered(id.clone(), delivered.clone())));
            }
        }
        {
            let mut file = std::fs::File::create(&tmp).map_err(fail)?;
            file.write_all(&out).map_err(fail)?;
            file.sync_all().map_err(fail)?;
        }
        std::fs::rename(&tmp, &path).map_err(fail)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        let file = std::fs::OpenOptions::new().append(true).open(&path).map_err(fail)?;
        if !state.pending.is_empty() {
            tracing::info!(pending = state.pending.len(), "gateway: accepted writes to replay");
        }
        Ok(Queue { path, file: Arc::new(Mutex::new(file)), state: Mutex::new(state), arrived: Notify::new() })
    }

    /// Appends `record` and waits for it to be on disk.
    async fn append(&self, record: &Record) -> Result<(), QueueError> {
        let bytes = encode(record);
        let file = Arc::clone(&self.file);
        let result = tokio::task::spawn_blocking(move || {
            let mut file = file.lock();
            file.write_all(&bytes)?;
            file.sync_data()
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        result.map_err(|source| QueueError { path: self.path.clone(), source })
    }

    /// Keeps `accepted` durably, then queues it for replay.
    pub(super) async fn accept(&self, accepted: Accepted) -> Result<(), QueueError> {
        self.append(&Record::Accepted(accepted.clone())).await?;
        self.state.lock().pending.push_back(accepted);
        self.arrived.notify_one();
        Ok(())
    }

    /// The oldest pending write.
    pub(super) fn next(&self) -> Option<Accepted> {
        self.state.lock().pending.front().cloned()
    }

    /// Records the outcome of `id`, durably, and drops it from the pending writes.
    pub(super) async fn delivered(&self, id: &str, delivered: Delivered) -> Result<(), QueueError> {
        self.append(&Record::Delivered(id.to_owned(), delivered.clone())).await?;
        let mut state = self.state.lock();
        state.pending.retain(|a| a.id != id);
        remember(&mut state, id.to_owned(), delivered);
        Ok(())
    }

    /// Pending writes.
    pub(super) fn pending(&self) -> usize {
        self.state.lock().pending.len()
    }

    /// `GET /_floodgate/accepted/<id>`.
    pub(super) fn status(&self, id: &str) -> Response {
        #[derive(Serialize)]
        struct Status<'a> {
            id: &'a str,
            state: &'static str,
            #[serde(flatten)]
            delivered: Option<&'a Delivered>,
        }
        let state = self.state.lock();
        let body = if let Some(delivered) = state.outcomes.get(id) {
            Status { id, state: "delivered", delivered: Some(delivered) }
        } else if state.pending.iter().any(|a| a.id == id) {
            Status { id, state: "pending", delivered: None }
        } else {
            return super::respond::problem(&floodgate_http::Problem::new(
                StatusCode::NOT_FOUND,
                floodgate_http::problem::NOT_FOUND_TYPE,
                "Not Found",
                "No accepted write has this id (or its outcome is no longer kept).",
            ));
        };
        json(StatusCode::OK, &body)
    }
}

fn remember(state: &mut State, id: String, delivered: Delivered) {
    if state.outcomes.insert(id.clone(), delivered).is_none() {
        state.order.push_back(id);
    }
    while state.order.len() > KEPT_OUTCOMES {
        if let Some(old) = state.order.pop_front() {
            state.outcomes.remove(&old);
        }
    }
}

pub(super) fn json(status: StatusCode, value: &impl Serialize) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A new write's id: 128 random bits, hex.
pub(super) fn new_id() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// The 202 for an accepted write.
pub(super) fn accepted_response(id: &str) -> Response {
    #[derive(Serialize)]
    struct Body<'a> {
        id: &'a str,
        state: &'static str,
        status_url: String,
    }
    let url = format!("/_floodgate/accepted/{id}");
    let mut response = json(StatusCode::ACCEPTED, &Body { id, state: "pending", status_url: url.clone() });
    if let Ok(location) = HeaderValue::from_str(&url) {
        response.headers_mut().insert(http::header::LOCATION, location);
    }
    response
}

// === the log's records ===

#[derive(Debug, PartialEq)]
enum Record {
    Accepted(Accepted),
    Delivered(String, Delivered),
}

fn push(out: &mut Vec<u8>, field: &[u8]) {
    out.extend_from_slice(&(field.len() as u32).to_le_bytes());
    out.extend_from_slice(field);
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn encode(record: &Record) -> Vec<u8> {
    let mut fields = Vec::new();
    let kind = match record {
        Record::Accepted(a) => {
            push(&mut fields, a.id.as_bytes());
            push(&mut fields, a.route.as_bytes());
            push(&mut fields, a.method.as_bytes());
            push(&mut fields, a.path_and_query.as_bytes());
            fields.extend_from_slice(&(a.headers.len() as u32).to_le_bytes());
            for (name, value) in &a.headers {
                push(&mut fields, name.as_bytes());
                push(&mut fields, value);
            }
            push(&mut fields, &a.body);
            1u8
        }
        Record::Delivered(id, d) => {
            push(&mut fields, id.as_bytes());
            fields.extend_from_slice(&d.status.to_le_bytes());
            push(&mut fields, d.content_type.as_deref().unwrap_or("").as_bytes());
            push(&mut fields, d.body.as_bytes());
            2u8
        }
    };
    let mut checked = Vec::with_capacity(fields.len() + 1);
    checked.push(kind);
    checked.extend_from_slice(&fields);
    let mut out = Vec::with_capacity(checked.len() + 12);
    out.extend_from_slice(&(fields.len() as u32).to_le_bytes());
    out.extend_from_slice(&checked);
    out.extend_from_slice(&fnv(&checked).to_le_bytes());
    out
}

/// Every whole, intact record of `bytes`, up to the first that is not (a torn tail).
fn read_records(mut bytes: &[u8]) -> Vec<Record> {
    let mut records = Vec::new();
    while let Some(record) = next_record(&mut bytes) {
        records.push(record);
    }
    if !bytes.is_empty() {
        tracing::warn!(
            bytes = bytes.len(),
            "gateway: the accepted-writes log ends with a torn record; it is dropped"
        );
    }
    records
}

fn next_record(bytes: &mut &[u8]) -> Option<Record> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let checked = bytes.get(4..4 + 1 + len)?;
    let sum = u64::from_le_bytes(bytes.get(5 + len..13 + len)?.try_into().ok()?);
    if fnv(checked) != sum {
        return None;
    }
    let (kind, mut fields) = (checked[0], &checked[1..]);
    let record = decode(kind, &mut fields)?;
    *bytes = &bytes[13 + len..];
    Some(record)
}

fn take<'a>(fields: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, rest) = (fields.get(..n)?, fields.get(n..)?);
    *fields = rest;
    Some(head)
}

fn field<'a>(fields: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = u32::from_le_bytes(take(fields, 4)?.try_into().ok()?) as usize;
    take(fields, len)
}

fn text(fields: &mut &[u8]) -> Option<String> {
    String::from_utf8(field(fields)?.to_vec()).ok()
}

fn decode(kind: u8, fields: &mut &[u8]) -> Option<Record> {
    match kind {
        1 => {
            let (id, route, method, path_and_query) =
                (text(fields)?, text(fields)?, text(fields)?, text(fields)?);
            let count = u32::from_le_bytes(take(fields, 4)?.try_into().ok()?) as usize;
            let mut headers = Vec::with_capacity(count.min(256));
            for _ in 0..count {
                headers.push((text(fields)?, field(fields)?.to_vec()));
            }
            let body = Bytes::copy_from_slice(field(fields)?);
            Some(Record::Accepted(Accepted { id, route, method, path_and_query, headers, body }))
        }
        2 => {
            let id = text(fields)?;
            let status = u16::from_le_bytes(take(fields, 2)?.try_into().ok()?);
            let content_type = Some(text(fields)?).filter(|c| !c.is_empty());
            let body = text(fields)?;
            Some(Record::Delivered(id, Delivered { status, content_type, body }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(id: &str) -> Accepted {
        Accepted {
            id: id.into(),
            route: "orders".into(),
            method: "POST".into(),
            path_and_query: "/orders?x=1".into(),
            headers: vec![("content-type".into(), b"application/json".to_vec())],
            body: Bytes::from_static(br#"{"item": 1}"#),
        }
    }

    #[test]
    fn records_read_back_and_a_torn_tail_is_dropped() {
        let delivered =
            Delivered { status: 201, content_type: Some("text/plain".into()), body: "made".into() };
        let mut log = encode(&Record::Accepted(accepted("a")));
        log.extend(encode(&Record::Delivered("a".into(), delivered.clone())));
        log.extend(encode(&Record::Accepted(accepted("b"))));
        let whole = read_records(&log);
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[1], Record::Delivered("a".into(), delivered));
        // A crash in the middle of the last append.
        let torn = &log[..log.len() - 3];
        assert_eq!(read_records(torn).len(), 2);
        // A flipped bit fails the checksum.
        let mut flipped = log.clone();
        let at = flipped.len() - 20;
        flipped[at] ^= 1;
        assert_eq!(read_records(&flipped).len(), 2);
    }

    #[test]
    fn reopening_keeps_the_pending_writes_and_the_outcomes() {
        let dir = std::env::temp_dir().join(format!("floodgate-queue-{}", new_id()));
        let queue = Queue::open(&dir).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            queue.accept(accepted("a")).await.unwrap();
            queue.accept(accepted("b")).await.unwrap();
            let delivered = Delivered { status: 201, content_type: None, body: String::new() };
            queue.delivered("a", delivered).await.unwrap();
        });
        drop(queue);
        let reopened = Queue::open(&dir).unwrap();
        assert_eq!(reopened.pending(), 1);
        assert_eq!(reopened.next().unwrap().id, "b");
        assert_eq!(reopened.status("a").status(), StatusCode::OK);
        assert_eq!(reopened.status("zzz").status(), StatusCode::NOT_FOUND);
        let _ = std::fs::remove_dir_all(dir);
    }
}
