//! A `jumppod run` process for the controller's tests and benchmark: started with its HTTP
//! port on a free one, asked over plain HTTP, killed when dropped.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub struct Controller {
    pub child: Child,
    pub addr: SocketAddr,
    log: Option<PathBuf>,
}

impl Controller {
    /// `args` must give `--listen 127.0.0.1:0`; stderr goes to `log` (else nowhere).
    pub fn start(kubeconfig: &Path, args: &[&str], log: Option<&Path>) -> Controller {
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path).unwrap()),
            None => Stdio::null(),
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_jumppod"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("jumppod run");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .split("http://")
            .nth(1)
            .unwrap_or_else(|| panic!("no address in {line:?}; log: {log:?}"))
            .trim()
            .parse()
            .unwrap();
        Controller {
            child,
            addr,
            log: log.map(Path::to_owned),
        }
    }

    /// GET on the controller's HTTP port: status code and body.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let mut stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: jumppod\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).await.unwrap();
        let code = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
        (code, body.to_owned())
    }

    pub async fn leading(&self) {
        super::cluster::wait_for("the controller to lead with its caches filled", || async {
            let (code, body) = self.get("/readyz").await;
            (code == 200 && body.contains("leading")).then_some(())
        })
        .await;
    }

    pub fn log(&self) -> String {
        self.log
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {signal}");
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
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of a metric line `name value` in Prometheus text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}
