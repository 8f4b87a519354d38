//! The serving certificate, read again when its files change: cert-manager and the kubelet
//! (a Secret volume) replace them in place, and policy-server and controller-runtime pick the
//! new pair up without a restart.
//!
//! The check runs on each TLS handshake, not on a timer: two `stat`s per handshake (the files'
//! size, modification time and inode, which a kubelet's symlink swap changes too), no task to
//! run beside the server, and the first handshake after a change already gets the new pair.
//! The server also checks before each answer ([`Reloading::generation`]): a connection made
//! with a pair since replaced closes after its answer, so a client that keeps its connections
//! alive (the API server does) verifies the new certificate on its next one, instead of never.
//! A pair that does not load (a file half written, a key of another certificate) leaves the
//! previous one served, with a warning naming the file and the problem, once per change of the
//! files.

use super::expiry::{self, Validity};
use jumppod_plan::config::ConfigError;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio_rustls::rustls;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;

/// The current pair of `--tls-cert` and `--tls-key`, as rustls asks for it.
#[derive(Debug)]
pub struct Reloading {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    serving: Arc<CertifiedKey>,
    /// How many times a changed pair was loaded.
    generation: u64,
    /// The files as they were last read (whether that read loaded a pair or not).
    seen: Stamp,
}

/// What changes when a file is rewritten or replaced: its size, modification time (ns on
/// Linux), and on Unix its device and inode (a rename or a symlink swap).
type Stamp = [Option<(u64, Option<std::time::SystemTime>, (u64, u64))>; 2];

fn stamp(cert: &Path, key: &Path) -> Stamp {
    [cert, key].map(|path| {
        std::fs::metadata(path)
            .ok()
            .map(|m| (m.len(), m.modified().ok(), identity(&m)))
    })
}

#[cfg(unix)]
fn identity(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt as _;
    (m.dev(), m.ino())
}

#[cfg(not(unix))]
fn identity(_: &std::fs::Metadata) -> (u64, u64) {
    (0, 0)
}

impl Reloading {
    /// The pair as it is now; an error (naming the flag, the file and the problem) if it does
    /// not load: at start there is nothing to fall back on.
    pub fn new(
        cert: &Path,
        key: &Path,
        provider: Arc<CryptoProvider>,
    ) -> Result<Reloading, ConfigError> {
        let seen = stamp(cert, key);
        let serving = Arc::new(load(cert, key, &provider)?);
        report_expiry(&serving, cert);
        Ok(Reloading {
            cert: cert.to_owned(),
            key: key.to_owned(),
            provider,
            state: Mutex::new(State {
                serving,
                generation: 0,
                seen,
            }),
        })
    }

    /// The pair to serve: read again first if the files changed since they were last read.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.checked().0
    }

    /// Which pair is served now, as a count of reloads: a connection whose handshake came
    /// before a change sees a larger number than the one it started with.
    pub fn generation(&self) -> u64 {
        self.checked().1
    }

    fn checked(&self) -> (Arc<CertifiedKey>, u64) {
        let now = stamp(&self.cert, &self.key);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if now != state.seen {
            state.seen = now;
            match load(&self.cert, &self.key, &self.provider) {
                Ok(pair) => {
                    state.serving = Arc::new(pair);
                    state.generation += 1;
                    tracing::info!(
                        cert = %self.cert.display(),
                        key = %self.key.display(),
                        "serving certificate reloaded"
                    );
                    report_expiry(&state.serving, &self.cert);
                }
                Err(e) => tracing::warn!(
                    flag = %e.field,
                    file = %e.value,
                    problem = %e.problem,
                    "the changed serving pair does not load; still serving the previous one"
                ),
            }
        }
        (state.serving.clone(), state.generation)
    }
}

impl Reloading {
    /// The validity of the chain served now (None if it cannot be read).
    pub fn validity(&self) -> Option<Validity> {
        validity_of(&self.current())
    }

    /// Logs when the chain served now expires, a warning when its renewal is due.
    pub fn report_expiry(&self) {
        report_expiry(&self.current(), &self.cert);
    }
}

fn validity_of(pair: &CertifiedKey) -> Option<Validity> {
    Validity::of_chain(pair.cert.iter().map(|c| c.as_ref()))
}

/// When the pair expires: logged at info, or as a warning once less than a third of its
/// lifetime is left (the chart renews its own certificate at an upgrade from then on,
/// cert-manager by default at that point), or expired.
fn report_expiry(pair: &CertifiedKey, cert: &Path) {
    let now = expiry::now();
    match validity_of(pair) {
        Some(v) if v.renewal_due(now) => tracing::warn!(
            cert = %cert.display(),
            not_after = %expiry::rfc3339(v.not_after),
            seconds_left = v.seconds_left(now),
            "the serving certificate expires soon or has expired: less than a third of its \
             lifetime is left; renew it (a helm upgrade renews the chart's generated one), or \
             the API server refuses every call once it has expired"
        ),
        Some(v) => tracing::info!(
            cert = %cert.display(),
            not_after = %expiry::rfc3339(v.not_after),
            seconds_left = v.seconds_left(now),
            "serving certificate valid"
        ),
        None => tracing::warn!(
            cert = %cert.display(),
            "cannot read the serving certificate's validity"
        ),
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The serving chain and its key (PKCS#8, SEC1 or RSA), checked to be a pair.
pub fn load(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, ConfigError> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |field: &str, path: &Path, problem: String| ConfigError {
        field: field.into(),
        value: path.display().to_string(),
        problem,
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            bad(
                "--tls-cert",
                cert,
                format!("cannot read a PEM certificate: {e}"),
            )
        })?;
    if chain.is_empty() {
        return Err(bad("--tls-cert", cert, "holds no certificate".into()));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        bad(
            "--tls-key",
            key,
            format!("cannot read a PEM private key: {e}"),
        )
    })?;
    CertifiedKey::from_der(chain, key_der, provider).map_err(|e| {
        bad(
            "--tls-key",
            key,
            format!("does not fit the certificate: {e}"),
        )
    })
}
