//! Floodgate's side of the peer comparison with `@nestjs/throttler` (bench/peers/nestjs): the same
//! minimal app — `POST /chat` answering `{"reply": ...}`, limited per user by the `x-user-id`
//! header — with `floodgate-tower` in front of it, in memory. Configured from the environment like
//! the NestJS app:
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `LIMIT` | 10 | requests per window per user |
//! | `WINDOW_MS` | 60000 | the window |
//! | `ALGORITHM` | `fixed_window` | `fixed_window`, `sliding_window`, `sliding_log`, `token_bucket`, `gcra` |
//! | `PORT` | 3001 | on 127.0.0.1 |
//!
//! `examples/chat_api` is the same app with a fixed policy (10/min per user, 1000/h per tenant,
//! sliding windows); this one takes the limit and algorithm from the environment so that each peer
//! can be matched. Driven by `floodgate-bench throughput|boundary --route-target
//! http://127.0.0.1:3001/chat` in `bench/run-all`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::routing::post;
use floodgate::{Engine, Policy, Rule};
use floodgate_bench::args::Algorithm;
use floodgate_tower::RateLimitLayer;
use http::HeaderName;
use serde_json::{Value, json};

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn policy() -> Result<Policy, String> {
    let limit: u64 = env("LIMIT", "10").parse().map_err(|_| "LIMIT: not a number".to_owned())?;
    let window: u64 = env("WINDOW_MS", "60000").parse().map_err(|_| "WINDOW_MS: not a number".to_owned())?;
    let algorithm = Algorithm::parse(&env("ALGORITHM", "fixed_window"))?;
    let limit = algorithm.limit(limit, Duration::from_millis(window)).map_err(|e| e.to_string())?;
    let rule = Rule::new("chat-per-user", limit).when("route", "POST /chat").key(["user"]);
    Policy::new([rule]).map_err(|e| e.to_string())
}

async fn chat() -> Json<Value> {
    Json(json!({ "reply": "ok" }))
}

#[tokio::main]
async fn main() -> ExitCode {
    let policy = match policy() {
        Ok(policy) => policy,
        Err(error) => {
            eprintln!("route_app: {error}");
            return ExitCode::from(64);
        }
    };
    let port: u16 = match env("PORT", "3001").parse() {
        Ok(port) => port,
        Err(_) => {
            eprintln!("route_app: PORT: not a port");
            return ExitCode::from(64);
        }
    };
    let limits = RateLimitLayer::new(Arc::new(Engine::in_memory(policy)))
        .header(HeaderName::from_static("x-user-id"), "user")
        .route();
    let app = axum::Router::new().route("/chat", post(chat)).layer(limits);
    let listener = match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("route_app: cannot listen on 127.0.0.1:{port}: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!("route_app listening on http://127.0.0.1:{port}/chat");
    match axum::serve(listener, app).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("route_app: {error}");
            ExitCode::FAILURE
        }
    }
}
