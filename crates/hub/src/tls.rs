//! Which certificate authorities HTTPS trusts: the system's, like curl and pip do, so networks
//! that re-sign TLS with their own CA (corporate proxies, sandboxes) work; Mozilla's bundled roots
//! when the system has none (minimal containers).

use std::path::{Path, PathBuf};

use ureq::tls::{Certificate, PemItem, RootCerts, parse_pem};

/// CA bundle locations of the common Linux distributions and BSDs / macOS, after the OpenSSL
/// variables that point elsewhere.
const BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

pub(crate) fn root_certs() -> RootCerts {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let mut certs = Vec::new();
    if let Some(file) = var("SSL_CERT_FILE") {
        certs.extend(read_pem(&file));
    }
    if let Some(dir) = var("SSL_CERT_DIR") {
        let entries = std::fs::read_dir(&dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect());
        for path in entries.unwrap_or_else(|_| Vec::new()) {
            certs.extend(read_pem(&path));
        }
    }
    if certs.is_empty() {
        certs = BUNDLES.iter().map(|p| read_pem(Path::new(p))).find(|c| !c.is_empty()).unwrap_or_default();
    }
    if certs.is_empty() {
        tracing::debug!("no system CA certificates found; using the bundled Mozilla roots");
        return RootCerts::WebPki;
    }
    RootCerts::new_with_certs(&certs)
}

fn read_pem(path: &Path) -> Vec<Certificate<'static>> {
    let Ok(bytes) = std::fs::read(path) else { return Vec::new() };
    parse_pem(&bytes)
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(cert)) => Some(cert),
            _ => None,
        })
        .collect()
}
