//! Reading the artefacts, running the tools, parsing command lines.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clap::Parser;
use floodgate_server::cli::{Cli, Command as Subcommand, LogFormat, ServeArgs};
use serde_json::Value;

/// The workspace root.
pub(crate) fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

pub(crate) fn read(relative: &str) -> String {
    let path = root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// A YAML file as JSON values.
pub(crate) fn yaml(relative: &str) -> Value {
    serde_saphyr::from_str(&read(relative)).unwrap_or_else(|e| panic!("{relative} is not valid YAML: {e}"))
}

/// The value at `path` (`a.b.0.c`) of `value`, or `Value::Null`.
pub(crate) fn at<'a>(value: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(value, |v, step| match step.parse::<usize>() {
        Ok(i) => v.get(i).unwrap_or(&Value::Null),
        Err(_) => v.get(step).unwrap_or(&Value::Null),
    })
}

/// The program `name` from `scripts/deploy-tools`' venv: `$FLOODGATE_DEPLOY_TOOLS/bin`, else
/// `target/deploy-tools/bin`.
pub(crate) fn deploy_tool(name: &str) -> PathBuf {
    let venv = std::env::var_os("FLOODGATE_DEPLOY_TOOLS").map(PathBuf::from).unwrap_or_else(|| {
        // CARGO_TARGET_TMPDIR is `<target>/tmp`.
        Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap_or(Path::new("target")).join("deploy-tools")
    });
    let tool = venv.join("bin").join(name);
    assert!(
        tool.is_file(),
        "`{name}` is not installed at {}: run `scripts/deploy-tools` (scripts/test does), then rerun the tests",
        tool.display()
    );
    tool
}

/// Runs `program` with `args` from the workspace root; panics when it cannot be started, with
/// `hint` when it is not installed.
pub(crate) fn run(program: &Path, args: &[&str], hint: &str) -> Output {
    match Command::new(program).args(args).current_dir(root()).output() {
        Ok(output) => output,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            panic!("`{}` is not installed: {hint}, then rerun the tests", program.display())
        }
        Err(e) => panic!("could not run `{}`: {e}", program.display()),
    }
}

/// stdout and stderr of `output`, for messages.
pub(crate) fn text(output: &Output) -> String {
    format!(
        "--- stdout ---\n{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Parses a `floodgate` command line (without the program name) with the binary's own parser:
/// the log format and the `serve` arguments, or a panic naming `what` and the parser's error.
pub(crate) fn serve_args(what: &str, args: &[String]) -> (LogFormat, ServeArgs) {
    let cli = Cli::try_parse_from(std::iter::once("floodgate".to_owned()).chain(args.iter().cloned()))
        .unwrap_or_else(|e| panic!("{what}: `floodgate {}` does not parse: {e}", args.join(" ")));
    let Cli { command: Subcommand::Serve(serve), log_format } = cli else {
        panic!("{what}: `floodgate {}` is not `floodgate serve`", args.join(" "))
    };
    (log_format, serve)
}

/// Loads the configuration text `text` as `floodgate serve --config` would load its file.
pub(crate) fn check_config(what: &str, text: &str) -> floodgate_config::Config {
    floodgate_config::parse(what, text).unwrap_or_else(|e| panic!("{what} is not a valid configuration: {e}"))
}

/// A fresh directory under the test target's temporary directory.
pub(crate) fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("packaging-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
