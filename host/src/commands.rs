//! Runs a parsed command line: connects, calls the command, prints its report.

use crate::api::{self, ClientOptions, Kube};
use crate::cli::config_file;
#[cfg(feature = "wasm")]
use crate::cli::json_arg;
use crate::cli::{Cli, Command, Global, KeysAction, Output, RunArgs, Target};
use crate::controller::{self, Clients, Election};
use crate::error::HostError;
use crate::gate::Gate;
use crate::{rbac, resolve, status};
use clap::CommandFactory;
use jumppod_plan::Config;
use jumppod_plan::config::RawConfig;
use jumppod_plan::config::{self, ConfigError};
use jumppod_plan::lease::Timing;
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
        watch: false,
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
            shutdown_grace,
            drain_delay,
            module,
        } => {
            let settings = json_arg("--settings", &module.settings)?;
            let checked = settings.clone();
            let options = crate::webhook::Options {
                listen,
                cert: tls_cert,
                key: tls_key,
                load: Box::new(move || {
                    // Compiled on every start, not cached: what a pod does on its first start.
                    let module = crate::eval::load_checked(
                        &module.policy,
                        &checked,
                        None,
                        jumppod_wasm::Instances::Pooled {
                            slots: crate::webhook::evaluations_at_once(),
                        },
                    )?;
                    Ok(std::sync::Arc::new(module) as std::sync::Arc<dyn jumppod_review::Policy>)
                }),
                settings,
                grace: shutdown_grace,
                drain: drain_delay,
            };
            crate::webhook::serve(
                options,
                |addr| {
                    println!(
                        "serving AdmissionReviews on https://{addr}{}",
                        crate::webhook::PATH
                    );
                },
                terminated(),
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
            webhook_namespace,
            kind,
        } => {
            use crate::webhook::Kind;
            let endpoint = match (url, service) {
                (Some(url), _) => parse_url(&url)?,
                (None, Some(text)) => parse_service(&text)?,
                (None, None) => unreachable!("clap requires --url or --service"),
            };
            let scope = webhook_scope(&endpoint, webhook_namespace, namespaces)?;
            let ca = std::fs::read(&ca_bundle).map_err(|e| ConfigError {
                field: "--ca-bundle".into(),
                value: ca_bundle.display().to_string(),
                problem: format!("cannot read it: {e}"),
            })?;
            let kinds: &[Kind] = match kind.as_str() {
                "mutating" => &[Kind::Mutating],
                "validating" => &[Kind::Validating],
                _ => &[Kind::Mutating, Kind::Validating],
            };
            let configs: Vec<serde_json::Value> = kinds
                .iter()
                .map(|kind| {
                    crate::webhook::configuration(*kind, &endpoint, &ca, &failure_policy, &scope)
                })
                .collect();
            match (printer.output, configs.as_slice()) {
                (Output::Human, [config]) => {
                    print!("{}", serde_yaml::to_string(config).unwrap_or_default())
                }
                (Output::Json, [config]) => println!("{}", to_json(config)?),
                (Output::Human, _) => print!(
                    "{}",
                    rbac::yaml_stream(
                        "jumppod webhook: its mutating and validating configurations (generated by `jumppod webhook-configuration`).",
                        &configs
                    )
                ),
                (Output::Json, _) => println!(
                    "{}",
                    to_json(&json!({"apiVersion": "v1", "kind": "List", "items": configs}))?
                ),
            }
            Ok(())
        }
        Command::Keys { action } => keys(&cli.global, &printer, action).await,
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "jumppod", &mut script);
            write_stdout(&script)
        }
        Command::Man { out_dir: None } => {
            let mut page = Vec::new();
            clap_mangen::Man::new(Cli::command())
                .render(&mut page)
                .map_err(|source| HostError::Write {
                    what: "the manual page".into(),
                    source,
                })?;
            write_stdout(&page)
        }
        Command::Man { out_dir: Some(dir) } => clap_mangen::generate_to(Cli::command(), &dir)
            .map_err(|source| HostError::Write {
                what: format!("the manual pages into {}", dir.display()),
                source,
            }),
        Command::HelpMarkdown => {
            write_stdout(crate::reference::markdown(Cli::command()).as_bytes())
        }
        Command::Run(args) => run_controller(&cli.global, *args).await,
        Command::Rbac {
            namespace,
            service_account,
            controller,
            all_namespaces,
            watch_namespaces,
            image,
            lease_name,
        } => {
            check_namespaces(
                std::iter::once(("--namespace", &namespace))
                    .chain(watch_namespaces.iter().map(|ns| ("--watch-namespace", ns))),
            )?;
            if controller {
                let watched = each_once(watch_namespaces);
                let watched = match (all_namespaces, watched.is_empty()) {
                    (true, _) => rbac::Watched::Every,
                    (false, true) => rbac::Watched::Own,
                    (false, false) => rbac::Watched::These(&watched),
                };
                let objects = rbac::controller_objects(
                    &namespace,
                    &service_account,
                    watched,
                    &image,
                    &lease_name,
                );
                match printer.output {
                    Output::Human => print!(
                        "{}",
                        rbac::yaml_stream(
                            "jumppod run: its ServiceAccount, exactly the verbs it uses, and its Deployment (generated by `jumppod rbac --controller`).",
                            &objects
                        )
                    ),
                    Output::Json => println!(
                        "{}",
                        to_json(&json!({"apiVersion": "v1", "kind": "List", "items": objects}))?
                    ),
                }
                return Ok(());
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
            Some(jumppod_plan::keys::Change::add(&text, name.as_deref())?)
        }
        KeysAction::Remove { key, .. } => Some(jumppod_plan::keys::Change::remove(key)?),
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

/// `--url`: https://HOST[:PORT][/PREFIX], the base each configuration appends its path to;
/// a trailing /mutate (what this flag took before the validating configuration) is dropped.
#[cfg(feature = "wasm")]
fn parse_url(text: &str) -> Result<crate::webhook::Endpoint, ConfigError> {
    let bad = |problem: &str| ConfigError {
        field: "--url".into(),
        value: text.into(),
        problem: problem.into(),
    };
    let rest = text
        .strip_prefix("https://")
        .ok_or_else(|| bad("must start with https:// (the API server calls webhooks over TLS)"))?;
    if rest.is_empty() || rest.contains(['?', '#']) {
        return Err(bad(
            "must be https://HOST[:PORT][/PREFIX], without a query or a fragment",
        ));
    }
    let base = text.strip_suffix(crate::webhook::PATH).unwrap_or(text);
    Ok(crate::webhook::Endpoint::Url(
        base.trim_end_matches('/').to_owned(),
    ))
}

/// The namespaces the configurations send: `--only-namespace`, never kube-system nor the
/// webhook's own (`--webhook-namespace`, else the Service's), so that they can start pods
/// while the webhook is down (Kubernetes: "Avoiding deadlocks in self-hosted webhooks").
#[cfg(feature = "wasm")]
fn webhook_scope(
    endpoint: &crate::webhook::Endpoint,
    webhook_namespace: Option<String>,
    only: Vec<String>,
) -> Result<crate::webhook::Scope, ConfigError> {
    let own = webhook_namespace.or(match endpoint {
        crate::webhook::Endpoint::Service(ns, ..) => Some(ns.clone()),
        crate::webhook::Endpoint::Url(_) => None,
    });
    if let Some(ns) = &own
        && let Some(problem) = config::dns_label_problem(ns)
    {
        return Err(ConfigError {
            field: "--webhook-namespace".into(),
            value: ns.clone(),
            problem: problem.into(),
        });
    }
    let mut left_out = vec!["kube-system".to_owned()];
    left_out.extend(own.filter(|ns| ns != "kube-system"));
    for ns in &only {
        let problem = if left_out.contains(ns) {
            Some(
                "is never sent to the webhook: kube-system and the webhook's own namespace are left out, so that their pods can start while it is down",
            )
        } else {
            config::dns_label_problem(ns)
        };
        if let Some(problem) = problem {
            return Err(ConfigError {
                field: "--only-namespace".into(),
                value: ns.clone(),
                problem: problem.into(),
            });
        }
    }
    Ok(crate::webhook::Scope { only, left_out })
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

/// Values of a configuration file that are one project's, which `jumppod run` cannot use.
fn per_project_fields(raw: &RawConfig) -> Option<&'static str> {
    [
        ("project", raw.project.is_some()),
        ("port", raw.port.is_some()),
        ("hostname", raw.hostname.is_some()),
        ("proxy_jump", raw.proxy_jump.is_some()),
        ("ssh_public_key", raw.ssh_public_key.is_some()),
    ]
    .into_iter()
    .find_map(|(field, set)| set.then_some(field))
}

/// This replica's name in the Lease: the host name (a pod's name) and the process id.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "jumppod".to_owned()
    } else {
        host
    };
    format!("{host}_{}", std::process::id())
}

async fn run_controller(global: &Global, args: RunArgs) -> Result<(), HostError> {
    let file = match &args.config {
        Some(path) => config_file(path)?,
        None => RawConfig::default(),
    };
    if let Some(field) = per_project_fields(&file) {
        return Err(ConfigError {
            field: field.into(),
            value: String::new(),
            problem: "is one project's: `jumppod run` watches every project and keeps each Service's NodePort; remove it from the file".into(),
        }
        .into());
    }
    // The template must make a valid configuration for some project: checked before
    // connecting, with a project name of the shortest kind.
    RawConfig {
        namespace: Some("default".into()),
        project: Some("p".into()),
        ..file.clone()
    }
    .validate("default")?;
    let timing = Timing {
        lease_duration: args.lease_duration,
        renew_deadline: args.renew_deadline,
        retry_period: args.retry_period,
    };
    if let Some(problem) = timing.problem() {
        return Err(problem.into());
    }
    let options = ClientOptions {
        kubeconfig: global.kubeconfig.clone(),
        context: global.context.clone(),
        request_timeout: global.request_timeout,
        watch: false,
    };
    let (write, default_ns) = api::client(&options).await?;
    let (watch, _) = api::client(&ClientOptions {
        watch: true,
        ..options
    })
    .await?;
    let namespaces = (!args.all_namespaces).then(|| {
        let mut list = args.namespaces.clone();
        if list.is_empty() {
            list.push(file.namespace.clone().unwrap_or(default_ns.clone()));
        }
        each_once(list)
    });
    let lease_namespace = args
        .lease_namespace
        .clone()
        .or(namespaces.as_ref().and_then(|l| l.first().cloned()))
        .unwrap_or(default_ns);
    check_namespaces(
        namespaces
            .iter()
            .flatten()
            .map(|ns| ("--namespace", ns))
            .chain([("--lease-namespace", &lease_namespace)]),
    )?;
    let election = args.leader_elect.then(|| Election {
        namespace: lease_namespace,
        lease: args.lease_name.clone(),
        identity: args.identity.clone().unwrap_or_else(default_identity),
        timing,
    });
    let scope = match &namespaces {
        Some(list) => list.join(", "),
        None => "every namespace".into(),
    };
    let options = controller::Options {
        template: RawConfig {
            namespace: None,
            ..file
        },
        namespaces,
        listen: args.listen,
        election,
        concurrency: args.concurrency,
        reconcile_timeout: args.reconcile_timeout,
        backoff: std::time::Duration::from_millis(500),
        max_backoff: std::time::Duration::from_secs(300),
        silent_node_after: (!args.silent_node_after.is_zero()).then_some(args.silent_node_after),
        node_deletion_rate: args.node_deletion_rate,
        node_deletion_burst: args.node_deletion_burst,
    };
    controller::run(
        Clients { watch, write },
        options,
        |addr| {
            tracing::info!(%addr, watching = %scope, "serving metrics");
            println!("watching {scope}; /metrics, /healthz and /readyz on http://{addr}");
        },
        terminated(),
    )
    .await
}

/// The first `--namespace`-like value in `named` that is not a DNS label, as the error naming
/// its flag and value.
fn check_namespaces<'a>(
    named: impl IntoIterator<Item = (&'static str, &'a String)>,
) -> Result<(), HostError> {
    for (field, ns) in named {
        if let Some(problem) = config::dns_label_problem(ns) {
            return Err(ConfigError {
                field: field.into(),
                value: ns.clone(),
                problem: problem.into(),
            }
            .into());
        }
    }
    Ok(())
}

/// `list` with each namespace once, in the order given.
fn each_once(mut list: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    list.retain(|ns| seen.insert(ns.clone()));
    list
}

/// Writes generated text (a completion script, a manual page) to stdout; a closed stdout is an
/// error, not a panic.
fn write_stdout(bytes: &[u8]) -> Result<(), HostError> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .map_err(|source| HostError::Write {
            what: "stdout".into(),
            source,
        })
}

/// SIGTERM (what the kubelet sends) or Ctrl-C.
async fn terminated() {
    #[cfg(unix)]
    {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = term => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("asked to stop");
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

#[cfg(all(test, feature = "wasm"))]
mod webhook_configuration_tests {
    use super::*;
    use crate::webhook::Endpoint;
    use rstest::rstest;

    fn service(ns: &str) -> Endpoint {
        Endpoint::Service(ns.into(), "jumppod".into(), 443)
    }

    #[rstest]
    #[case::a_url_leaves_out_kube_system(Endpoint::Url("https://h".into()), None, &[], &["kube-system"])]
    #[case::a_service_leaves_out_its_namespace_too(service("jp"), None, &["dstack"], &["kube-system", "jp"])]
    #[case::the_flag_names_the_webhooks_namespace(service("jp"), Some("hooks"), &[], &["kube-system", "hooks"])]
    #[case::kube_system_is_named_once(service("kube-system"), None, &[], &["kube-system"])]
    fn the_webhooks_namespace_and_kube_system_are_left_out(
        #[case] endpoint: Endpoint,
        #[case] webhook_namespace: Option<&str>,
        #[case] only: &[&str],
        #[case] left_out: &[&str],
    ) {
        let only: Vec<String> = only.iter().map(|s| s.to_string()).collect();
        let scope =
            webhook_scope(&endpoint, webhook_namespace.map(Into::into), only.clone()).unwrap();
        assert_eq!(scope.left_out, left_out);
        assert_eq!(scope.only, only);
    }

    #[rstest]
    #[case::only_kube_system(None, &["kube-system"], "--only-namespace", "kube-system", "never sent")]
    #[case::only_the_webhooks_namespace(Some("hooks"), &["dstack", "hooks"], "--only-namespace", "hooks", "never sent")]
    #[case::a_namespace_that_is_no_dns_label(None, &["Dstack"], "--only-namespace", "Dstack", "")]
    #[case::a_webhook_namespace_that_is_no_dns_label(Some("a_b"), &[], "--webhook-namespace", "a_b", "")]
    fn a_namespace_out_of_scope_is_refused_naming_flag_and_value(
        #[case] webhook_namespace: Option<&str>,
        #[case] only: &[&str],
        #[case] field: &str,
        #[case] value: &str,
        #[case] says: &str,
    ) {
        let only = only.iter().map(|s| s.to_string()).collect();
        let Err(e) = webhook_scope(
            &Endpoint::Url("https://h".into()),
            webhook_namespace.map(Into::into),
            only,
        ) else {
            panic!("accepted");
        };
        assert_eq!((e.field.as_str(), e.value.as_str()), (field, value));
        assert!(e.problem.contains(says), "{}", e.problem);
    }

    #[rstest]
    #[case::a_base(Ok("https://h:8443"), "https://h:8443")]
    #[case::the_mutate_path_of_before(Ok("https://h:8443"), "https://h:8443/mutate")]
    #[case::a_prefix(Ok("https://h/hooks/jumppod"), "https://h/hooks/jumppod/")]
    #[case::plain_http(Err("must start with https://"), "http://h:8443")]
    #[case::a_query(Err("without a query"), "https://h?x=1")]
    fn the_url_is_the_base_each_configuration_appends_its_path_to(
        #[case] expected: Result<&str, &str>,
        #[case] url: &str,
    ) {
        match (parse_url(url), expected) {
            (Ok(Endpoint::Url(base)), Ok(want)) => assert_eq!(base, want),
            (Err(e), Err(says)) => {
                assert_eq!((e.field.as_str(), e.value.as_str()), ("--url", url));
                assert!(e.problem.contains(says), "{}", e.problem);
            }
            (Ok(_), _) => panic!("{url}: accepted, expected {expected:?}"),
            (Err(e), _) => panic!("{url}: {e}, expected {expected:?}"),
        }
    }
}
