//! The `Dockerfile` (there is no container engine here to build it: it is linted and checked
//! against the binary and the Kubernetes manifests).

use std::collections::BTreeSet;

use floodgate_server::cli::LogFormat;

use crate::support::{at, deploy_tool, read, run, serve_args, text, yaml};

/// The Dockerfile's instructions: (instruction, arguments), continuation lines joined, comments
/// and parser directives skipped.
fn instructions() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in read("Dockerfile").lines() {
        let trimmed = line.trim();
        if pending.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                pending.push_str(part);
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                let (instruction, arguments) =
                    pending.split_once(char::is_whitespace).unwrap_or((&pending, ""));
                out.push((instruction.to_ascii_uppercase(), arguments.trim().to_owned()));
                pending.clear();
            }
        }
    }
    assert!(pending.is_empty(), "Dockerfile ends in a continuation");
    out
}

/// The instructions of each stage, by stage.
fn stages() -> Vec<Vec<(String, String)>> {
    let mut stages: Vec<Vec<(String, String)>> = Vec::new();
    for (instruction, arguments) in instructions() {
        if instruction == "FROM" {
            stages.push(Vec::new());
        }
        stages.last_mut().expect("FROM first").push((instruction, arguments));
    }
    stages
}

/// A JSON-array (exec form) argument list.
fn exec_form(arguments: &str) -> Vec<String> {
    serde_json::from_str(arguments).unwrap_or_else(|e| panic!("not the exec form ({e}): {arguments}"))
}

#[test]
fn the_dockerfile_passes_hadolint() {
    let hadolint = deploy_tool("hadolint");
    let output = run(&hadolint, &["--format", "json", "Dockerfile"], "run `scripts/deploy-tools`");
    let findings: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("hadolint's JSON ({e}):\n{}", text(&output)));
    assert_eq!(findings, serde_json::json!([]), "hadolint findings:\n{}", text(&output));
    assert!(output.status.success(), "{}", text(&output));
}

#[test]
fn the_image_is_built_in_one_stage_and_runs_as_non_root_from_another() {
    let stages = stages();
    assert!(stages.len() >= 2, "a multi-stage build");
    let last = stages.last().unwrap();
    let base = &last[0].1;
    assert!(
        base.starts_with("gcr.io/distroless/") || base.contains("-slim"),
        "the runtime image is distroless or a slim Debian: {base}"
    );
    assert!(
        !last.iter().any(|(i, _)| i == "RUN"),
        "nothing runs in the runtime stage (distroless has no shell)"
    );
    let user = last
        .iter()
        .rev()
        .find(|(i, _)| i == "USER")
        .map(|(_, a)| a.as_str())
        .expect("USER in the last stage");
    let uid = user.split(':').next().unwrap();
    assert!(
        uid.parse::<u32>().is_ok_and(|uid| uid != 0),
        "a numeric non-root user (runAsNonRoot checks it): {user}"
    );
    // The uid is the one the Deployment runs as.
    let deployment = yaml("deploy/kubernetes/deployment.yaml");
    assert_eq!(at(&deployment, "spec.template.spec.securityContext.runAsUser").as_u64(), uid.parse().ok());
    let copies: Vec<&String> = last.iter().filter(|(i, _)| i == "COPY").map(|(_, a)| a).collect();
    assert!(copies.iter().all(|a| a.starts_with("--from=")), "only built files go in: {copies:?}");
}

#[test]
fn the_images_command_line_parses_and_matches_the_kubernetes_ports() {
    let stages = stages();
    let last = stages.last().unwrap();
    let find = |name: &str| last.iter().rev().find(|(i, _)| i == name).map(|(_, a)| a.clone());
    let entrypoint = exec_form(&find("ENTRYPOINT").expect("ENTRYPOINT"));
    assert_eq!(entrypoint, ["/usr/local/bin/floodgate"], "the Deployment's args follow the binary alone");
    let cmd = exec_form(&find("CMD").expect("CMD"));
    let (format, serve) = serve_args("Dockerfile CMD", &cmd);
    assert_eq!(format, LogFormat::Json);
    assert_eq!(serve.config.as_deref(), Some(std::path::Path::new("/etc/floodgate/floodgate.yaml")));

    let exposed: BTreeSet<u16> =
        find("EXPOSE").expect("EXPOSE").split_whitespace().map(|p| p.parse().expect("a port")).collect();
    assert_eq!(exposed, BTreeSet::from([serve.http.port(), serve.grpc.port()]));
    let deployment = yaml("deploy/kubernetes/deployment.yaml");
    let ports: BTreeSet<u16> = at(&deployment, "spec.template.spec.containers.0.ports")
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_u64().unwrap() as u16)
        .collect();
    assert_eq!(exposed, ports, "the Deployment's container ports are the image's");
}

#[test]
fn the_build_embeds_the_commit_and_leaves_the_repository_metadata_out() {
    let build = &stages()[0];
    assert!(
        build.iter().any(|(i, a)| i == "ARG" && a.starts_with("FLOODGATE_GIT_COMMIT")),
        "FLOODGATE_GIT_COMMIT is a build argument, for build.rs"
    );
    let ignored: BTreeSet<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    for path in [".git", "target"] {
        assert!(ignored.contains(path), ".dockerignore leaves {path} out of the build context");
    }
}
