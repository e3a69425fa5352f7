//! The bench's HTTP/1.1 client: pooled keep-alive connections with `TCP_NODELAY`, each exchange
//! read whole within a timeout (so its connection goes back to the pool), and the pages a run
//! reads beside its load (`/readyz`, `/metrics`, a peer's counters); a fixed set of connections
//! kept open through a run ([`Connections`]); and [`Transport`], either of the two behind a target.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::time::Instant;

/// The pooled HTTP/1.1 client of the HTTP targets and the processes' APIs.
pub(crate) type Client = hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>;

/// A new pooled client: keep-alive, `TCP_NODELAY`, idle connections kept 30 s.
pub(crate) fn pooled() -> Client {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}

/// Why an exchange has no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoAnswer {
    /// The connection was refused: the request was never sent.
    Connect,
    /// The connection failed once the request may have been sent.
    Transport,
    /// The answer's body could not be read.
    Body,
    /// No whole answer within the timeout.
    Timeout,
}

impl NoAnswer {
    /// The error kind reports count it as.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            NoAnswer::Connect => "connect",
            NoAnswer::Transport => "http_transport",
            NoAnswer::Body => "http_body",
            NoAnswer::Timeout => "timeout",
        }
    }
}

/// Sends `request` and reads the whole answer within `timeout`.
pub(crate) async fn exchange(
    client: &Client,
    request: http::Request<Full<Bytes>>,
    timeout: Duration,
) -> Result<(http::StatusCode, Bytes), NoAnswer> {
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| if e.is_connect() { NoAnswer::Connect } else { NoAnswer::Transport })?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(|_| NoAnswer::Body)?.to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(timeout, exchange).await.unwrap_or(Err(NoAnswer::Timeout))
}

/// `GET url` on `client`, within `timeout`.
pub(crate) async fn get_on(
    client: &Client,
    url: &str,
    timeout: Duration,
) -> Result<(http::StatusCode, Bytes), NoAnswer> {
    let request = http::Request::get(url).body(Full::new(Bytes::new())).map_err(|_| NoAnswer::Connect)?;
    exchange(client, request, timeout).await
}

/// `GET url` (loopback HTTP) on a client of its own: its status and whole body, or `None`
/// without an answer within `timeout`.
pub(crate) async fn get(url: &str, timeout: Duration) -> Option<(http::StatusCode, Bytes)> {
    get_on(&pooled(), url, timeout).await.ok()
}

// === impl Transport ===

/// How a target's requests reach its server.
#[derive(Debug, Clone)]
pub enum Transport {
    /// The [`pooled`] client: connections opened as the load's concurrency rises.
    Pooled(Box<Client>),
    /// A fixed set of connections opened before the load starts ([`Connections`]), as wrk2 holds
    /// them: an open-loop run then measures the server, not the connections a burst makes it open.
    Fixed(Connections),
}

impl Transport {
    /// Sends `request` (its URI absolute) and reads the whole answer within `timeout`.
    pub(crate) async fn exchange(
        &self,
        request: http::Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<(http::StatusCode, Bytes), NoAnswer> {
        match self {
            Transport::Pooled(client) => exchange(client, request, timeout).await,
            Transport::Fixed(connections) => connections.exchange(origin_form(request), timeout).await,
        }
    }
}

/// `request` with its URI as a path and its authority, if it had one, as its `host`: what a
/// request written on a connection of its own carries.
fn origin_form(mut request: http::Request<Full<Bytes>>) -> http::Request<Full<Bytes>> {
    let uri = request.uri().clone();
    if let Some(authority) = uri.authority()
        && let Ok(host) = http::HeaderValue::from_str(authority.as_str())
    {
        request.headers_mut().entry(http::header::HOST).or_insert(host);
    }
    if let Some(path) = uri.path_and_query() {
        *request.uri_mut() = http::Uri::from(path.clone());
    }
    request
}

// === impl Connections ===

/// `n` keep-alive HTTP/1.1 connections to one server, opened at the start and kept through a run:
/// a request waits for a free one (in the order they were asked), and a connection that fails or
/// whose exchange times out is replaced. Unlike the [`pooled`] client, which opens connections as
/// the load's concurrency rises and closes them once idle, the server holds the same connections
/// all along: what its file descriptors are measured against (`soak`). Dropped, the connections
/// close.
#[derive(Debug, Clone)]
pub struct Connections {
    jobs: mpsc::UnboundedSender<Job>,
    /// `127.0.0.1:PORT`, the `host` of requests without one.
    host: http::HeaderValue,
}

/// One exchange waiting for a connection.
#[derive(Debug)]
struct Job {
    request: http::Request<Full<Bytes>>,
    /// When the asker stops waiting: the exchange must be over by then.
    deadline: Instant,
    reply: oneshot::Sender<Result<(http::StatusCode, Bytes), NoAnswer>>,
}

impl Connections {
    /// Opens `n` connections to `addr`.
    pub(crate) async fn open(addr: SocketAddr, n: usize) -> std::io::Result<Connections> {
        let (jobs, queue) = mpsc::unbounded_channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..n {
            let sender = connect(addr).await?;
            tokio::spawn(serve_jobs(addr, sender, Arc::clone(&queue)));
        }
        let host = http::HeaderValue::from_str(&addr.to_string()).map_err(std::io::Error::other)?;
        Ok(Connections { jobs, host })
    }

    /// Sends `request` (its URI a path; the server's address as its `host` unless it has one) on
    /// the next free connection and reads the whole answer, waiting for a connection included,
    /// within `timeout`.
    pub(crate) async fn exchange(
        &self,
        mut request: http::Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<(http::StatusCode, Bytes), NoAnswer> {
        request.headers_mut().entry(http::header::HOST).or_insert_with(|| self.host.clone());
        let (reply, answer) = oneshot::channel();
        let deadline = Instant::now() + timeout;
        self.jobs.send(Job { request, deadline, reply }).map_err(|_| NoAnswer::Connect)?;
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(NoAnswer::Transport),
            Err(_) => Err(NoAnswer::Timeout),
        }
    }
}

async fn connect(addr: SocketAddr) -> std::io::Result<SendRequest<Full<Bytes>>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(std::io::Error::other)?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One connection's loop: takes the next job, sends it, replies; reconnects after a failure.
/// Ends when every [`Connections`] handle is dropped.
async fn serve_jobs(
    addr: SocketAddr,
    sender: SendRequest<Full<Bytes>>,
    queue: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>,
) {
    let mut sender = Some(sender);
    loop {
        let job = queue.lock().await.recv().await;
        let Some(job) = job else { return };
        if job.reply.is_closed() {
            // Its asker gave up while it waited.
            continue;
        }
        let answer = tokio::time::timeout_at(job.deadline, send(addr, &mut sender, job.request)).await;
        let answer = answer.unwrap_or(Err(NoAnswer::Timeout));
        if answer.is_err() {
            // A connection in an unknown state (a request of it may still be in flight): a new one.
            sender = None;
        }
        let _ = job.reply.send(answer);
    }
}

async fn send(
    addr: SocketAddr,
    sender: &mut Option<SendRequest<Full<Bytes>>>,
    request: http::Request<Full<Bytes>>,
) -> Result<(http::StatusCode, Bytes), NoAnswer> {
    if sender.as_ref().is_none_or(SendRequest::is_closed) {
        *sender = Some(connect(addr).await.map_err(|_| NoAnswer::Connect)?);
    }
    let Some(connection) = sender.as_mut() else { return Err(NoAnswer::Connect) };
    connection.ready().await.map_err(|_| NoAnswer::Transport)?;
    let response = connection.send_request(request).await.map_err(|_| NoAnswer::Transport)?;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(|_| NoAnswer::Body)?.to_bytes();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A server answering `200 ok` after `delay`, counting the connections it accepted.
    async fn server(delay: Duration) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |_request| async move {
                        tokio::time::sleep(delay).await;
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from_static(
                            b"ok",
                        ))))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        (addr, accepted)
    }

    fn get(path: &str) -> http::Request<Full<Bytes>> {
        http::Request::get(path).body(Full::new(Bytes::new())).unwrap()
    }

    #[tokio::test]
    async fn requests_share_the_connections_opened_at_the_start() {
        let (addr, accepted) = server(Duration::from_millis(2)).await;
        let connections = Connections::open(addr, 3).await.unwrap();
        let exchanges: Vec<_> = (0..30)
            .map(|_| {
                let connections = connections.clone();
                tokio::spawn(async move { connections.exchange(get("/"), Duration::from_secs(5)).await })
            })
            .collect();
        for exchange in exchanges {
            let (status, body) = exchange.await.unwrap().unwrap();
            assert_eq!((status, &body[..]), (http::StatusCode::OK, &b"ok"[..]));
        }
        assert_eq!(accepted.load(Ordering::Relaxed), 3, "no connection opened beyond the three");
    }

    #[tokio::test]
    async fn a_fixed_transport_sends_absolute_uris_on_its_own_connections() {
        let (addr, accepted) = server(Duration::ZERO).await;
        let transport = Transport::Fixed(Connections::open(addr, 2).await.unwrap());
        for _ in 0..10 {
            let (status, body) = transport
                .exchange(get(&format!("http://{addr}/bench?x=1")), Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!((status, &body[..]), (http::StatusCode::OK, &b"ok"[..]));
        }
        assert_eq!(accepted.load(Ordering::Relaxed), 2);
        let request = origin_form(get("http://127.0.0.1:9/bench?x=1"));
        assert_eq!(request.uri(), "/bench?x=1");
        assert_eq!(request.headers()[http::header::HOST], "127.0.0.1:9");
    }

    #[tokio::test]
    async fn an_exchange_past_its_timeout_has_no_answer_and_its_connection_is_replaced() {
        let (addr, accepted) = server(Duration::from_millis(300)).await;
        let connections = Connections::open(addr, 1).await.unwrap();
        let late = connections.exchange(get("/"), Duration::from_millis(50)).await;
        assert_eq!(late, Err(NoAnswer::Timeout));
        let (status, _) = connections.exchange(get("/"), Duration::from_secs(5)).await.unwrap();
        assert_eq!((status, accepted.load(Ordering::Relaxed)), (http::StatusCode::OK, 2));
    }
}
