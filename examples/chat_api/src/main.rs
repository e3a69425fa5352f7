//! Runs the chat API on `127.0.0.1:$PORT` (default 3000).

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let port = match std::env::var("PORT") {
        Ok(port) => match port.parse::<u16>() {
            Ok(port) => port,
            Err(error) => {
                eprintln!("invalid PORT {port:?}: {error}");
                return ExitCode::from(64);
            }
        },
        Err(_) => 3000,
    };
    let listener = match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("cannot listen on 127.0.0.1:{port}: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!("chat_api listening on http://127.0.0.1:{port}");
    match chat_api::serve(listener, chat_api::app(chat_api::engine())).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("server error: {error}");
            ExitCode::FAILURE
        }
    }
}
