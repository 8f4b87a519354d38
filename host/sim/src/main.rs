//! `jumppod-sim`: starts a simulated cluster with three nodes, prints its kubeconfig path
//! and serves until Ctrl-C.

use jumppod_sim::{Sim, SimConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let sim = Sim::start(SimConfig::default()).await?;
    println!("jumppod-sim serving {}", sim.url());
    println!("export KUBECONFIG={}", sim.kubeconfig_path().display());
    println!("other users: {}", sim.kubeconfig_for("alice").display());
    tokio::signal::ctrl_c().await?;
    sim.shutdown().await;
    Ok(())
}
