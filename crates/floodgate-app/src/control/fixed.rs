//! What a configuration fixes at start — the store opened, the listeners bound, the directories
//! opened — which a change cannot change: a change that would is refused, and a kept version that
//! would is not resumed.

use floodgate_config::{Config, StoreConfig, Survival};

use super::ApplyError;
use super::running::Running;
use crate::admin_state::StoredVersion;
use crate::store::same_store;

/// Which configuration to start with, given the latest version kept in the state directory: the
/// latest kept version when the configuration file has not changed since it was applied (an admin
/// change outlives the restart), else `config` (the file as it is now) as a new version. Returns the
/// configuration, its version, and the kept version it resumes.
pub(super) fn resume(config: Config, latest: Option<&StoredVersion>) -> (Config, u64, Option<u64>) {
    let Some(latest) = latest else { return (config, 1, None) };
    if latest.source.hash == config.source.hash {
        return (config, latest.version, Some(latest.version));
    }
    if latest.file_hash != config.source.hash {
        tracing::info!(
            event = "config_file_changed",
            kept = latest.version,
            "the configuration file changed since the last kept version was applied: the file wins"
        );
        return (config, latest.version + 1, None);
    }
    let resumed = latest.source.read().map_err(|e| e.to_string()).and_then(|kept| {
        replaceable(Fixed::of(&config), Fixed::of(&kept)).map(|()| kept).map_err(|e| e.to_string())
    });
    match resumed {
        Ok(kept) => (kept, latest.version, Some(latest.version)),
        Err(error) => {
            tracing::warn!(
                event = "config_not_resumed",
                kept = latest.version,
                %error,
                "the last kept version cannot be read again, or changes what is fixed at start: starting from the file"
            );
            (config, latest.version + 1, None)
        }
    }
}

/// What a configuration fixes at start (the store opened, the listeners bound, the directories
/// opened), which a reload cannot change.
#[derive(Clone, Copy)]
struct Fixed<'a> {
    store: &'a StoreConfig,
    survival: &'a Survival,
    tls: Option<&'a floodgate_config::tls::TlsConfig>,
    admin: &'a floodgate_config::admin::AdminConfig,
    gateway: Option<&'a floodgate_config::gateway::GatewayConfig>,
}

impl Fixed<'_> {
    fn of(config: &Config) -> Fixed<'_> {
        Fixed {
            store: &config.store,
            survival: &config.survival,
            tls: config.tls.as_ref(),
            admin: &config.admin,
            gateway: config.gateway.as_ref(),
        }
    }

    fn of_running(running: &Running) -> Fixed<'_> {
        Fixed {
            store: &running.store,
            survival: &running.survival,
            tls: running.tls.as_ref(),
            admin: &running.admin,
            gateway: running.gateway.as_deref(),
        }
    }
}

/// Refuses a configuration that changes what `current` fixed at start.
pub(super) fn check_replaceable(current: &Running, config: &Config) -> Result<(), ApplyError> {
    replaceable(Fixed::of_running(current), Fixed::of(config))
}

/// Refuses `wanted` when it changes what `current` fixed at start: the store (opened once), the
/// listeners' TLS settings, the admin state directory, or the gateway's listener and state
/// directory (bound and opened once).
fn replaceable(current: Fixed<'_>, wanted: Fixed<'_>) -> Result<(), ApplyError> {
    if !same_store(current.store, wanted.store) || current.survival != wanted.survival {
        return Err(ApplyError::Refused(format!(
            "store: the store settings cannot change while running ({} → {}); restart floodgate to change them",
            current.store.summary(),
            wanted.store.summary()
        )));
    }
    let gateway_tls =
        (current.gateway.and_then(|g| g.tls.as_ref()), wanted.gateway.and_then(|g| g.tls.as_ref()));
    if current.tls != wanted.tls || gateway_tls.0 != gateway_tls.1 {
        return Err(ApplyError::Refused(
            "tls: the listeners' TLS settings (tls, gateway.tls) cannot change while running; the certificate \
             files themselves are reloaded when they change; restart floodgate to change the settings"
                .into(),
        ));
    }
    if current.admin != wanted.admin {
        return Err(ApplyError::Refused(
            "admin: the state directory is opened at start and cannot change while running; restart floodgate \
             to change it"
                .into(),
        ));
    }
    let listener = |g: &floodgate_config::gateway::GatewayConfig| (g.listen, g.state_dir.clone());
    match (current.gateway.map(listener), wanted.gateway.map(listener)) {
        (None, None) => Ok(()),
        (Some(_), None) => Err(ApplyError::Refused(
            "gateway: the gateway cannot be removed while running; restart floodgate to remove it".into(),
        )),
        (None, Some(_)) => Err(ApplyError::Refused(
            "gateway: a gateway cannot be added while running (its listener is bound at start); restart floodgate"
                .into(),
        )),
        (Some((listen, dir)), Some((new_listen, new_dir))) if listen != new_listen || dir != new_dir => {
            Err(ApplyError::Refused(format!(
                "gateway: listen and state_dir cannot change while running ({listen} → {new_listen}); restart \
                 floodgate to change them"
            )))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(store: &str) -> Config {
        floodgate_config::parse(
            "f.yaml",
            &format!("store: {{ kind: redis, url: 'redis://127.0.0.1:6379'{store} }}\n"),
        )
        .unwrap()
    }

    #[test]
    fn a_store_default_written_out_is_no_change_and_another_value_is() {
        let (left_out, written) = (config(""), config(", deadline: 50ms, prefix: floodgate"));
        assert_eq!(replaceable(Fixed::of(&left_out), Fixed::of(&written)), Ok(()));
        assert_eq!(replaceable(Fixed::of(&written), Fixed::of(&left_out)), Ok(()));
        let other = config(", deadline: 40ms");
        let refused = replaceable(Fixed::of(&left_out), Fixed::of(&other));
        assert!(
            matches!(&refused, Err(ApplyError::Refused(why)) if why.starts_with("store:")),
            "{refused:?}"
        );
    }
}
