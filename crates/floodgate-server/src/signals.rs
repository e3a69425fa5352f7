//! The binary's signals: `SIGTERM` and `SIGINT` shut down, `SIGHUP` reloads the configuration.

use floodgate_app::audit::Trigger;
use floodgate_app::{App, stopped};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Completes on `SIGTERM` or `SIGINT` (Ctrl-C): the binary's shutdown trigger.
pub async fn shutdown_signal() {
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        // Without signal handlers there is nothing to wait for but the process's end.
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
    }
}

/// Reloads `app`'s configuration file on every `SIGHUP` until `stop` turns true.
pub(crate) fn reload_on_sighup(app: App, mut stop: watch::Receiver<bool>) -> std::io::Result<()> {
    let mut hangups = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                received = hangups.recv() => {
                    if received.is_none() {
                        return;
                    }
                    // The change itself is logged once, as `config_applied` (source `sighup`)
                    // or `config_rejected`.
                    tracing::debug!("SIGHUP: reloading the configuration");
                    floodgate_app::reload::reload_logged(&app, Trigger::Sighup).await;
                }
                () = stopped(&mut stop) => return,
            }
        }
    });
    Ok(())
}
