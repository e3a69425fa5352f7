//! The deployment artefacts beside the Prometheus rules (those are `tests/deploy.rs`'s): the
//! systemd unit, the Kubernetes manifests and the Dockerfile — each checked with the tool that
//! knows its format, and against the binary it starts.
//!
//! - `deploy/systemd/floodgate.service`: `systemd-analyze verify` and `systemd-analyze security`
//!   (Debian package `systemd`), its sandboxing directives, its command line;
//! - `deploy/kubernetes/`: `kubernetes-validate --strict` (the API schemas of the oldest and newest
//!   Kubernetes supported), probes, security context, resources, the ConfigMap's configuration,
//!   the Service, the ServiceMonitor and the kustomization agreeing with each other;
//! - `Dockerfile`: `hadolint`, stages, user, ports, command line.
//!
//! Every command line an artefact gives `floodgate` is parsed by the binary's own argument parser,
//! and every configuration it ships is loaded by the configuration loader. `kubernetes-validate`
//! and `hadolint` are installed by `scripts/deploy-tools` (pinned, hash-checked, in a venv under
//! `target/`); these tests fail, never skip, when a tool is missing, saying how to install it.

mod docker;
mod kubernetes;
mod support;
mod systemd;
