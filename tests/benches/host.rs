//! The host against the simulator: `ensure` (first run, steady state, upgrade path) and
//! `resolve` through the real kube client over HTTP; 1000 projects ensured one after another
//! and 16 at a time (printed once); peak RSS of the `jumppod` binary (printed once, when
//! `target/release/jumppod` or $JUMPPOD_BIN exists and /usr/bin/time is installed).

use criterion::{Criterion, criterion_group, criterion_main};
use jumppod::schema;
use jumppod_host::api::{ClientOptions, Kube, client};
use jumppod_host::{Gate, ensure, resolve};
use jumppod_plan::config::{Config, RawConfig};
use jumppod_sim::{Sim, SimConfig};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgYmVuY2gga2V5Li4uLi4uLi4uLi4uLi4u bench@dstack";

fn config(ns: &str, project: &str, extra: &str) -> Config {
    RawConfig::from_text(&format!(
        "namespace: {ns}\nproject: {project}\nssh_public_key: {KEY}\n{extra}"
    ))
    .unwrap()
    .validate("default")
    .unwrap()
}

struct Env {
    rt: tokio::runtime::Runtime,
    sim: Sim,
    kube: Kube,
    gate: Gate,
}

fn env() -> Env {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (sim, kube) = rt.block_on(async {
        let sim = Sim::start(SimConfig {
            background_controllers: false,
            kubelet_delay: Duration::ZERO,
            ..SimConfig::default()
        })
        .await
        .unwrap();
        let (client, _) = client(&ClientOptions {
            kubeconfig: Some(sim.kubeconfig_path().to_owned()),
            ..ClientOptions::default()
        })
        .await
        .unwrap();
        (sim, Kube::new(client, Duration::from_secs(3600)))
    });
    // What `ensure` judges with by default: the policy's code, natively.
    let gate = Gate::native();
    Env {
        rt,
        sim,
        kube,
        gate,
    }
}

fn seed_upgrade(sim: &Sim, ns: &str) {
    let name = schema::jump_pod_name("main");
    sim.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    sim.seed(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": schema::legacy_selector(&name)},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "sshd"}]},
        "status": {"phase": "Failed", "reason": "Evicted"}}));
    sim.seed(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": schema::service_name(&name), "namespace": ns},
        "spec": {"type": "NodePort", "selector": schema::legacy_selector(&name),
                 "ports": [{"port": 22, "targetPort": 22}]}}));
}

fn benches(c: &mut Criterion) {
    let e = env();
    let counter = AtomicUsize::new(0);
    let mut g = c.benchmark_group("host");
    g.sample_size(15);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));

    // Each first run takes a NodePort: the namespace is deleted after it (not measured), or
    // the 2768 ports of 30000-32767 run out.
    g.bench_function("ensure_first_run", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let i = counter.fetch_add(1, Ordering::Relaxed);
                let ns = format!("first-{i}");
                let cfg = config(&ns, "main", "");
                let t = Instant::now();
                e.rt.block_on(ensure(&e.kube, &cfg, &e.gate)).unwrap();
                total += t.elapsed();
                e.sim.delete("namespaces", None, &ns);
            }
            total
        })
    });

    let steady = config("steady", "main", "");
    e.rt.block_on(ensure(&e.kube, &steady, &e.gate)).unwrap();
    e.rt.block_on(e.sim.settle());
    g.bench_function("ensure_steady_state", |b| {
        b.iter(|| {
            let r = e.rt.block_on(ensure(&e.kube, &steady, &e.gate)).unwrap();
            assert!(r.applied.is_empty());
        })
    });

    g.bench_function("ensure_upgrade_path", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let i = counter.fetch_add(1, Ordering::Relaxed);
                let ns = format!("upgrade-{i}");
                seed_upgrade(&e.sim, &ns);
                let cfg = config(&ns, "main", "");
                let t = Instant::now();
                let r = e.rt.block_on(ensure(&e.kube, &cfg, &e.gate)).unwrap();
                total += t.elapsed();
                assert_eq!(r.applied.len(), 4);
                e.sim.delete("namespaces", None, &ns);
            }
            total
        })
    });

    let with_host = config("steady", "main", "hostname: jump.example.com");
    g.bench_function("resolve", |b| {
        b.iter(|| {
            e.rt.block_on(resolve::resolve(&e.kube, &with_host))
                .unwrap()
        })
    });
    g.finish();

    thousand_projects(&e);
    binary_rss(&e);
}

/// 1000 projects in fresh namespaces of a fresh simulator, sequentially and 16 at a time.
fn thousand_projects(base: &Env) {
    for parallel in [1usize, 16] {
        let e = env();
        let gate = &base.gate;
        let t = Instant::now();
        e.rt.block_on(async {
            let next = AtomicUsize::new(0);
            let worker = || async {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= 1000 {
                        break;
                    }
                    let cfg = config(&format!("p{i}"), &format!("p{i}"), "");
                    ensure(&e.kube, &cfg, gate).await.unwrap();
                }
            };
            let workers: Vec<_> = (0..parallel).map(|_| worker()).collect();
            join_all(workers).await;
        });
        let elapsed = t.elapsed();
        println!(
            "host/1000_projects_{}: {:.2} s ({:.0} ensures/s, {} API requests)",
            if parallel == 1 {
                "sequential".to_owned()
            } else {
                format!("{parallel}_at_a_time")
            },
            elapsed.as_secs_f64(),
            1000.0 / elapsed.as_secs_f64(),
            e.sim.requests().len()
        );
    }
}

async fn join_all<F: std::future::Future<Output = ()>>(futures: Vec<F>) {
    let mut pinned: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut done = vec![false; pinned.len()];
    std::future::poll_fn(|cx| {
        for (i, f) in pinned.iter_mut().enumerate() {
            if !done[i] && f.as_mut().poll(cx).is_ready() {
                done[i] = true;
            }
        }
        if done.iter().all(|d| *d) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}

/// Peak RSS of `jumppod ensure` (first run: the native gate judges the ReplicaSet) and of a
/// steady-state `jumppod ensure` and `resolve`, from /usr/bin/time -v.
fn binary_rss(e: &Env) {
    let bin = std::env::var("JUMPPOD_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            let exe = std::env::current_exe().unwrap();
            exe.parent()
                .and_then(|d| d.parent())
                .unwrap()
                .join("jumppod")
        });
    if !bin.exists() || !std::path::Path::new("/usr/bin/time").exists() {
        println!(
            "host/binary_rss: not measured ({} or /usr/bin/time missing; `cargo build --release -p jumppod-host` first)",
            bin.display()
        );
        return;
    }
    let kc = e.sim.kubeconfig_path().to_str().unwrap().to_owned();
    let run = |args: &[&str]| -> (f64, Option<u64>) {
        let t = Instant::now();
        let out = std::process::Command::new("/usr/bin/time")
            .arg("-v")
            .arg(&bin)
            .args(args)
            .args([
                "--kubeconfig",
                &kc,
                "-n",
                "rss",
                "-p",
                "main",
                "--ssh-public-key",
                KEY,
            ])
            .output()
            .unwrap();
        let secs = t.elapsed().as_secs_f64();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let kib = stderr
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("Maximum resident set size (kbytes): ")
            })
            .and_then(|v| v.trim().parse().ok());
        assert!(out.status.success(), "{stderr}");
        (secs, kib)
    };
    // The simulator runs on e.rt's worker threads while the binary runs.
    for (label, args) in [
        ("ensure_first_run", vec!["ensure"]),
        ("ensure_steady_state", vec!["ensure"]),
        ("resolve", vec!["resolve", "--hostname", "jump.example.com"]),
    ] {
        if label == "resolve" {
            e.rt.block_on(e.sim.settle());
        }
        let (secs, kib) = run(&args);
        println!(
            "host/binary_{label}: peak RSS {} MiB, wall {:.0} ms",
            kib.map(|k| format!("{:.1}", k as f64 / 1024.0))
                .unwrap_or_else(|| "?".into()),
            secs * 1000.0
        );
    }
}

criterion_group!(host, benches);
criterion_main!(host);
