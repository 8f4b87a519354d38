//! A `jumppod run` process for the controller's tests and benchmark: started with its HTTP
//! port on a free one, asked over plain HTTP, killed when dropped; and the upgrade it is
//! there to finish, which both the tests and the benchmark set up. Every wait here is
//! bounded and names what it waited for.

use super::cluster::{bare_pod_of, old_service_of, wait_for};
use super::config_for;
use jumppod::schema;
use jumppod_host::api::Kube;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a started controller may take to print its address: it binds its port before it
/// reads anything from the API, so this is only a bound for a binary that hangs or dies.
const STARTED_WITHIN: Duration = Duration::from_secs(30);

/// How long one GET on the controller's port may take: it answers from memory.
const ANSWERED_WITHIN: Duration = Duration::from_secs(10);

/// The jump pods' size in the controller's tests and benchmark, and the controllers'
/// template (no drift): the policy's floors, because `make test` runs these tests beside
/// the other real-cluster tests on three 4-cpu nodes.
pub const SMALL: &str = "cpu: 100m\nmemory: 32Mi\n";

pub struct Controller {
    pub child: Child,
    pub addr: SocketAddr,
    log: Option<PathBuf>,
}

impl Controller {
    /// `args` must give `--listen 127.0.0.1:0`; `env` is added to the process's environment;
    /// stderr goes to `log` (else nowhere).
    pub fn start(
        kubeconfig: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        log: Option<&Path>,
    ) -> Controller {
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path).unwrap()),
            None => Stdio::null(),
        };
        let mut child = Command::new(crate::jumppod_bin())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("jumppod run");
        // The first line on stdout names the address; read on a thread of its own so that a
        // controller that never prints it fails the test instead of hanging it.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let read = std::io::BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(read.map(|_| line));
        });
        let mut controller = Controller {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log: log.map(Path::to_owned),
        };
        let line = match rx.recv_timeout(STARTED_WITHIN) {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => panic!("reading the controller's stdout: {e}"),
            Err(_) => panic!(
                "timed out after {STARTED_WITHIN:?} waiting for the controller's address line \
                 on stdout; log:\n{}",
                controller.log()
            ),
        };
        controller.addr = line
            .split("http://")
            .nth(1)
            .unwrap_or_else(|| {
                panic!(
                    "no address in {line:?} (exited: {:?}); log:\n{}",
                    controller.child.try_wait(),
                    controller.log()
                )
            })
            .trim()
            .parse()
            .unwrap();
        controller
    }

    /// `jumppod run -v --namespace ns -f template` as `kubeconfig`'s user, metrics on a free
    /// port of 127.0.0.1, `RUST_LOG` as given, its log in `log`.
    pub fn watching(
        kubeconfig: &Path,
        ns: &str,
        template: &Path,
        rust_log: &str,
        log: &Path,
    ) -> Controller {
        let template = template.to_str().expect("a UTF-8 path");
        let args = [
            "run",
            "-v",
            "--namespace",
            ns,
            "--listen",
            "127.0.0.1:0",
            "-f",
            template,
        ];
        Controller::start(kubeconfig, &args, &[("RUST_LOG", rust_log)], Some(log))
    }

    /// GET on the controller's HTTP port: status code and body.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let ask = async {
            let mut stream = tokio::net::TcpStream::connect(self.addr).await?;
            stream
                .write_all(format!("GET {path} HTTP/1.0\r\nHost: jumppod\r\n\r\n").as_bytes())
                .await?;
            let mut text = String::new();
            stream.read_to_string(&mut text).await?;
            Ok::<_, std::io::Error>(text)
        };
        let text = match tokio::time::timeout(ANSWERED_WITHIN, ask).await {
            Ok(Ok(text)) => text,
            Ok(Err(e)) => panic!("GET {path} on the controller at {}: {e}", self.addr),
            Err(_) => panic!(
                "timed out after {ANSWERED_WITHIN:?} waiting for the controller's answer to GET {path}"
            ),
        };
        let code = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
        (code, body.to_owned())
    }

    pub async fn leading(&self) {
        self.ready_as("leading").await
    }

    pub async fn standing_by(&self) {
        self.ready_as("standing by").await
    }

    /// Waits until `/readyz` answers 200 with `role` in its body.
    async fn ready_as(&self, role: &str) {
        wait_for(
            &format!("the controller's /readyz to say {role:?}"),
            || async {
                let (code, body) = self.get("/readyz").await;
                (code == 200 && body.contains(role)).then_some(())
            },
        )
        .await;
    }

    pub fn log(&self) -> String {
        self.log
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    /// How much it has logged so far: [`Controller::log_since`] reads what follows.
    pub fn log_len(&self) -> usize {
        self.log().len()
    }

    pub fn log_since(&self, from: usize) -> String {
        self.log().get(from..).unwrap_or_default().to_owned()
    }

    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {signal}");
    }

    /// Waits at most `limit` for the process to exit (`what`: why it should).
    pub async fn exited(&mut self, what: &str, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < limit,
                "timed out after {limit:?} waiting for the controller to exit ({what}); log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Its resident memory now (VmRSS), in MiB.
    pub fn rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .unwrap()
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap();
        kib / 1024.0
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too, so this wait is bounded.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of a metric line `name value` in Prometheus text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// A project as the upgrade leaves it: a pre-#3891 pod and Service on `port`, and the
/// ReplicaSet `ensure` made beside them, its pod ready.
pub async fn upgrading_project(kube: &Kube, ns: &str, project: &str, port: i32) {
    bare_pod_of(kube, ns, project, false).await;
    old_service_of(kube, ns, project, port).await;
    let small = config_for(ns, project, SMALL);
    jumppod_host::ensure(kube, &small, &jumppod_host::Gate::native())
        .await
        .unwrap();
    let rs: Api<ReplicaSet> = Api::namespaced(kube.client.clone(), ns);
    let name = schema::jump_pod_name(project);
    wait_for("the ReplicaSet's pod to be ready", || async {
        rs.get(&name)
            .await
            .ok()
            .filter(|rs| rs.status.as_ref().and_then(|s| s.ready_replicas) == Some(1))
    })
    .await;
}

/// The project's NodePort once its Service has the current selector; None before.
pub async fn switched_port(kube: &Kube, ns: &str, project: &str) -> Option<i32> {
    let api: Api<Service> = Api::namespaced(kube.client.clone(), ns);
    let name = schema::jump_pod_name(project);
    let spec = api.get(&schema::service_name(&name)).await.ok()?.spec?;
    if spec.selector != Some(schema::current_selector(&name)) {
        return None;
    }
    spec.ports?.first()?.node_port
}

/// Waits until the project's Service has the current selector; its NodePort.
pub async fn service_switched(kube: &Kube, ns: &str, project: &str) -> i32 {
    wait_for(
        &format!("the Service of {project} to have the current selector"),
        || switched_port(kube, ns, project),
    )
    .await
}

/// Waits until the pod `pod` is deleted.
pub async fn gone(kube: &Kube, ns: &str, pod: &str) {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    wait_for(&format!("the finished pod {pod} to be deleted"), || async {
        matches!(pods.get_opt(pod).await, Ok(None)).then_some(())
    })
    .await;
}

/// Whether a ReplicaSet carries the record of a surge (`jumppod.io/surged-from`).
pub fn surge_recorded(rs: &ReplicaSet) -> bool {
    rs.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(jumppod_plan::surge::SURGED_FROM_ANNOTATION))
}
