//! `deploy/kubernetes/`: the Deployment, ConfigMap, Service, ServiceMonitor and kustomization.

use std::collections::BTreeSet;
use std::path::Path;

use floodgate_server::cli::LogFormat;
use serde_json::Value;

use crate::support::{at, check_config, deploy_tool, read, run, serve_args, tempdir, text, yaml};

const DIR: &str = "deploy/kubernetes";
/// The Kubernetes releases the manifests are validated against: the oldest supported (the
/// `preStop` `sleep` action is on by default from 1.30) and the newest the validator knows.
const VERSIONS: [&str; 2] = ["1.30", "1.37"];
/// The manifests of kinds the validator has schemas for (the ServiceMonitor is a custom
/// resource, the kustomization no API object: those are checked below, field by field).
const SCHEMA_CHECKED: [&str; 3] = ["configmap.yaml", "deployment.yaml", "service.yaml"];
const HINT: &str = "run `scripts/deploy-tools` (scripts/test does)";

fn manifest(name: &str) -> Value {
    yaml(&format!("{DIR}/{name}"))
}

fn kubernetes_validate(files: &[&str], version: &str) -> std::process::Output {
    let tool = deploy_tool("kubernetes-validate");
    let mut args = vec!["--strict", "--quiet", "--kubernetes-version", version];
    args.extend_from_slice(files);
    run(&tool, &args, HINT)
}

#[test]
fn the_manifests_pass_the_kubernetes_api_schemas_strictly() {
    let files: Vec<String> = SCHEMA_CHECKED.iter().map(|f| format!("{DIR}/{f}")).collect();
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    for version in VERSIONS {
        let output = kubernetes_validate(&files, version);
        assert!(output.status.success(), "Kubernetes {version}:\n{}", text(&output));
        let said = String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
        assert!(!said.contains("Couldn't find schema"), "Kubernetes {version}: {said}");
    }

    // And the check can fail: a misspelt field is refused in strict mode.
    let dir = tempdir("kubernetes-validate");
    let broken = dir.join("deployment.yaml");
    std::fs::write(
        &broken,
        read(&format!("{DIR}/deployment.yaml")).replace("readinessProbe", "readynessProbe"),
    )
    .unwrap();
    let output = kubernetes_validate(&[broken.to_str().unwrap()], VERSIONS[1]);
    assert!(!output.status.success(), "a misspelt field passed:\n{}", text(&output));
    assert!(text(&output).contains("readynessProbe"), "{}", text(&output));
}

#[test]
fn the_kustomization_lists_every_manifest() {
    let listed: BTreeSet<String> = at(&manifest("kustomization.yaml"), "resources")
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("a file name").to_owned())
        .collect();
    let present: BTreeSet<String> = std::fs::read_dir(crate::support::root().join(DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    assert_eq!(listed, present);
    for file in SCHEMA_CHECKED {
        assert!(listed.contains(file), "{file}");
    }
}

/// The Deployment's one container.
fn container(deployment: &Value) -> &Value {
    let containers = at(deployment, "spec.template.spec.containers").as_array().expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

/// The container's command line: the image's ENTRYPOINT (Dockerfile) with the Deployment's `args`.
fn command_line(container: &Value) -> Vec<String> {
    assert!(at(container, "command").is_null(), "the image's ENTRYPOINT runs floodgate");
    at(container, "args")
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string args").to_owned())
        .collect()
}

fn port_named(container: &Value, name: &str) -> u64 {
    at(container, "ports")
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("no container port named {name}"))
}

#[test]
fn the_deployment_probes_readiness_and_liveness_on_the_http_port() {
    let deployment = manifest("deployment.yaml");
    let container = container(&deployment);
    assert_eq!(at(container, "readinessProbe.httpGet.path"), "/readyz");
    assert_eq!(at(container, "livenessProbe.httpGet.path"), "/healthz");
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(at(container, &format!("{probe}.httpGet.port")), "http", "{probe}");
    }
    let (_, serve) = serve_args("deployment.yaml", &command_line(container));
    assert_eq!(u64::from(serve.http.port()), port_named(container, "http"), "--http is the http port");
    assert_eq!(u64::from(serve.grpc.port()), port_named(container, "grpc"), "--grpc is the grpc port");
    // Kubernetes sends SIGTERM, then waits this long: requests in flight finish well within it.
    assert!(at(&deployment, "spec.template.spec.terminationGracePeriodSeconds").as_u64() >= Some(10));
    assert!(at(container, "lifecycle.preStop.sleep.seconds").as_u64() >= Some(1));
}

#[test]
fn the_deployment_runs_as_non_root_on_a_read_only_root_with_resource_requests() {
    let deployment = manifest("deployment.yaml");
    let pod = at(&deployment, "spec.template.spec");
    let container = container(&deployment);
    assert_eq!(at(pod, "securityContext.runAsNonRoot"), true);
    assert!(at(pod, "securityContext.runAsUser").as_u64() > Some(0), "a numeric non-root user");
    assert_eq!(at(pod, "securityContext.seccompProfile.type"), "RuntimeDefault");
    assert_eq!(at(pod, "automountServiceAccountToken"), false, "floodgate never calls the Kubernetes API");
    let security = at(container, "securityContext");
    assert_eq!(at(security, "readOnlyRootFilesystem"), true);
    assert_eq!(at(security, "allowPrivilegeEscalation"), false);
    assert_eq!(at(security, "runAsNonRoot"), true);
    assert_eq!(at(security, "capabilities.drop"), &serde_json::json!(["ALL"]));
    for resource in ["cpu", "memory"] {
        assert!(at(container, &format!("resources.requests.{resource}")).is_string(), "requests.{resource}");
    }
    assert!(at(container, "resources.limits.memory").is_string(), "a memory limit");
}

#[test]
fn the_deployments_command_line_parses_and_exposes_the_admin_api_only_with_a_token() {
    let deployment = manifest("deployment.yaml");
    let container = container(&deployment);
    let (format, serve) = serve_args("deployment.yaml", &command_line(container));
    assert_eq!(format, LogFormat::Json);
    assert!(!serve.no_watch, "the ConfigMap is watched");
    // Listening beyond loopback: the token comes from a Secret, or floodgate refuses to start.
    assert!(!serve.http.ip().is_loopback());
    let token = at(container, "env")
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "FLOODGATE_ADMIN_TOKEN")
        .expect("FLOODGATE_ADMIN_TOKEN in env");
    assert!(at(token, "valueFrom.secretKeyRef.name").is_string(), "the token comes from a Secret");
    assert!(at(token, "value").is_null(), "no token written in the manifest");
}

#[test]
fn the_configmap_is_mounted_as_a_directory_and_holds_a_valid_configuration() {
    let deployment = manifest("deployment.yaml");
    let configmap = manifest("configmap.yaml");
    let container = container(&deployment);
    let (_, serve) = serve_args("deployment.yaml", &command_line(container));
    let config = serve.config.expect("--config");
    let (dir, file) = (config.parent().unwrap(), config.file_name().unwrap().to_str().unwrap());

    let volume = at(&deployment, "spec.template.spec.volumes")
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| at(v, "configMap.name") == at(&configmap, "metadata.name"))
        .expect("a volume of the ConfigMap");
    let mount = at(container, "volumeMounts")
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the ConfigMap's volume is mounted");
    assert_eq!(Path::new(mount["mountPath"].as_str().unwrap()), dir, "mounted where --config points");
    // A subPath mount is never updated by the kubelet: hot reload would not see a change.
    assert!(mount.get("subPath").is_none(), "the directory is mounted, not one file");
    assert_eq!(mount["readOnly"], true);

    let text = configmap["data"][file].as_str().unwrap_or_else(|| panic!("configmap.yaml: data.{file}"));
    let config = check_config(&format!("configmap.yaml data.{file}"), text);
    assert!(config.policy.rules().count() > 0, "the example has rules");
    // One replica per memory store: several would each admit the whole limit.
    let replicas = at(&deployment, "spec.replicas").as_u64().unwrap_or(1);
    if config.store.kind() == "memory" {
        assert_eq!(replicas, 1, "with the memory store, one replica (or switch the store to Redis)");
    }
}

#[test]
fn the_service_and_the_servicemonitor_select_the_pods_and_scrape_metrics() {
    let deployment = manifest("deployment.yaml");
    let service = manifest("service.yaml");
    let monitor = manifest("servicemonitor.yaml");
    let container = container(&deployment);
    let pod_labels = at(&deployment, "spec.template.metadata.labels").as_object().expect("pod labels");
    let selects = |selector: &Value, labels: &serde_json::Map<String, Value>| {
        let selector = selector.as_object().expect("a selector");
        !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    };
    assert!(selects(at(&service, "spec.selector"), pod_labels), "the Service selects the pods");
    assert!(
        selects(at(&deployment, "spec.selector.matchLabels"), pod_labels),
        "the Deployment selects its own pods"
    );
    let ports = at(&service, "spec.ports").as_array().expect("ports");
    for name in ["http", "grpc"] {
        let port = ports.iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("service port {name}"));
        assert_eq!(port["targetPort"], name, "by name");
        port_named(container, name);
    }

    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(monitor["kind"], "ServiceMonitor");
    let service_labels = at(&service, "metadata.labels").as_object().expect("service labels");
    assert!(
        selects(at(&monitor, "spec.selector.matchLabels"), service_labels),
        "the monitor selects the Service"
    );
    let endpoints = at(&monitor, "spec.endpoints").as_array().expect("endpoints");
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0]["path"], "/metrics");
    assert!(ports.iter().any(|p| p["name"] == endpoints[0]["port"]), "scrapes a port of the Service");
    let known = BTreeSet::from(["port", "path", "interval", "scrapeTimeout", "scheme", "honorLabels"]);
    for field in endpoints[0].as_object().unwrap().keys() {
        assert!(known.contains(field.as_str()), "an endpoint field the Operator does not define: {field}");
    }
}
