//! The readiness probe of a [`RedisStore`](crate::RedisStore): `PING` on a connection of its own,
//! its answer cached.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterConfig;
use redis::cluster_async::ClusterConnection;

use crate::{RedisConfig, Target, tls};

/// How long a readiness answer is reused.
pub const PROBE_CACHE: Duration = Duration::from_secs(1);
/// The least time a readiness `PING` is given, whatever the store's deadline: a probe that has to
/// reconnect must not flap.
pub const PROBE_TIMEOUT_FLOOR: Duration = Duration::from_millis(100);

/// `PING` on its own connection (to every master of a cluster), so that probing never takes one of
/// the store's in-flight slots; the last answer is kept for [`PROBE_CACHE`].
pub(crate) struct Probe {
    conn: ProbeConn,
    timeout: Duration,
    /// When the last answer was had, and what it was; the lock also makes concurrent probes wait
    /// for one `PING` rather than each sending their own.
    last: tokio::sync::Mutex<Option<(tokio::time::Instant, bool)>>,
}

#[derive(Clone)]
enum ProbeConn {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("cluster", &matches!(self.conn, ProbeConn::Cluster(_)))
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Probe {
    /// A probe of `config`'s Redis, not connected yet; every `PING` gets the store's deadline, at
    /// least [`PROBE_TIMEOUT_FLOOR`].
    pub(crate) fn new(
        config: &RedisConfig,
        certs: Option<&redis::TlsCertificates>,
    ) -> Result<Probe, redis::RedisError> {
        let timeout = config.deadline.max(PROBE_TIMEOUT_FLOOR);
        let conn = match &config.target {
            Target::Node(url) => {
                let client = tls::node_client(url, certs)?;
                let manager = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(0)
                    .set_min_delay(Duration::from_millis(10))
                    .set_max_delay(Duration::from_millis(500));
                ProbeConn::Node(ConnectionManager::new_lazy_with_config(client, manager)?)
            }
            Target::Cluster(seeds) => {
                let client = tls::cluster_builder(seeds, certs)
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .retries(0)
                    .build()?;
                let cluster =
                    ClusterConfig::new().set_connection_timeout(timeout).set_response_timeout(timeout);
                ProbeConn::Cluster(client.get_pending_async_connection_with_config(cluster))
            }
        };
        Ok(Probe { conn, timeout, last: tokio::sync::Mutex::new(None) })
    }

    /// Whether Redis answered `PING` (every master of a cluster) within the timeout, as of at most
    /// [`PROBE_CACHE`] ago, and why not when it did not.
    pub(crate) async fn ready(&self) -> Readiness {
        let mut last = self.last.lock().await;
        let now = tokio::time::Instant::now();
        if let Some((at, ready)) = *last
            && now.duration_since(at) < PROBE_CACHE
        {
            return if ready { Readiness::Ready } else { Readiness::Cached };
        }
        let result = tokio::time::timeout(self.timeout, self.ping()).await;
        let answer = match result {
            Ok(Ok(())) => Readiness::Ready,
            Ok(Err(e)) => Readiness::Failed(e.to_string()),
            Err(_) => Readiness::Failed(format!("no answer to PING within {:?}", self.timeout)),
        };
        *last = Some((tokio::time::Instant::now(), answer == Readiness::Ready));
        answer
    }

    /// Runs `invocation` on the probe's connection, within the probe's timeout (`None` past it):
    /// for the store's own housekeeping (fleet heartbeats), which must not take the decisions'
    /// in-flight slots.
    pub(crate) async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Option<redis::RedisResult<T>> {
        let call = async {
            match self.conn.clone() {
                ProbeConn::Node(mut c) => invocation.invoke_async(&mut c).await,
                ProbeConn::Cluster(mut c) => invocation.invoke_async(&mut c).await,
            }
        };
        tokio::time::timeout(self.timeout, call).await.ok()
    }

    /// The probe's timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn ping(&self) -> redis::RedisResult<()> {
        let ping = redis::cmd("PING");
        match self.conn.clone() {
            ProbeConn::Node(mut c) => ping.query_async::<()>(&mut c).await,
            ProbeConn::Cluster(mut c) => ping.query_async::<()>(&mut c).await,
        }
    }
}

/// What a readiness probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Redis answered `PING` in time.
    Ready,
    /// It did not, and here is why.
    Failed(String),
    /// It did not when last asked, less than [`PROBE_CACHE`] ago.
    Cached,
}

impl Readiness {
    /// Whether the store can decide.
    pub fn is_ready(&self) -> bool {
        *self == Readiness::Ready
    }
}
