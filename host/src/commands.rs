//! Runs a parsed command line: connects, calls the command, prints its report.

use crate::api::{self, ClientOptions, Kube};
#[cfg(feature = "wasm")]
use crate::cli::json_arg;
use crate::cli::{Cli, Command, Global, KeysAction, Output, Target};
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
        #[cfg(feature = "wasm")]
        Command::Webhook {
            listen,
            tls_cert,
            tls_key,
            module,
        } => {
            let settings = json_arg("--settings", &module.settings)?;
            let module = crate::eval::load_checked(&module.policy, &settings)?;
            let options = crate::webhook::Options {
                listen,
                cert: tls_cert,
                key: tls_key,
                policy: std::sync::Arc::new(module),
                settings,
            };
            let shutdown = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            crate::webhook::serve(
                options,
                |addr| {
                    tracing::info!(%addr, "serving");
                    println!(
                        "serving AdmissionReviews on https://{addr}{}",
                        crate::webhook::PATH
                    );
                },
                shutdown,
            )
            .await
        }
        #[cfg(feature = "wasm")]
        Command::WebhookConfiguration {
            url,
            service,
            ca_bundle,
            failure_policy,
            namespaces,
        } => {
            let endpoint = match (url, service) {
                (Some(url), _) => crate::webhook::Endpoint::Url(url),
                (None, Some(text)) => parse_service(&text)?,
                (None, None) => unreachable!("clap requires --url or --service"),
            };
            let ca = std::fs::read(&ca_bundle).map_err(|e| ConfigError {
                field: "--ca-bundle".into(),
                value: ca_bundle.display().to_string(),
                problem: format!("cannot read it: {e}"),
            })?;
            let config =
                crate::webhook::configuration(&endpoint, &ca, &failure_policy, &namespaces);
            match printer.output {
                Output::Human => print!("{}", serde_yaml::to_string(&config).unwrap_or_default()),
                Output::Json => println!("{}", to_json(&config)?),
            }
            Ok(())
        }
        Command::Keys { action } => keys(&cli.global, &printer, action).await,
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
        Command::Eval { files, module } => {
            let settings = json_arg("--settings", &module.settings)?;
            let evaluations = crate::eval::eval(&files, &settings, &module.policy)?;
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

async fn keys(global: &Global, printer: &Printer, action: KeysAction) -> Result<(), HostError> {
    let change = match &action {
        KeysAction::Add {
            key,
            key_file,
            name,
            ..
        } => {
            let text = match (key.as_deref(), key_file) {
                (Some("-"), _) => {
                    let mut text = String::new();
                    std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(
                        |e| ConfigError {
                            field: "KEY".into(),
                            value: "-".into(),
                            problem: format!("cannot read stdin: {e}"),
                        },
                    )?;
                    text
                }
                (Some(k), _) => k.to_owned(),
                (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| ConfigError {
                    field: "--key-file".into(),
                    value: path.display().to_string(),
                    problem: format!("cannot read it: {e}"),
                })?,
                (None, None) => String::new(),
            };
            Some(crate::keys::Change::add(&text, name.as_deref())?)
        }
        KeysAction::Remove { key, .. } => Some(crate::keys::Change::remove(key)?),
        KeysAction::List { .. } => None,
    };
    let project = match &action {
        KeysAction::Add { project, .. }
        | KeysAction::Remove { project, .. }
        | KeysAction::List { project } => project,
    };
    let target = Target {
        project: project.clone(),
        ..Target::default()
    };
    let (kube, config) = connect(global, &target).await?;
    match change {
        Some(change) => printer.print(&crate::keys::change(&kube, &config, &change).await?),
        None => printer.print(&crate::keys::list(&kube, &config).await?),
    }
}

/// `NAMESPACE/NAME[:PORT]`.
#[cfg(feature = "wasm")]
fn parse_service(text: &str) -> Result<crate::webhook::Endpoint, ConfigError> {
    let bad = |problem: &str| ConfigError {
        field: "--service".into(),
        value: text.into(),
        problem: problem.into(),
    };
    let (ns, rest) = text
        .split_once('/')
        .ok_or_else(|| bad("must be NAMESPACE/NAME[:PORT]"))?;
    let (name, port) = match rest.split_once(':') {
        Some((name, port)) => (
            name,
            port.parse::<i32>()
                .ok()
                .filter(|p| (1..=65535).contains(p))
                .ok_or_else(|| bad("its port must be 1 to 65535"))?,
        ),
        None => (rest, 443),
    };
    for part in [ns, name] {
        if let Some(problem) = config::dns_label_problem(part) {
            return Err(bad(problem));
        }
    }
    Ok(crate::webhook::Endpoint::Service(
        ns.into(),
        name.into(),
        port,
    ))
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
