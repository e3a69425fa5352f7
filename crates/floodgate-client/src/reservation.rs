//! Reservations (`/v1/reserve`, `/v1/commit`, `/v1/release`), their guard, and `/v1/usage`.

use std::collections::BTreeMap;
use std::time::Duration;

use http::{Method, Uri};
use serde::Deserialize;

use crate::client::{Call, Client};
use crate::decision::{Decision, Request, failed};
use crate::error::{Error, FailureReason};

/// What a commit or a release did; a retry of it answers the same. Each map is dimension → amount.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Settled {
    /// The reservation's id.
    pub reservation: String,
    /// `committed` or `released`.
    pub state: String,
    /// What was reserved.
    pub reserved: BTreeMap<String, u64>,
    /// What stays charged.
    pub charged: BTreeMap<String, u64>,
    /// What was given back.
    pub refunded: BTreeMap<String, u64>,
    /// What the actual cost exceeded the reservation by, charged on top.
    pub excess: BTreeMap<String, u64>,
}

/// One rule's counter for a key, now (`GET /v1/usage`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Usage {
    /// The rule.
    pub rule: String,
    /// The limit for this key.
    pub limit: u64,
    /// What counts now.
    pub used: u64,
    /// What is left.
    pub remaining: u64,
    /// Start of the current window or period, ms since the Unix epoch; `None` for buckets and
    /// concurrency.
    pub period_start: Option<u64>,
    /// Its end (exclusive).
    pub period_end: Option<u64>,
    /// Until the counter is fully replenished with no further traffic, ms.
    pub reset_after_ms: u64,
    /// For a quota: what the key counted in the calendar period before the current one; `None`
    /// for the other algorithms (and from servers that do not say).
    #[serde(default)]
    pub previous: Option<PreviousPeriod>,
}

/// What a quota's key counted in the calendar period before the current one (`GET /v1/usage`'s
/// `previous`): last month's spend, for a monthly spend quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct PreviousPeriod {
    /// The count, exactly as kept (not capped at the limit).
    pub used: u64,
    /// Start of that period, ms since the Unix epoch.
    pub period_start: u64,
    /// Its end (exclusive): the current period's start.
    pub period_end: u64,
}

/// The answer to [`Client::reserve`]: the check's decision, and the reservation when allowed.
#[derive(Debug)]
pub struct Reserved {
    /// The verdict (or what the fail mode decided).
    pub decision: Decision,
    /// The guard of the reservation held; `None` when denied or when the fail mode decided.
    pub reservation: Option<Reservation>,
}

#[derive(Clone, Copy)]
pub(crate) enum Settle {
    Commit,
    Release,
}

/// A reservation held: [`commit`](Reservation::commit) the actual cost, or
/// [`release`](Reservation::release) it. Dropped unsettled (an error path, a cancelled future),
/// it is released by a task spawned on the current Tokio runtime: drop it inside one. Dropped
/// outside a runtime, nothing is sent and the reservation stays charged its estimate until its
/// `ttl` passes (and then stays charged: an expired reservation is never given back).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let yaml = "store: {kind: memory}\nrules: [{name: tenant-tokens, key: [tenant], algorithm: fixed_window, limit: 10000, window: 1h, cost: tokens}]\n";
/// # let app = floodgate_app::App::new(floodgate_config::parse("doc.yaml", yaml)?, Default::default())?;
/// # let server = floodgate_server::Server::new(app, tokio::net::TcpListener::bind("127.0.0.1:0").await?, None)?;
/// # let url = format!("http://{}", server.http_addr());
/// # tokio::spawn(server.run(std::future::pending()));
/// use std::time::Duration;
/// use floodgate_client::{Client, Request};
///
/// let floodgate = Client::builder(url).deadline(Duration::from_secs(1)).build()?;
/// # // A debug build's first call may take longer than the deadline on a busy machine: made once
/// # // here, with time to spare.
/// # floodgate.peek(&Request::new().deadline(Duration::from_secs(30))).await?;
/// let tenant = || Request::new().descriptor("tenant", "t1");
/// let estimate = tenant().costs("requests", 1).costs("tokens", 4300).ttl(Duration::from_secs(120));
/// let reserved = floodgate.reserve(&estimate).await?;
/// if let Some(reservation) = reserved.reservation {
///     let used = 812; // what the model reported
///     let settled = reservation.commit(&[("tokens", used)]).await?;
///     assert_eq!(settled.refunded["tokens"], 3488);
/// }
/// assert_eq!(floodgate.usage("tenant-tokens", &tenant()).await?.used, 812);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Reservation {
    client: Client,
    id: String,
    settled: bool,
}

impl Reservation {
    pub(crate) fn new(client: Client, id: String) -> Reservation {
        Reservation { client, id, settled: false }
    }

    /// The reservation's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Commits the actual cost per dimension (e.g. `&[("tokens", 812)]`; a dimension left out stays
    /// as reserved), as [`Client::commit`]. The guard is spent, whatever the outcome: an error
    /// after the retries leaves the reservation to the server (released by no drop).
    pub async fn commit(mut self, costs: &[(&str, u64)]) -> Result<Settled, Error> {
        self.settled = true;
        self.client.commit(&self.id, costs).await
    }

    /// Gives the reservation back now, as [`Client::release`].
    pub async fn release(mut self) -> Result<Settled, Error> {
        self.settled = true;
        self.client.release(&self.id).await
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            let id = std::mem::take(&mut self.id);
            runtime.spawn(async move {
                let _ = client.release(&id).await;
            });
        }
    }
}

/// Retries after a first attempt that got no answer.
const SETTLE_RETRIES: u32 = 2;

impl Client {
    /// Reserves an estimate (e.g. the prompt's tokens plus `max_tokens`, with
    /// [`Request::costs`] and [`Request::ttl`]) before a call whose cost is known only at its end.
    /// Decided as a check (all-or-nothing, the same fail mode). When allowed,
    /// [`Reserved::reservation`] is a guard to [`commit`](Reservation::commit) the actual cost with;
    /// dropped unsettled, it releases the reservation. When denied, or when the fail mode decided,
    /// there is none.
    pub async fn reserve(&self, request: &Request) -> Result<Reserved, Error> {
        let decision = self.decide(Call::Reserve, request).await?;
        let reservation = decision.reservation.clone().map(|id| Reservation::new(self.clone(), id));
        Ok(Reserved { decision, reservation })
    }

    /// Charges a reservation's actual cost per dimension: what was reserved beyond it is given
    /// back, what exceeds it is charged on top (never denied); a dimension left out stays as
    /// reserved (`&[]`: all of it); concurrency permits are freed. Idempotent on the server — the
    /// same commit again answers the same and charges nothing more — so an attempt that got no
    /// answer (refused, late, cut, 5xx) is retried, twice at most, as the client's retry budget
    /// allows (not when the breaker is open, nor after a TLS failure). [`Error::NotFound`] for an
    /// unknown id; [`Error::ReservationSettled`] for one released, committed with other costs or
    /// expired; [`Error::Unavailable`] when no attempt got an answer.
    pub async fn commit(&self, reservation: &str, costs: &[(&str, u64)]) -> Result<Settled, Error> {
        let mut body = serde_json::Map::new();
        body.insert("reservation".into(), check_id(reservation)?.into());
        if !costs.is_empty() {
            let costs: serde_json::Map<String, serde_json::Value> =
                costs.iter().map(|(d, n)| ((*d).to_owned(), (*n).into())).collect();
            body.insert("costs".into(), costs.into());
        }
        self.settle(Settle::Commit, body).await
    }

    /// Gives a reservation back entirely (concurrency permits included), or frees the permits of a
    /// check ([`Decision::reservation`]; the check's costs stay counted). Idempotent and retried as
    /// [`commit`](Client::commit); [`Error::ReservationSettled`] after a commit.
    pub async fn release(&self, reservation: &str) -> Result<Settled, Error> {
        let mut body = serde_json::Map::new();
        body.insert("reservation".into(), check_id(reservation)?.into());
        self.settle(Settle::Release, body).await
    }

    /// What one rule's counter holds now for the request's descriptors (those of its key),
    /// consuming nothing. [`Error::NotFound`] for an unknown rule, [`Error::Problem`] (422) for a
    /// missing descriptor, [`Error::Unavailable`] without an answer (not retried).
    pub async fn usage(&self, rule: &str, request: &Request) -> Result<Usage, Error> {
        if rule.is_empty() {
            return Err(Error::InvalidRequest("usage: the rule must not be empty".into()));
        }
        let mut query = format!("rule={}", encode(rule));
        for (name, value) in &request.descriptors {
            if name == "rule" {
                return Err(Error::InvalidRequest("usage: no descriptor may be named `rule`".into()));
            }
            query.push_str(&format!("&{}={}", encode(name), encode(value)));
        }
        let uri: Uri = format!("{}/v1/usage?{query}", self.base())
            .parse()
            .map_err(|e| Error::InvalidRequest(format!("usage: {e}")))?;
        let result = self.exchange(Method::GET, uri, None, request.deadline).await;
        let (parts, bytes) = self.counted(result)?;
        if parts.status == http::StatusCode::OK
            && let Ok(usage) = serde_json::from_slice::<Usage>(&bytes)
        {
            return Ok(usage);
        }
        Err(failed(parts.status.as_u16(), &bytes))
    }

    async fn settle(
        &self,
        which: Settle,
        body: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Settled, Error> {
        let body = serde_json::to_vec(&body).map_err(|e| Error::InvalidRequest(e.to_string()))?;
        let mut attempt = 0;
        loop {
            let outcome = match self
                .exchange(
                    Method::POST,
                    match which {
                        Settle::Commit => self.commit_uri(),
                        Settle::Release => self.release_uri(),
                    }
                    .clone(),
                    Some(body.clone()),
                    None,
                )
                .await
            {
                Ok((parts, bytes)) => match serde_json::from_slice::<Settled>(&bytes) {
                    Ok(settled) if parts.status == http::StatusCode::OK => Ok(settled),
                    _ => Err(failed(parts.status.as_u16(), &bytes)),
                },
                Err(error) => Err(error),
            };
            match outcome {
                Err(Error::Unavailable { reason, .. })
                    if attempt < SETTLE_RETRIES
                        && !matches!(reason, FailureReason::BreakerOpen | FailureReason::Tls)
                        && self.grant_retry() =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(25 << attempt)).await;
                }
                other => return self.counted(other),
            }
        }
    }

    fn counted<T>(&self, result: Result<T, Error>) -> Result<T, Error> {
        if let Err(Error::Unavailable { reason, .. }) = &result {
            self.count_failure(*reason);
        }
        result
    }
}

fn check_id(id: &str) -> Result<&str, Error> {
    if id.is_empty() {
        return Err(Error::InvalidRequest("the reservation id must not be empty".into()));
    }
    Ok(id)
}

/// Percent-encodes a query component (RFC 3986 unreserved characters kept).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
