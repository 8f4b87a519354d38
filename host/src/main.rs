//! The `jumppod` binary: parse, run, exit code.

use clap::Parser;
use jumppod_host::cli::Cli;
use jumppod_host::commands::{print_error, run};
use jumppod_host::error::exit;

fn main() {
    let cli = Cli::parse();
    let default_level = match cli.global.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal; not in files or a pod's log.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
    let output = cli.global.output;
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            std::process::exit(exit::ERROR);
        }
    };
    if let Err(e) = runtime.block_on(run(cli)) {
        print_error(output, &e);
        std::process::exit(e.exit_code());
    }
}
