//! `fake-openai [--listen ADDR] [--tokens N] [--delay-ms N]`: the OpenAI-compatible upstream of
//! the LLM gateway's example (see the library's docs for what it answers and the `x-fake-*`
//! headers a request may send).

use std::time::Duration;

use fake_openai::{FakeOpenAi, Settings};

fn usage() -> ! {
    eprintln!("usage: fake-openai [--listen 127.0.0.1:9000] [--tokens 16] [--delay-ms 0]");
    std::process::exit(64);
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let mut listen = "127.0.0.1:9000".to_owned();
    let mut settings = Settings::default();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--listen" => listen = value,
            "--tokens" => settings.tokens = value.parse().unwrap_or_else(|_| usage()),
            "--delay-ms" => settings.delay = Duration::from_millis(value.parse().unwrap_or_else(|_| usage())),
            _ => usage(),
        }
    }
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    let fake = FakeOpenAi::serve(listener, settings)?;
    // The address on one line, for whoever started it with port 0.
    println!("fake-openai listening on {}", fake.url());
    tokio::signal::ctrl_c().await?;
    Ok(())
}
