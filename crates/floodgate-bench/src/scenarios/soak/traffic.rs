//! The traffic of a `soak` run: the operations — a check, a reserve/commit pair, a gateway
//! request — who sends each, how it is sent, and what its answers must be.
//!
//! Every rule but the hot users' budget is set far above what the whole offered load could put
//! on it (`server::config_yaml`), so a request of a **cold** user (`u-<i>`) or a reservation
//! denied is a wrong answer; a **hot** user (`hot-<i>`) has a budget of `--hot-limit` for the run,
//! shared by its checks and gateway requests, and is denied past it.

use std::ops::{Index, IndexMut};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::harness::client::{Connections, NoAnswer};
use crate::harness::keys::Rng;
use crate::harness::target::store_failure;
use crate::harness::upstream;
use crate::report::Outcome;
use crate::report::units::{micros, nanos};

/// The `route` descriptor of checks.
pub(super) const CHECK_ROUTE: &str = "POST /api/items";
/// The `route` descriptor of reservations.
pub(super) const RESERVE_ROUTE: &str = "POST /api/generate";
/// The gateway's route: its `route` descriptor is `GET` and this template.
pub(super) const GATEWAY_PATH: &str = "/soak/{*rest}";
/// The header the gateway reads the user from (`identity.headers.user`).
pub(super) const USER_HEADER: &str = "x-user-id";
/// The prefix of hot users' ids (the budget rule matches it).
pub(super) const HOT_PREFIX: &str = "hot-";
/// Each reservation's `ttl`: far longer than a pair takes.
const RESERVATION_TTL: &str = "30s";
/// The largest estimate of a reservation, in tokens (each uniform in 1..=this; the commit's
/// actual uniform in 1..=the estimate).
pub(super) const MAX_ESTIMATE: u64 = 1000;
/// Gateway requests go to `/soak/item/<n>`, n below this.
const ITEMS: u64 = 1000;

// === kinds ===

/// A kind of request, as the report splits them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// `POST /v1/check`.
    Check,
    /// `POST /v1/reserve`, the first of a pair.
    Reserve,
    /// `POST /v1/commit`, sent once its reserve is granted.
    Commit,
    /// A `GET` through the gateway to the upstream.
    Gateway,
}

impl Kind {
    /// Every kind, in the report's order.
    pub(super) const ALL: [Kind; 4] = [Kind::Check, Kind::Reserve, Kind::Commit, Kind::Gateway];

    /// Its name in reports.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Check => "check",
            Kind::Reserve => "reserve",
            Kind::Commit => "commit",
            Kind::Gateway => "gateway",
        }
    }
}

/// One value per kind (a JSON object with a field per kind).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(super) struct PerKind<T> {
    pub(super) check: T,
    pub(super) reserve: T,
    pub(super) commit: T,
    pub(super) gateway: T,
}

impl<T> PerKind<T> {
    /// Each kind's value, made by `f`.
    pub(super) fn from_fn(mut f: impl FnMut(Kind) -> T) -> Self {
        PerKind {
            check: f(Kind::Check),
            reserve: f(Kind::Reserve),
            commit: f(Kind::Commit),
            gateway: f(Kind::Gateway),
        }
    }
}

impl<T> Index<Kind> for PerKind<T> {
    type Output = T;

    fn index(&self, kind: Kind) -> &T {
        match kind {
            Kind::Check => &self.check,
            Kind::Reserve => &self.reserve,
            Kind::Commit => &self.commit,
            Kind::Gateway => &self.gateway,
        }
    }
}

impl<T> IndexMut<Kind> for PerKind<T> {
    fn index_mut(&mut self, kind: Kind) -> &mut T {
        match kind {
            Kind::Check => &mut self.check,
            Kind::Reserve => &mut self.reserve,
            Kind::Commit => &mut self.commit,
            Kind::Gateway => &mut self.gateway,
        }
    }
}

// === the mix and the draw ===

/// How the offered rate is split: the shares of checks, reserve/commit pairs and gateway
/// requests, in percent (they add up to 100).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Mix {
    /// Checks.
    pub check: f64,
    /// Reserve/commit pairs.
    pub reserve: f64,
    /// Gateway requests.
    pub gateway: f64,
}

/// Parses `check=60,reserve=20,gateway=20` (any order; a kind left out is 0; the shares add up
/// to 100).
pub fn parse_mix(text: &str) -> Result<Mix, String> {
    let mut mix = Mix { check: 0.0, reserve: 0.0, gateway: 0.0 };
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = part.split_once('=').ok_or_else(|| format!("{part:?}: expected KIND=PERCENT"))?;
        let share = crate::args::parse_percent(value)?;
        let slot = match name.trim() {
            "check" => &mut mix.check,
            "reserve" => &mut mix.reserve,
            "gateway" => &mut mix.gateway,
            other => return Err(format!("{other:?}: expected check, reserve or gateway")),
        };
        *slot = share;
    }
    let total = mix.check + mix.reserve + mix.gateway;
    if (total - 100.0).abs() > 1e-9 {
        return Err(format!("{text:?}: the shares add up to {total}, not 100"));
    }
    Ok(mix)
}

/// Who sends a check or a gateway request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum User {
    /// `u-<i>`: under every limit.
    Cold(u64),
    /// `hot-<i>`: a budget for the run.
    Hot(u32),
}

impl User {
    fn id(self) -> String {
        match self {
            User::Cold(i) => format!("u-{i}"),
            User::Hot(i) => format!("{HOT_PREFIX}{i}"),
        }
    }

    fn hot(self) -> Option<u32> {
        match self {
            User::Hot(i) => Some(i),
            User::Cold(_) => None,
        }
    }
}

/// One scheduled operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// A check by `user` of tenant `t-<tenant>`.
    Check { user: User, tenant: u64 },
    /// A reservation of `estimate` tokens by tenant `t-<tenant>`, committed at `actual`.
    Pair { tenant: u64, estimate: u64, actual: u64 },
    /// A gateway request by `user` for item `item`.
    Gateway { user: User, item: u64 },
}

/// What the operations are drawn from.
#[derive(Debug, Clone)]
pub(super) struct Population {
    pub(super) mix: Mix,
    /// Cold users.
    pub(super) users: u64,
    pub(super) tenants: u64,
    pub(super) hot_users: u32,
    /// The share of checks and gateway requests sent by hot users, 0 to 1.
    pub(super) hot_share: f64,
}

/// Draws the operations of a run, in order, from a seeded generator.
#[derive(Debug, Clone)]
pub(super) struct Draw {
    rng: Rng,
    population: Population,
}

impl Draw {
    pub(super) fn new(seed: u64, population: Population) -> Draw {
        Draw { rng: Rng::new(seed), population }
    }

    fn user(&mut self) -> User {
        let p = &self.population;
        if p.hot_users > 0 && self.rng.unit() < p.hot_share {
            User::Hot(self.rng.below(u64::from(p.hot_users)) as u32)
        } else {
            User::Cold(self.rng.below(p.users))
        }
    }

    /// The next operation.
    pub(super) fn next_op(&mut self) -> Op {
        let roll = self.rng.unit() * 100.0;
        let mix = self.population.mix;
        if roll < mix.check {
            let user = self.user();
            let tenant = match user {
                User::Cold(i) => i % self.population.tenants,
                User::Hot(i) => u64::from(i) % self.population.tenants,
            };
            Op::Check { user, tenant }
        } else if roll < mix.check + mix.reserve {
            let tenant = self.rng.below(self.population.tenants);
            let estimate = self.rng.between(1, MAX_ESTIMATE);
            Op::Pair { tenant, estimate, actual: self.rng.between(1, estimate) }
        } else {
            let user = self.user();
            Op::Gateway { user, item: self.rng.below(ITEMS) }
        }
    }
}

// === sending ===

/// One answered request (or one not sent: `dropped`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Answer {
    pub(super) kind: Kind,
    pub(super) outcome: Outcome,
    /// Why the answer is wrong, when it is.
    pub(super) wrong: Option<&'static str>,
    /// From the scheduled time (a commit: from its send) to the whole answer.
    pub(super) latency_ns: u64,
    /// When it was answered, µs from the start of the load.
    pub(super) answered_us: u64,
    /// The hot user who sent it.
    pub(super) hot: Option<u32>,
}

/// What sending needs. Cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Sending {
    /// To the HTTP API.
    pub(super) api: Connections,
    /// To the gateway.
    pub(super) gateway: Connections,
    pub(super) timeout: Duration,
    pub(super) answers: mpsc::UnboundedSender<Answer>,
    /// The start of the load.
    pub(super) started: Instant,
}

impl Sending {
    fn answer(
        &self,
        kind: Kind,
        outcome: Outcome,
        wrong: Option<&'static str>,
        from: Instant,
        hot: Option<u32>,
    ) {
        let now = Instant::now();
        let answer = Answer {
            kind,
            outcome,
            wrong,
            latency_ns: nanos(now - from),
            answered_us: micros(now - self.started),
            hot,
        };
        let _ = self.answers.send(answer);
    }

    /// An operation not sent (too many in flight): a `dropped` error of its first request.
    pub(super) fn dropped(&self, op: Op, scheduled: Instant) {
        let (kind, hot) = match op {
            Op::Check { user, .. } => (Kind::Check, user.hot()),
            Op::Pair { .. } => (Kind::Reserve, None),
            Op::Gateway { user, .. } => (Kind::Gateway, user.hot()),
        };
        self.answer(kind, Outcome::Error(crate::report::DROPPED), None, scheduled, hot);
    }

    /// Sends `op`, scheduled at `scheduled`, and reports its answers.
    pub(super) async fn send(&self, op: Op, scheduled: Instant) {
        match op {
            Op::Check { user, tenant } => {
                let body = json!({
                    "descriptors": {"user": user.id(), "tenant": format!("t-{tenant}"), "route": CHECK_ROUTE},
                })
                .to_string();
                let answer = self.api.exchange(post("/v1/check", body), self.timeout).await;
                let (outcome, wrong) = decision(answer, user);
                self.answer(Kind::Check, outcome, wrong, scheduled, user.hot());
            }
            Op::Pair { tenant, estimate, actual } => {
                let body = json!({
                    "descriptors": {"tenant": format!("t-{tenant}"), "route": RESERVE_ROUTE},
                    "costs": {"requests": 1, "tokens": estimate},
                    "ttl": RESERVATION_TTL,
                })
                .to_string();
                let answer = self.api.exchange(post("/v1/reserve", body), self.timeout).await;
                let (outcome, wrong, id) = reserved(answer);
                self.answer(Kind::Reserve, outcome, wrong, scheduled, None);
                let Some(id) = id else { return };
                let body = json!({"reservation": id, "costs": {"tokens": actual}}).to_string();
                let sent = Instant::now();
                let answer = self.api.exchange(post("/v1/commit", body), self.timeout).await;
                let (outcome, wrong) = committed(answer, actual);
                self.answer(Kind::Commit, outcome, wrong, sent, None);
            }
            Op::Gateway { user, item } => {
                let request = http::Request::get(format!("/soak/item/{item}"))
                    .header(USER_HEADER, user.id())
                    .body(Full::new(Bytes::new()));
                let Ok(request) = request else {
                    return self.answer(
                        Kind::Gateway,
                        Outcome::Error("request"),
                        None,
                        scheduled,
                        user.hot(),
                    );
                };
                let answer = self.gateway.exchange(request, self.timeout).await;
                let (outcome, wrong) = proxied(answer, user);
                self.answer(Kind::Gateway, outcome, wrong, scheduled, user.hot());
            }
        }
    }
}

fn post(path: &'static str, body: String) -> http::Request<Full<Bytes>> {
    let mut request = http::Request::new(Full::new(Bytes::from(body)));
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = http::Uri::from_static(path);
    request
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    request
}

type Exchanged = Result<(http::StatusCode, Bytes), NoAnswer>;

/// An error that is not a verdict: no answer, a verdict made by a rule's `on_store_error`, or a
/// status the contract does not give here.
fn error(answer: &Exchanged) -> Option<Outcome> {
    match answer {
        Err(no_answer) => Some(Outcome::Error(no_answer.kind())),
        Ok((_, body)) if let Some(kind) = store_failure(body) => Some(Outcome::Error(kind)),
        Ok((status, _)) => match status.as_u16() {
            200 | 429 => None,
            400 => Some(Outcome::Error("http_400")),
            413 => Some(Outcome::Error("http_413")),
            422 => Some(Outcome::Error("http_422")),
            500..=599 => Some(Outcome::Error("http_5xx")),
            _ => Some(Outcome::Error("http_other")),
        },
    }
}

/// A check's verdict: a 200 or 429 whose `allowed` says the same, a cold user never denied.
fn decision(answer: Exchanged, user: User) -> (Outcome, Option<&'static str>) {
    if let Some(error) = error(&answer) {
        return (error, None);
    }
    let Ok((status, body)) = answer else { return (Outcome::Error("http_other"), None) };
    let allowed = status == http::StatusCode::OK;
    let said = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v["allowed"].as_bool());
    let outcome = if allowed { Outcome::Allowed } else { Outcome::Denied };
    let wrong = if said != Some(allowed) {
        Some("verdict_mismatch")
    } else if !allowed && matches!(user, User::Cold(_)) {
        Some("cold_denied")
    } else {
        None
    };
    (outcome, wrong)
}

/// A reserve's answer, and the reservation's id when granted: never denied, a 200 with an id.
fn reserved(answer: Exchanged) -> (Outcome, Option<&'static str>, Option<String>) {
    if let Some(error) = error(&answer) {
        return (error, None, None);
    }
    let Ok((status, body)) = answer else { return (Outcome::Error("http_other"), None, None) };
    if status != http::StatusCode::OK {
        return (Outcome::Denied, Some("reserve_denied"), None);
    }
    let id = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["reservation"].as_str().map(str::to_owned));
    match id {
        Some(id) => (Outcome::Allowed, None, Some(id)),
        None => (Outcome::Allowed, Some("reserve_without_id"), None),
    }
}

/// A commit's answer: `200` committed and charged exactly `actual` tokens (counted as allowed); a
/// refusal (`404`, `409`) is a denial, and wrong.
fn committed(answer: Exchanged, actual: u64) -> (Outcome, Option<&'static str>) {
    match &answer {
        Ok((status, _)) if matches!(status.as_u16(), 404 | 409) => {
            return (Outcome::Denied, Some("commit_refused"));
        }
        _ => {}
    }
    if let Some(error) = error(&answer) {
        return (error, None);
    }
    let Ok((status, body)) = answer else { return (Outcome::Error("http_other"), None) };
    if status != http::StatusCode::OK {
        return (Outcome::Error("http_other"), None);
    }
    let settled = serde_json::from_slice::<Value>(&body).ok();
    let exact = settled
        .as_ref()
        .is_some_and(|v| v["state"] == "committed" && v["charged"]["tokens"].as_u64() == Some(actual));
    (Outcome::Allowed, (!exact).then_some("commit_mismatch"))
}

/// A gateway request's answer: the upstream's body on a 200, a cold user never denied.
fn proxied(answer: Exchanged, user: User) -> (Outcome, Option<&'static str>) {
    match answer {
        Err(no_answer) => (Outcome::Error(no_answer.kind()), None),
        Ok((status, body)) => match status.as_u16() {
            200 => (Outcome::Allowed, (&body[..] != upstream::BODY).then_some("gateway_body")),
            429 => (Outcome::Denied, matches!(user, User::Cold(_)).then_some("cold_denied")),
            500..=599 => (Outcome::Error("http_5xx"), None),
            _ => (Outcome::Error("http_other"), None),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mix_is_named_shares_adding_up_to_100() {
        let mix = parse_mix("check=60,reserve=20,gateway=20").unwrap();
        assert_eq!((mix.check, mix.reserve, mix.gateway), (60.0, 20.0, 20.0));
        assert_eq!(parse_mix("gateway=100").unwrap(), Mix { check: 0.0, reserve: 0.0, gateway: 100.0 });
        assert_eq!(parse_mix(" reserve = 50% , check=50 ").unwrap().reserve, 50.0);
        assert!(parse_mix("check=60,reserve=20").unwrap_err().contains("add up to 80"));
        assert!(parse_mix("check=60,report=40").unwrap_err().contains("\"report\""));
        assert!(parse_mix("check").is_err());
    }

    #[test]
    fn the_draw_follows_the_mix_and_the_hot_share() {
        let population = Population {
            mix: parse_mix("check=50,reserve=25,gateway=25").unwrap(),
            users: 100,
            tenants: 7,
            hot_users: 3,
            hot_share: 0.1,
        };
        let mut draw = Draw::new(1, population);
        let ops: Vec<Op> = (0..20_000).map(|_| draw.next_op()).collect();
        let share = |f: fn(&Op) -> bool| ops.iter().filter(|op| f(op)).count() as f64 / ops.len() as f64;
        assert!((share(|op| matches!(op, Op::Check { .. })) - 0.5).abs() < 0.02);
        assert!((share(|op| matches!(op, Op::Pair { .. })) - 0.25).abs() < 0.02);
        let hot = share(|op| {
            matches!(op, Op::Check { user: User::Hot(_), .. } | Op::Gateway { user: User::Hot(_), .. })
        });
        assert!((hot - 0.075).abs() < 0.01, "{hot}");
        for op in &ops {
            match *op {
                Op::Check { user: User::Cold(i), tenant } => assert!(i < 100 && tenant == i % 7),
                Op::Check { user: User::Hot(i), tenant }
                | Op::Gateway { user: User::Hot(i), item: tenant } => {
                    assert!(i < 3 && tenant < ITEMS)
                }
                Op::Pair { tenant, estimate, actual } => {
                    assert!(
                        tenant < 7
                            && (1..=MAX_ESTIMATE).contains(&estimate)
                            && (1..=estimate).contains(&actual)
                    )
                }
                Op::Gateway { user: User::Cold(i), item } => assert!(i < 100 && item < ITEMS),
            }
        }
        assert_eq!(Draw::new(1, draw.population.clone()).next_op(), ops[0], "the draw is the seed's");
    }

    fn answered(status: u16, body: &str) -> Exchanged {
        Ok((http::StatusCode::from_u16(status).unwrap(), Bytes::copy_from_slice(body.as_bytes())))
    }

    #[test]
    fn a_check_is_wrong_when_its_body_contradicts_it_or_a_cold_user_is_denied() {
        let (cold, hot) = (User::Cold(1), User::Hot(0));
        assert_eq!(decision(answered(200, r#"{"allowed":true}"#), cold), (Outcome::Allowed, None));
        assert_eq!(decision(answered(429, r#"{"allowed":false}"#), hot), (Outcome::Denied, None));
        assert_eq!(
            decision(answered(429, r#"{"allowed":false}"#), cold),
            (Outcome::Denied, Some("cold_denied"))
        );
        assert_eq!(
            decision(answered(200, r#"{"allowed":false}"#), cold),
            (Outcome::Allowed, Some("verdict_mismatch"))
        );
        assert_eq!(
            decision(answered(200, r#"{"allowed":true,"outcome":"error_allowed"}"#), cold).0,
            Outcome::Error("store_fail_open")
        );
        assert_eq!(decision(answered(503, "{}"), cold), (Outcome::Error("http_5xx"), None));
        assert_eq!(decision(Err(NoAnswer::Timeout), cold), (Outcome::Error("timeout"), None));
    }

    #[test]
    fn a_pair_is_wrong_when_the_reserve_is_denied_or_the_commit_charges_otherwise() {
        let granted = reserved(answered(200, r#"{"allowed":true,"reservation":"ab12"}"#));
        assert_eq!(granted, (Outcome::Allowed, None, Some("ab12".into())));
        assert_eq!(
            reserved(answered(429, r#"{"allowed":false}"#)),
            (Outcome::Denied, Some("reserve_denied"), None)
        );
        assert_eq!(reserved(answered(200, r#"{"allowed":true}"#)).1, Some("reserve_without_id"));
        let exact = r#"{"state":"committed","charged":{"requests":1,"tokens":40}}"#;
        assert_eq!(committed(answered(200, exact), 40), (Outcome::Allowed, None));
        assert_eq!(committed(answered(200, exact), 41), (Outcome::Allowed, Some("commit_mismatch")));
        assert_eq!(committed(answered(409, "{}"), 40), (Outcome::Denied, Some("commit_refused")));
        assert_eq!(committed(answered(503, "{}"), 40), (Outcome::Error("http_5xx"), None));
    }

    #[test]
    fn a_gateway_answer_is_the_upstreams_and_a_cold_user_is_never_denied() {
        assert_eq!(proxied(answered(200, "ok"), User::Cold(0)), (Outcome::Allowed, None));
        assert_eq!(proxied(answered(200, "nope"), User::Cold(0)), (Outcome::Allowed, Some("gateway_body")));
        assert_eq!(proxied(answered(429, "{}"), User::Hot(1)), (Outcome::Denied, None));
        assert_eq!(proxied(answered(429, "{}"), User::Cold(0)), (Outcome::Denied, Some("cold_denied")));
        assert_eq!(proxied(answered(502, ""), User::Cold(0)), (Outcome::Error("http_5xx"), None));
    }
}
