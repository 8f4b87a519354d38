//! `make demo`: the policy on example pods, then the host's upgrade story against an
//! in-process simulated cluster.

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Err(e) = jumppod_e2e::demo::run().await {
        eprintln!("error: {}", e.report());
        std::process::exit(e.exit_code());
    }
}
