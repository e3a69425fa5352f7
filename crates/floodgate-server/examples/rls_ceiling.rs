//! The gRPC ceiling of `bench/service/run`: an Envoy RLS v3 server on the same stack as Floodgate's
//! (tonic, HTTP/2, prost), answering every `ShouldRateLimit` with `OK` and one `OK` status per
//! descriptor, doing nothing else — what a do-nothing rate-limit service reaches on these cores
//! with the same client, as nginx's `return 200` is for HTTP.
//!
//! ```sh
//! cargo run --release -p floodgate-server --example rls_ceiling -- 127.0.0.1:18081
//! ```

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug)]
struct Ceiling;

#[tonic::async_trait]
impl RateLimitService for Ceiling {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let ok = DescriptorStatus { code: Code::Ok as i32, ..DescriptorStatus::default() };
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![ok; request.get_ref().descriptors.len()],
            ..RateLimitResponse::default()
        }))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: std::net::SocketAddr =
        std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:18081".into()).parse()?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(Ceiling))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
