//! [`RateLimitLayer`]: the configuration, applied to a service as [`RateLimit`].

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use floodgate::delay::{DelayQueues, Waiting};
use floodgate::{Descriptors, Engine, MemoryStore};
use floodgate_http::HeaderStyle;
use http::HeaderName;
use http::request::Parts;
use tower_layer::Layer;

use crate::{ClientIp, Extractor, RateLimit};

type CostFn = Arc<dyn Fn(&Parts) -> u64 + Send + Sync>;
type TierFn = Arc<dyn Fn(&Parts) -> Option<u8> + Send + Sync>;

/// The default bound on requests waiting under `action: delay`.
pub const DEFAULT_MAX_WAITING: usize = 1024;

/// Applies an [`Engine`] to every request of a service (see the [crate docs](crate)).
///
/// Holds configuration only — the engine, the [`Extractor`]s that turn a request into
/// [`Descriptors`], the [`HeaderStyle`] and the cost function — and is cheap to clone.
///
/// ```
/// use std::sync::Arc;
/// use floodgate::{Engine, Policy};
/// use floodgate_http::HeaderStyle;
/// use floodgate_tower::{ClientIp, RateLimitLayer};
/// use http::HeaderName;
///
/// let engine = Arc::new(Engine::in_memory(Policy::new([])?));
/// let layer = RateLimitLayer::new(engine)
///     .client_ip(ClientIp::new().try_trust(["10.0.0.0/8"])?)
///     .header(HeaderName::from_static("x-user-id"), "user")
///     .route()
///     .headers(HeaderStyle::Ietf)
///     // LLM prompts: the declared token budget is the cost.
///     .cost(|parts| {
///         parts.headers.get("x-token-budget")
///             .and_then(|v| v.to_str().ok()?.parse().ok())
///             .unwrap_or(1)
///     });
/// # let _ = layer;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RateLimitLayer<S = MemoryStore> {
    config: Arc<Config<S>>,
}

/// What a [`RateLimitLayer`] and its services share.
pub(crate) struct Config<S> {
    pub(crate) engine: Arc<Engine<S>>,
    extractors: Vec<Extractor>,
    pub(crate) style: HeaderStyle,
    cost: Option<CostFn>,
    /// The requests waiting for capacity under `action: delay` rules, bounded.
    pub(crate) waiting: Waiting,
    /// Where they wait, in turn by tier.
    pub(crate) queues: DelayQueues,
    tier: Option<TierFn>,
}

impl<S> Config<S> {
    /// The request's descriptors, extractor by extractor (a later one replaces an earlier one of
    /// the same name).
    pub(crate) fn descriptors(&self, parts: &Parts) -> Descriptors {
        let mut descriptors = Descriptors::new();
        for extractor in &self.extractors {
            extractor.extract(parts, &mut descriptors);
        }
        descriptors
    }

    pub(crate) fn cost(&self, parts: &Parts) -> u64 {
        self.cost.as_ref().map_or(1, |f| f(parts))
    }

    /// The request's priority tier among waiting requests: the tier function's, else the lowest.
    pub(crate) fn tier(&self, parts: &Parts) -> u8 {
        let lowest = self.queues.fairness().lowest();
        self.tier.as_ref().and_then(|f| f(parts)).map_or(lowest, |t| t.min(lowest))
    }
}

impl<S> Clone for Config<S> {
    fn clone(&self) -> Self {
        Config {
            engine: Arc::clone(&self.engine),
            extractors: self.extractors.clone(),
            style: self.style,
            cost: self.cost.clone(),
            waiting: self.waiting.clone(),
            queues: self.queues.clone(),
            tier: self.tier.clone(),
        }
    }
}

impl<S> RateLimitLayer<S> {
    /// A layer applying `engine`, with no extractors yet (only rules without key descriptors or
    /// conditions apply until some are added), [`HeaderStyle::Both`] and a cost of 1.
    pub fn new(engine: impl Into<Arc<Engine<S>>>) -> Self {
        RateLimitLayer {
            config: Arc::new(Config {
                engine: engine.into(),
                extractors: Vec::new(),
                style: HeaderStyle::default(),
                cost: None,
                waiting: Waiting::new(DEFAULT_MAX_WAITING),
                queues: DelayQueues::default(),
                tier: None,
            }),
        }
    }

    fn config_mut(&mut self) -> &mut Config<S> {
        Arc::make_mut(&mut self.config)
    }

    /// Adds an extractor. Extractors run in the order added.
    pub fn extractor(mut self, extractor: Extractor) -> Self {
        self.config_mut().extractors.push(extractor);
        self
    }

    /// Adds the client IP as descriptor `ip` ([`Extractor::client_ip`]).
    pub fn client_ip(self, client_ip: ClientIp) -> Self {
        self.extractor(Extractor::client_ip(client_ip))
    }

    /// Adds request header `header` as descriptor `descriptor` ([`Extractor::header`]).
    pub fn header(self, header: HeaderName, descriptor: impl Into<Cow<'static, str>>) -> Self {
        self.extractor(Extractor::header(header, descriptor))
    }

    /// Adds the route template as descriptor `route` ([`Extractor::route`]).
    pub fn route(self) -> Self {
        self.extractor(Extractor::route())
    }

    /// Adds the method as descriptor `method` ([`Extractor::method`]).
    pub fn method(self) -> Self {
        self.extractor(Extractor::method())
    }

    /// Adds descriptor `descriptor` computed by `f` ([`Extractor::from_fn`]).
    pub fn descriptor_fn<F>(self, descriptor: impl Into<Cow<'static, str>>, f: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.extractor(Extractor::from_fn(descriptor, f))
    }

    /// Which rate-limit headers responses carry ([`HeaderStyle::Both`] by default).
    /// `Retry-After` is sent on every 429 whatever the style.
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        self.config_mut().style = style;
        self
    }

    /// The cost of a request (1 by default). A cost of 0, or above what an enforced limit grants
    /// at once, is answered with a 400 problem (the request can never be allowed).
    pub fn cost<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> u64 + Send + Sync + 'static,
    {
        self.config_mut().cost = Some(Arc::new(f));
        self
    }

    /// The most requests that wait for capacity at once under rules with
    /// [`Action::Delay`](floodgate::Action::Delay) (default 1024). A request a delay rule denied
    /// waits — up to the rule's `max_wait`, for the exact `retry_after` — and is decided again; when
    /// `max` requests already wait, it is denied at once. `max(0)` turns waiting off.
    pub fn max_waiting(mut self, max: usize) -> Self {
        self.config_mut().waiting = Waiting::new(max);
        self
    }

    /// Where requests that wait under `action: delay` queue: per delay key, first come first
    /// served within a tier, tiers released by weighted fair queueing with aging (see
    /// [`floodgate::delay`]). By default [`DelayQueues::default`]: tiers 0–3 weighing 8, 4, 2, 1,
    /// aging one tier a second on the system clock.
    pub fn delay_queues(mut self, queues: DelayQueues) -> Self {
        self.config_mut().queues = queues;
        self
    }

    /// A request's priority tier among waiting requests (0 is the highest). `None`, or no tier
    /// function, is the lowest tier; a tier past the lowest counts as the lowest.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use floodgate::{Engine, Policy};
    /// # use floodgate_tower::RateLimitLayer;
    /// # let engine = Arc::new(Engine::in_memory(Policy::new([])?));
    /// let layer = RateLimitLayer::new(engine)
    ///     .tier(|parts| parts.headers.get("x-priority")?.to_str().ok()?.parse().ok());
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tier<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> Option<u8> + Send + Sync + 'static,
    {
        self.config_mut().tier = Some(Arc::new(f));
        self
    }

    /// The queues requests wait in under `action: delay`.
    pub fn queues(&self) -> &DelayQueues {
        &self.config.queues
    }

    /// The requests waiting for capacity now, and how many waited so far.
    pub fn waiting(&self) -> &Waiting {
        &self.config.waiting
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine<S>> {
        &self.config.engine
    }

    /// The descriptors the layer extracts from a request head.
    pub fn descriptors(&self, parts: &Parts) -> Descriptors {
        self.config.descriptors(parts)
    }
}

impl<S> Clone for RateLimitLayer<S> {
    fn clone(&self) -> Self {
        RateLimitLayer { config: Arc::clone(&self.config) }
    }
}

impl<S> fmt::Debug for RateLimitLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("extractors", &self.config.extractors)
            .field("style", &self.config.style)
            .field("cost", &self.config.cost.as_ref().map(|_| "<fn>"))
            .finish_non_exhaustive()
    }
}

impl<S, T> Layer<T> for RateLimitLayer<S> {
    type Service = RateLimit<T, S>;

    fn layer(&self, inner: T) -> Self::Service {
        RateLimit::from_config(inner, Arc::clone(&self.config))
    }
}
