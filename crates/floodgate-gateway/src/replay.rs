//! Accepted writes replayed to their route's upstream, in order, until each is answered.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use http_body_util::BodyExt;
use tokio::sync::watch;

use super::call;
use super::queue::{Accepted, Delivered, KEPT_BODY};
use super::state::GatewayState;
use super::upstream::{self, Failure, Outgoing, Prepared};
use floodgate_app::stopped;

/// The wait after a failed replay before trying again.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Replays pending writes until `stop` turns true.
pub(super) async fn replay(gateway: Arc<GatewayState>, mut stop: watch::Receiver<bool>) {
    let Some(queue) = gateway.queue.as_ref() else { return };
    loop {
        let Some(accepted) = queue.next() else {
            tokio::select! {
                () = queue.arrived.notified() => continue,
                () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                () = stopped(&mut stop) => return,
            }
        };
        let delivered = tokio::select! {
            d = deliver(&gateway, &accepted) => d,
            () = stopped(&mut stop) => return,
        };
        match delivered {
            Some(delivered) => {
                if let Err(e) = queue.delivered(&accepted.id, delivered).await {
                    tracing::error!(error = %e, "gateway: cannot record a delivered write");
                }
                gateway.metrics.accepted_pending.set(queue.pending() as f64);
            }
            None => tokio::select! {
                () = tokio::time::sleep(RETRY_PAUSE) => {}
                () = stopped(&mut stop) => return,
            },
        }
    }
}

/// Sends one accepted write; its outcome when the upstream answered it (below 500), or `None` to
/// try again later.
async fn deliver(gateway: &GatewayState, accepted: &Accepted) -> Option<Delivered> {
    let table = gateway.table();
    let Some(route) = table.route(&accepted.route) else {
        return Some(Delivered {
            status: 0,
            content_type: None,
            body: format!("the route {:?} no longer exists; the write was not delivered", accepted.route),
        });
    };
    let mut headers = HeaderMap::new();
    for (name, value) in &accepted.headers {
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value))
        {
            headers.append(name, value);
        }
    }
    let request = Prepared {
        method: Method::from_bytes(accepted.method.as_bytes()).ok()?,
        uri: upstream::target(&route.config.upstream.uri, &accepted.path_and_query.parse().ok()?)?,
        headers,
        body: Outgoing::Kept(accepted.body.clone()),
        upgrade: false,
    };
    let deadline = route.config.timeouts.total.map(|t| tokio::time::Instant::now() + t);
    match call::call(route, request, deadline).await {
        Ok(response) if !response.status().is_server_error() => {
            let status = response.status().as_u16();
            let content_type = response
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = http_body_util::Limited::new(response.into_body(), KEPT_BODY)
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            Some(Delivered { status, content_type, body: String::from_utf8_lossy(&body).into_owned() })
        }
        Ok(_) | Err(Failure::BreakerOpen | Failure::Connect | Failure::ConnectTimeout) => None,
        Err(failure) => {
            tracing::debug!(?failure, id = %accepted.id, "gateway: replaying an accepted write failed; will retry");
            None
        }
    }
}
