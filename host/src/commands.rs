//! Runs a parsed command line: connects, calls the command, prints its report.

use crate::api::{self, ClientOptions, Kube};
#[cfg(feature = "wasm")]
use crate::cli::json_arg;
use crate::cli::{Cli, Command, Global, Output, Target};
use crate::config::{self, ConfigError};
use crate::error::HostError;
use crate::gate::Gate;
use crate::{Config, rbac, resolve, status};
use serde::Serialize;
use serde_json::json;

/// Prints a report as the operator asked: prose or JSON.
struct Printer {
    output: Output,
}

impl Printer {
    fn print<T: Serialize + std::fmt::Display>(&self, value: &T) -> Result<(), HostError> {
        match self.output {
            Output::Human => print!("{value}"),
            Output::Json => println!("{}", to_json(value)?),
        }
        Ok(())
    }
}

fn to_json<T: Serialize>(value: &T) -> Result<String, HostError> {
    serde_json::to_string_pretty(value).map_err(|source| HostError::Encode {
        what: "the report",
        source,
    })
}

async fn connect(global: &Global, target: &Target) -> Result<(Kube, Config), HostError> {
    let raw = target.raw()?;
    let options = ClientOptions {
        kubeconfig: global.kubeconfig.clone(),
        context: global.context.clone(),
        request_timeout: global.request_timeout,
    };
    // Validate what can be validated before touching the cluster.
    if let Some(ns) = &raw.namespace {
        raw.clone().validate(ns)?;
    }
    let (client, default_ns) = api::client(&options).await?;
    let config = raw.validate(&default_ns)?;
    Ok((Kube::new(client, global.timeout), config))
}

/// Runs the command; the error carries the exit code.
pub async fn run(cli: Cli) -> Result<(), HostError> {
    let printer = Printer {
        output: cli.global.output,
    };
    match cli.command {
        Command::Ensure { target, policy } => {
            let gate = Gate::for_flag(policy)?;
            let (kube, config) = connect(&cli.global, &target).await?;
            if config.ssh_public_key.is_none() {
                return Err(ConfigError {
                    field: "ssh_public_key".into(),
                    value: String::new(),
                    problem: "is required by ensure: the project's SSH public key, authorized in the jump pod (--ssh-public-key, --ssh-public-key-file or ssh_public_key in the file)".into(),
                }
                .into());
            }
            printer.print(&crate::ensure(&kube, &config, &gate).await?)
        }
        Command::Resolve { target } => {
            let (kube, config) = connect(&cli.global, &target).await?;
            printer.print(&resolve::resolve(&kube, &config).await?)
        }
        Command::Status { target } => {
            let (kube, config) = connect(&cli.global, &target).await?;
            printer.print(&status::status(&kube, &config).await?)
        }
        Command::Rbac {
            namespace,
            service_account,
        } => {
            if let Some(problem) = config::dns_label_problem(&namespace) {
                return Err(ConfigError {
                    field: "--namespace".into(),
                    value: namespace,
                    problem: problem.into(),
                }
                .into());
            }
            match printer.output {
                Output::Human => print!("{}", rbac::yaml(&namespace, &service_account)),
                Output::Json => println!(
                    "{}",
                    to_json(&json!({
                        "apiVersion": "v1", "kind": "List",
                        "items": rbac::objects(&namespace, &service_account)
                    }))?
                ),
            }
            Ok(())
        }
        #[cfg(feature = "wasm")]
        Command::Eval {
            files,
            settings,
            policy,
        } => {
            let settings = json_arg("--settings", &settings)?;
            let evaluations = crate::eval::eval(&files, &settings, &policy)?;
            if let [evaluation] = evaluations.as_slice() {
                println!("{}", to_json(&evaluation.response)?);
                if printer.output == Output::Human
                    && let Some(patch) = &evaluation.patch
                {
                    eprintln!("decoded patch:\n{}", to_json(patch)?);
                }
            } else {
                for evaluation in &evaluations {
                    println!("{}", evaluation.response);
                }
            }
            Ok(())
        }
    }
}

/// Prints an error the way the operator asked.
pub fn print_error(output: Output, error: &HostError) {
    match output {
        Output::Human => eprintln!("error: {}", error.report()),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&json!({"error": {
                "kind": error.kind(), "message": error.report(), "exitCode": error.exit_code()
            }}))
            .unwrap_or_default()
        ),
    }
}
