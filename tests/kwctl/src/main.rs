//! `kwctl-wapc`: the subcommands of kwctl that the policy's suite (policy/e2e.bats) runs, with
//! kwctl's command-line shape, on the waPC runtime jumppod embeds (`jumppod eval`'s): `run`
//! evaluates a request as policy-server does, `annotate` writes the metadata section kwctl
//! writes, `inspect` reads it back. `policy/e2e.sh` puts it on PATH as `kwctl` where kwctl is
//! not installed, and compares the two where it is.

mod metadata;
mod section;

use clap::{Parser, Subcommand};
use jumppod_host::cli::json_arg;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "kwctl-wapc",
    version,
    about = "kwctl's run, annotate and inspect on jumppod's waPC runtime (for policy/e2e.bats where kwctl is not installed)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate a request with the module, as policy-server runs it, and print the
    /// AdmissionResponse (one line of JSON).
    Run {
        /// The AdmissionRequest or AdmissionReview (JSON or YAML).
        #[arg(short = 'r', long, value_name = "PATH")]
        request_path: PathBuf,
        /// The policy's settings, a JSON or YAML file.
        #[arg(long, value_name = "PATH", conflicts_with = "settings_json")]
        settings_path: Option<PathBuf>,
        /// The policy's settings as JSON.
        #[arg(long, value_name = "JSON")]
        settings_json: Option<String>,
        /// The module: a path or a file:// URI.
        #[arg(value_name = "MODULE")]
        module: String,
    },
    /// Write the module with its metadata in the custom section kwctl writes.
    Annotate {
        /// The metadata (metadata.yml).
        #[arg(short = 'm', long, value_name = "PATH")]
        metadata_path: PathBuf,
        /// A file whose text becomes the io.kubewarden.policy.usage annotation.
        #[arg(short = 'u', long, value_name = "PATH")]
        usage_path: Option<PathBuf>,
        /// Where the annotated module is written.
        #[arg(short = 'o', long, value_name = "PATH")]
        output_path: PathBuf,
        /// The module to annotate.
        #[arg(value_name = "MODULE")]
        module: String,
    },
    /// Print the metadata of an annotated module.
    Inspect {
        /// `yaml`: the metadata as YAML; default: a summary.
        #[arg(short = 'o', long, value_parser = ["yaml"])]
        output: Option<String>,
        /// The annotated module.
        #[arg(value_name = "MODULE")]
        module: String,
    },
}

#[derive(Debug, thiserror::Error)]
enum KwctlError {
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a module this runner can annotate or inspect")]
    Format {
        path: String,
        #[source]
        source: section::FormatError,
    },
    #[error("{field} is not valid settings")]
    Settings {
        field: &'static str,
        #[source]
        source: Box<jumppod_host::HostError>,
    },
    #[error(transparent)]
    Metadata(#[from] metadata::MetadataError),
    #[error(
        "No Kubewarden metadata found inside of '{0}'.\nPolicies can be annotated with the `kwctl annotate` command."
    )]
    NoMetadata(String),
    #[error("the metadata section of {path} is not JSON")]
    MetadataJson {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}", .0.report())]
    Host(#[from] jumppod_host::HostError),
    #[error("{module} does not answer protocol_version")]
    Protocol {
        module: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A path, or kwctl's `file://` URI of one.
fn module_path(module: &str) -> PathBuf {
    PathBuf::from(module.strip_prefix("file://").unwrap_or(module))
}

fn read(path: &Path) -> Result<Vec<u8>, KwctlError> {
    std::fs::read(path).map_err(|source| KwctlError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn run(command: Command) -> Result<(), KwctlError> {
    match command {
        Command::Run {
            request_path,
            settings_path,
            settings_json,
            module,
        } => {
            // Read as `jumppod eval --settings` reads JSON or @FILE: as YAML, as kwctl reads a
            // settings file (JSON is YAML).
            let read_settings = |field, text: &str| {
                json_arg(field, text).map_err(|e| KwctlError::Settings {
                    field,
                    source: Box::new(e),
                })
            };
            let settings: Value = match (settings_path, settings_json) {
                (Some(path), _) => {
                    read_settings("--settings-path", &format!("@{}", path.display()))?
                }
                (None, Some(json)) => read_settings("--settings-json", &json)?,
                (None, None) => Value::Object(Default::default()),
            };
            let evaluations =
                jumppod_host::eval::eval(&[request_path], &settings, &module_path(&module))?;
            for evaluation in evaluations {
                println!("{}", evaluation.response);
            }
            Ok(())
        }
        Command::Annotate {
            metadata_path,
            usage_path,
            output_path,
            module,
        } => {
            let path = module_path(&module);
            let wasm = read(&path)?;
            let usage = usage_path.map(|p| read(&p)).transpose()?;
            let metadata_text = read(&metadata_path)?;
            // kwctl asks the module its protocol version (its backend detector) before it
            // writes: a module that cannot answer is not annotated.
            let protocol = jumppod_wasm::WasmPolicy::load(&wasm)
                .map_err(|e| protocol_error(&module, e.into()))?
                .instance()
                .and_then(|instance| instance.call("protocol_version", b""))
                .map_err(|e| protocol_error(&module, e.into()))?;
            let protocol: Value =
                serde_json::from_slice(&protocol).map_err(|e| protocol_error(&module, e.into()))?;
            let metadata = metadata::annotate(
                &String::from_utf8_lossy(&metadata_text),
                usage.as_deref().map(String::from_utf8_lossy).as_deref(),
                protocol,
            )?;
            let annotated =
                section::with_custom(&wasm, section::METADATA, metadata.to_string().as_bytes())
                    .map_err(|source| KwctlError::Format {
                        path: module.clone(),
                        source,
                    })?;
            std::fs::write(&output_path, annotated).map_err(|source| KwctlError::Write {
                path: output_path.display().to_string(),
                source,
            })
        }
        Command::Inspect { output, module } => {
            let wasm = read(&module_path(&module))?;
            let found =
                section::custom(&wasm, section::METADATA).map_err(|source| KwctlError::Format {
                    path: module.clone(),
                    source,
                })?;
            let found = found.ok_or_else(|| KwctlError::NoMetadata(module.clone()))?;
            let metadata: Value =
                serde_json::from_slice(found).map_err(|source| KwctlError::MetadataJson {
                    path: module.clone(),
                    source,
                })?;
            match output.as_deref() {
                Some(_) => print!("{}", serde_yaml::to_string(&metadata).unwrap_or_default()),
                None => println!("{}", metadata::pretty(&metadata)),
            }
            Ok(())
        }
    }
}

fn protocol_error(module: &str, source: Box<dyn std::error::Error + Send + Sync>) -> KwctlError {
    KwctlError::Protocol {
        module: module.into(),
        source,
    }
}

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let mut message = format!("Error: {error}");
            let mut cause = std::error::Error::source(&error);
            // The host's report already carries its causes.
            if matches!(error, KwctlError::Host(_)) {
                cause = None;
            }
            while let Some(next) = cause {
                message.push_str(&format!("\n  caused by: {next}"));
                cause = next.source();
            }
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}
