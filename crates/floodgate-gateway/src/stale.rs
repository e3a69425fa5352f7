//! `read: stale_cache`: the last good response (200) of each GET, per route, path and query, kept in
//! memory within a byte budget (the oldest entries go first), and served while the read switch is on
//! (or the route's breaker is open), marked `floodgate-stale: true` with its `Age` in seconds.
//!
//! A response is kept as it streams to the client: its body is copied up to the entry bound, and
//! stored only once it ended whole — a response larger than the bound, or cut, is not kept.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use floodgate_core::Timestamp;
use http::{HeaderMap, HeaderName, HeaderValue};
use parking_lot::Mutex;

/// Marks a response served from the stale cache.
pub(super) const STALE_HEADER: HeaderName = HeaderName::from_static("floodgate-stale");

/// The response headers kept with an entry (the representation's, not the connection's).
const KEPT_HEADERS: [&str; 7] = [
    "content-type",
    "content-encoding",
    "content-language",
    "etag",
    "last-modified",
    "cache-control",
    "vary",
];

/// A kept response.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
    pub(super) stored: Timestamp,
}

/// The cache: bounded by the total size of its bodies.
#[derive(Debug)]
pub(super) struct StaleCache {
    max_bytes: usize,
    max_entry: usize,
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    by_key: HashMap<String, (Entry, u64)>,
    /// Insertion order: sequence → key.
    order: BTreeMap<u64, String>,
    next: u64,
    bytes: usize,
}

impl StaleCache {
    pub(super) fn new(max_bytes: usize, max_entry: usize) -> Self {
        StaleCache { max_bytes, max_entry: max_entry.min(max_bytes), inner: Mutex::new(Entries::default()) }
    }

    /// The largest body kept.
    pub(super) fn max_entry(&self) -> usize {
        self.max_entry
    }

    /// The key of a GET on `route` for `path_and_query`.
    pub(super) fn key(route: &str, path_and_query: &str) -> String {
        format!("{route} {path_and_query}")
    }

    /// The kept response for `key` and its age at `now`.
    pub(super) fn get(&self, key: &str, now: Timestamp) -> Option<(Entry, Duration)> {
        let inner = self.inner.lock();
        let (entry, _) = inner.by_key.get(key)?;
        Some((entry.clone(), now.saturating_since(entry.stored)))
    }

    /// Keeps `body` with the representation headers of `headers` as `key`'s last good response.
    pub(super) fn insert(&self, key: String, headers: &HeaderMap, body: Bytes, now: Timestamp) {
        if body.len() > self.max_entry {
            return;
        }
        let mut kept = HeaderMap::new();
        for name in KEPT_HEADERS {
            for value in headers.get_all(name) {
                kept.append(HeaderName::from_static(name), value.clone());
            }
        }
        let size = body.len() + key.len();
        let mut inner = self.inner.lock();
        let seq = inner.next;
        inner.next += 1;
        if let Some((old, old_seq)) = inner.by_key.remove(&key) {
            inner.order.remove(&old_seq);
            inner.bytes -= old.body.len() + key.len();
        }
        inner.order.insert(seq, key.clone());
        inner.by_key.insert(key, (Entry { headers: kept, body, stored: now }, seq));
        inner.bytes += size;
        while inner.bytes > self.max_bytes {
            let Some((_, oldest)) = inner.order.pop_first() else { break };
            if let Some((entry, _)) = inner.by_key.remove(&oldest) {
                inner.bytes -= entry.body.len() + oldest.len();
            }
        }
    }

    /// Bytes held (bodies and keys) and entries.
    #[cfg(test)]
    pub(super) fn size(&self) -> (usize, usize) {
        let inner = self.inner.lock();
        (inner.bytes, inner.by_key.len())
    }
}

/// The `Age` header value of an entry of `age`.
pub(super) fn age_header(age: Duration) -> HeaderValue {
    HeaderValue::from(age.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_entries_go_first_and_large_bodies_are_not_kept() {
        let cache = StaleCache::new(100, 40);
        let t = Timestamp::from_secs(10);
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        headers.insert("set-cookie", HeaderValue::from_static("secret=1"));
        cache.insert("a".into(), &headers, Bytes::from(vec![b'a'; 30]), t);
        cache.insert("b".into(), &headers, Bytes::from(vec![b'b'; 30]), t);
        cache.insert("big".into(), &headers, Bytes::from(vec![b'x'; 41]), t);
        assert!(cache.get("big", t).is_none());
        cache.insert("c".into(), &headers, Bytes::from(vec![b'c'; 30]), t);
        assert!(cache.get("a", t).is_some() && cache.get("b", t).is_some() && cache.get("c", t).is_some());
        cache.insert("d".into(), &headers, Bytes::from(vec![b'd'; 30]), t);
        assert!(cache.get("a", t).is_none(), "the oldest went");
        let (entry, age) = cache.get("d", Timestamp::from_secs(15)).unwrap();
        assert_eq!(age, Duration::from_secs(5));
        assert!(entry.headers.contains_key("content-type") && !entry.headers.contains_key("set-cookie"));
        assert!(cache.size().0 <= 100);
        // Replacing a key does not count it twice.
        cache.insert("d".into(), &headers, Bytes::from(vec![b'e'; 10]), t);
        assert_eq!(cache.get("d", t).unwrap().0.body.len(), 10);
    }
}
