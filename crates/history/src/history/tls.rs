//! TLS to a PostgreSQL store, as libpq's users configure it: `sslmode` (`disable`, `allow`,
//! `prefer`, `require`, `verify-ca`, `verify-full`) and `sslrootcert` in the URL's query or
//! the `key=value` string, else `PGSSLMODE`/`PGSSLROOTCERT`, else `~/.postgresql/root.crt`
//! as libpq looks for it. The connection is rustls (no OpenSSL system library in any build).
//! libpq's meanings are kept: `prefer` and `require` encrypt without checking whom they
//! reach (unless a root certificate is given, when `require` checks the chain as libpq
//! does), `verify-ca` checks the chain, `verify-full` the chain and the host name.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::path::PathBuf;
use std::sync::Arc;

/// `sslmode`, libpq's six.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(text: &str) -> Result<Mode, String> {
        Ok(match text {
            "disable" => Mode::Disable,
            "allow" => Mode::Allow,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode={other}: not one of disable, allow, prefer, require, verify-ca, verify-full"
                ))
            }
        })
    }

    /// What the postgres crate is told (it knows three): it encrypts or not; the checks are
    /// this module's verifier.
    pub fn wire(self) -> postgres::config::SslMode {
        use postgres::config::SslMode;
        match self {
            Mode::Disable => SslMode::Disable,
            Mode::Allow | Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }
}

/// Where the connection string's TLS settings lead.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub mode: Mode,
    /// `sslrootcert`: a PEM file, or `system` for the bundled public roots.
    pub root_cert: Option<String>,
}

/// `url` without `sslmode`/`sslrootcert` (the postgres crate refuses modes it does not know)
/// and the TLS settings they, or libpq's variables, give.
pub fn split(url: &str) -> Result<(String, Settings), String> {
    let mut mode = None;
    let mut root_cert = None;
    let mut take = |key: &str, value: String| -> Result<bool, String> {
        match key {
            "sslmode" => mode = Some(Mode::parse(&value)?),
            "sslrootcert" => root_cert = Some(value),
            _ => return Ok(false),
        }
        Ok(true)
    };
    let lower = url.to_ascii_lowercase();
    let rest = if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
        match url.split_once('?') {
            None => url.to_string(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    if !take(k, percent_decoded(v))? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_string()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        let mut kept = Vec::new();
        for (k, v, raw) in key_values(url) {
            if !take(&k, v)? {
                kept.push(raw);
            }
        }
        kept.join(" ")
    };
    let mode = match mode {
        Some(m) => m,
        None => match std::env::var("PGSSLMODE") {
            Ok(v) if !v.is_empty() => Mode::parse(&v).map_err(|e| format!("PGSSLMODE: {e}"))?,
            _ => Mode::Prefer,
        },
    };
    let root_cert = root_cert.or_else(|| {
        std::env::var("PGSSLROOTCERT")
            .ok()
            .filter(|v| !v.is_empty())
    });
    Ok((rest, Settings { mode, root_cert }))
}

/// libpq's `key=value` string as (key, value, the text it came from): values in single
/// quotes, with backslash escapes.
fn key_values(text: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut key = String::new();
        while let Some(&(_, c)) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|&(_, c)| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek().is_some_and(|&(_, c)| c == '=') {
            chars.next();
            while chars.peek().is_some_and(|&(_, c)| c.is_whitespace()) {
                chars.next();
            }
            let quoted = chars.peek().is_some_and(|&(_, c)| c == '\'');
            if quoted {
                chars.next();
            }
            while let Some((_, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            value.push(n);
                        }
                    }
                    '\'' if quoted => break,
                    c if c.is_whitespace() && !quoted => break,
                    c => value.push(c),
                }
            }
        }
        let end = chars.peek().map_or(text.len(), |&(i, _)| i);
        out.push((key, value, text[start..end].trim().to_string()));
    }
    out
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' {
            if let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The roots a checked connection trusts: `sslrootcert` (a PEM file, or `system`), else
/// `~/.postgresql/root.crt` when it exists. `None`: no root given anywhere.
fn roots(settings: &Settings) -> Result<Option<rustls::RootCertStore>, String> {
    let mut store = rustls::RootCertStore::empty();
    let file: PathBuf = match settings.root_cert.as_deref() {
        Some("system") => {
            store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            return Ok(Some(store));
        }
        Some(path) => PathBuf::from(path),
        None => match dirs::home_dir().map(|h| h.join(".postgresql/root.crt")) {
            Some(p) if p.is_file() => p,
            _ => return Ok(None),
        },
    };
    use rustls::pki_types::pem::PemObject;
    let shown = file.display();
    let certs = CertificateDer::pem_file_iter(&file)
        .map_err(|e| format!("sslrootcert {shown}: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("sslrootcert {shown}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("sslrootcert {shown}: no certificate in it"));
    }
    for c in certs {
        store
            .add(c)
            .map_err(|e| format!("sslrootcert {shown}: {e}"))?;
    }
    Ok(Some(store))
}

/// The rustls connector for `settings` (not for `disable`, which needs none).
pub fn connector(settings: &Settings) -> Result<tokio_postgres_rustls::MakeRustlsConnect, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let roots = roots(settings)?;
    let check = match (settings.mode, roots) {
        (Mode::VerifyCa | Mode::VerifyFull, None) => {
            return Err(format!(
                "sslmode={}: no root certificate to check the server against: give sslrootcert=FILE (or sslrootcert=system for the public roots), or put it in ~/.postgresql/root.crt",
                if settings.mode == Mode::VerifyCa { "verify-ca" } else { "verify-full" }
            ))
        }
        (Mode::VerifyFull, Some(r)) => Check::Full(r),
        // libpq: with a root certificate at hand, `require` checks the chain too.
        (Mode::VerifyCa | Mode::Require, Some(r)) => Check::Chain(r),
        _ => Check::Nothing,
    };
    let config = match check {
        Check::Full(r) => builder.with_root_certificates(r).with_no_client_auth(),
        Check::Chain(r) => {
            let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(r),
                provider.clone(),
            )
            .build()
            .map_err(|e| format!("TLS: {e}"))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly { inner }))
                .with_no_client_auth()
        }
        Check::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked { provider }))
            .with_no_client_auth(),
    };
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

enum Check {
    Full(rustls::RootCertStore),
    Chain(rustls::RootCertStore),
    Nothing,
}

/// `verify-ca`: the chain must lead to a trusted root; the name in it is not compared.
#[derive(Debug)]
struct ChainOnly {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError as C;
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                C::NotValidForName | C::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `prefer`/`require` without a root: encrypted, whoever answers (libpq's meaning); the
/// handshake's signatures are still checked.
#[derive(Debug)]
struct Unchecked {
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Why a connection failed, in the server's words (the postgres crate's own text is only
/// "db error" or "error connecting to server"; the reason is in its source chain), and what to
/// change where TLS is the reason.
pub fn connect_error(e: &postgres::Error, mode: Mode) -> String {
    let mut text = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => {
            let mut parts = vec![e.to_string()];
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                let t = s.to_string();
                if !parts.iter().any(|p| p.contains(&t)) {
                    parts.push(t);
                }
                source = s.source();
            }
            parts.join(": ")
        }
    };
    let lower = text.to_ascii_lowercase();
    if mode == Mode::Disable && (lower.contains("ssl off") || lower.contains("no encryption")) {
        text.push_str(" (the server takes this user over TLS only: drop sslmode=disable, or set sslmode=require)");
    } else if lower.contains("server does not support tls")
        || lower.contains("server does not support ssl")
    {
        text.push_str(" (the server has TLS off: set sslmode=prefer or disable, or turn ssl on at the server)");
    }
    crate::secrets::redact(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_settings_leave_the_url_and_keep_the_rest() {
        let (rest, s) =
            split("postgres://u@db:5432/x?application_name=a&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem")
                .unwrap();
        assert_eq!(rest, "postgres://u@db:5432/x?application_name=a");
        assert_eq!(s.mode, Mode::VerifyFull);
        assert_eq!(s.root_cert.as_deref(), Some("/tmp/ca.pem"));
        let (rest, s) =
            split("host=db user=fleet sslmode=verify-ca sslrootcert='/my certs/ca.pem' dbname=x")
                .unwrap();
        assert_eq!(rest, "host=db user=fleet dbname=x");
        assert_eq!(s.mode, Mode::VerifyCa);
        assert_eq!(s.root_cert.as_deref(), Some("/my certs/ca.pem"));
        assert!(split("postgres://db/x?sslmode=verify-everything").is_err());
    }

    #[test]
    fn a_checked_mode_without_a_root_is_refused_in_words() {
        let s = Settings {
            mode: Mode::VerifyFull,
            root_cert: Some("/nonexistent/ca.pem".into()),
        };
        let e = connector(&s).err().expect("no such file");
        assert!(e.contains("sslrootcert /nonexistent/ca.pem"), "{e}");
    }
}
