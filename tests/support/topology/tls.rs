//! A private CA and its certificates, a TLS-only server, and a small TLS client to drive it.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

use super::super::redis_server::{self, Launch, Persistence, RedisServer, Reply, Transport};
use super::run_cli;

/// A private CA, a server certificate for `127.0.0.1` and `localhost`, and a client certificate,
/// all signed by the CA; in memory (PEM) and in a temp directory (the files redis-server reads).
/// Each call makes an unrelated CA: a second one is the wrong CA of a refusal test.
pub struct TlsCerts {
    ca_pem: String,
    server_cert_pem: String,
    server_key_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
    ca_der: CertificateDer<'static>,
    client_cert_der: CertificateDer<'static>,
    client_key_der: PrivatePkcs8KeyDer<'static>,
    dir: tempfile::TempDir,
}

impl TlsCerts {
    /// A fresh CA and its two leaf certificates (ECDSA P-256), written to a new temp directory.
    pub fn generate() -> TlsCerts {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose as Eku, IsCa, Issuer, KeyPair,
            KeyUsagePurpose,
        };
        let key = || KeyPair::generate().expect("generate a key pair");

        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "tokio-timewheel test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = key();
        let ca_cert = ca_params.self_signed(&ca_key).expect("self-sign the CA");
        let issuer = Issuer::new(ca_params, ca_key);

        // redis-server also presents its certificate as a client, to its primary and to the other
        // nodes of a cluster, hence both purposes.
        let mut server_params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).expect("server params");
        server_params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
        server_params.extended_key_usages = vec![Eku::ServerAuth, Eku::ClientAuth];
        let server_key = key();
        let server_cert = server_params.signed_by(&server_key, &issuer).expect("sign the server certificate");

        let mut client_params = CertificateParams::new(Vec::<String>::new()).expect("client params");
        client_params.distinguished_name.push(DnType::CommonName, "tokio-timewheel test client");
        client_params.extended_key_usages = vec![Eku::ClientAuth];
        let client_key = key();
        let client_cert = client_params.signed_by(&client_key, &issuer).expect("sign the client certificate");

        let dir = tempfile::Builder::new().prefix("timewheel-tls-").tempdir().expect("create a temp dir for certs");
        let certs = TlsCerts {
            ca_pem: ca_cert.pem(),
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
            ca_der: ca_cert.der().clone(),
            client_cert_der: client_cert.der().clone(),
            client_key_der: PrivatePkcs8KeyDer::from(client_key.serialize_der()),
            dir,
        };
        for (file, pem) in [
            ("ca.crt", &certs.ca_pem),
            ("server.crt", &certs.server_cert_pem),
            ("server.key", &certs.server_key_pem),
            ("client.crt", &certs.client_cert_pem),
            ("client.key", &certs.client_key_pem),
        ] {
            std::fs::write(certs.dir.path().join(file), pem).unwrap_or_else(|e| panic!("write {file}: {e}"));
        }
        certs
    }

    /// The CA's certificate, PEM: what a client trusts.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub fn server_cert_pem(&self) -> &str {
        &self.server_cert_pem
    }

    pub fn server_key_pem(&self) -> &str {
        &self.server_key_pem
    }

    /// The client's certificate, PEM: what a client presents when the server asks for one.
    pub fn client_cert_pem(&self) -> &str {
        &self.client_cert_pem
    }

    /// The client's private key, PKCS#8 PEM.
    pub fn client_key_pem(&self) -> &str {
        &self.client_key_pem
    }

    /// The directory holding `ca.crt`, `server.crt`, `server.key`, `client.crt`, `client.key`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir().join("ca.crt")
    }

    pub fn server_cert_file(&self) -> PathBuf {
        self.dir().join("server.crt")
    }

    pub fn server_key_file(&self) -> PathBuf {
        self.dir().join("server.key")
    }

    pub fn client_cert_file(&self) -> PathBuf {
        self.dir().join("client.crt")
    }

    pub fn client_key_file(&self) -> PathBuf {
        self.dir().join("client.key")
    }

    /// A `rustls` client configuration that trusts this CA only, presenting the client
    /// certificate if `with_client_cert`.
    pub fn client_config(&self, with_client_cert: bool) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone()).expect("add the test CA to a root store");
        // The provider is named rather than taken from the process default, which is ambiguous
        // when another dependency enables a second one.
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .with_root_certificates(roots);
        let config = if with_client_cert {
            let key = PrivateKeyDer::Pkcs8(self.client_key_der.clone_key());
            builder.with_client_auth_cert(vec![self.client_cert_der.clone()], key).expect("a valid client certificate")
        } else {
            builder.with_no_client_auth()
        };
        Arc::new(config)
    }

    /// redis-server's arguments for these files: its certificate and key, the CA it checks
    /// clients (and, as a client, its peers) against, and whether a client must present a
    /// certificate.
    pub fn server_args(&self, require_client_cert: bool) -> Vec<String> {
        let path = |p: PathBuf| p.to_str().expect("cert path is UTF-8").to_owned();
        vec![
            "--tls-cert-file".into(),
            path(self.server_cert_file()),
            "--tls-key-file".into(),
            path(self.server_key_file()),
            "--tls-ca-cert-file".into(),
            path(self.ca_file()),
            "--tls-auth-clients".into(),
            if require_client_cert { "yes" } else { "no" }.into(),
        ]
    }

    /// redis-cli's arguments to connect with TLS, trusting this CA and presenting the client
    /// certificate.
    pub fn cli_args(&self) -> Vec<String> {
        let path = |p: PathBuf| p.to_str().expect("cert path is UTF-8").to_owned();
        vec![
            "--tls".into(),
            "--cacert".into(),
            path(self.ca_file()),
            "--cert".into(),
            path(self.client_cert_file()),
            "--key".into(),
            path(self.client_key_file()),
        ]
    }

    /// How the helper speaks to servers of this CA: over TLS, with the client certificate.
    pub fn transport(&self) -> Transport {
        let config = self.client_config(true);
        Arc::new(move |addr, args, timeout| tls_command_at(&config, addr, args, timeout))
    }
}

/// Sends one command over a fresh TLS connection to `addr` (checked as the IP address
/// `127.0.0.1`) and returns the reply. A certificate the client does not trust, or a server that
/// refuses the client's, is an `Err`.
pub fn tls_command_at(
    config: &Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    args: &[&str],
    timeout: Duration,
) -> std::io::Result<Reply> {
    let connection =
        rustls::ClientConnection::new(config.clone(), ServerName::from(addr.ip())).map_err(std::io::Error::other)?;
    let socket = TcpStream::connect_timeout(&addr, timeout)?;
    socket.set_read_timeout(Some(timeout))?;
    socket.set_write_timeout(Some(timeout))?;
    let mut stream = rustls::StreamOwned::new(connection, socket);
    stream.write_all(&redis_server::encode(args))?;
    stream.flush()?;
    redis_server::read_reply(&mut BufReader::new(stream))
}

/// A TLS-only redis-server (`--port 0 --tls-port <port>`), AOF on.
pub struct TlsServer {
    server: RedisServer,
    cli_tls: Vec<String>,
}

impl TlsServer {
    /// A server presenting `certs`' server certificate; with `require_client_cert` it refuses a
    /// client without a certificate signed by `certs`' CA (`--tls-auth-clients yes`). `None`
    /// (after a skip note) when there is no redis-server.
    pub fn start(certs: &TlsCerts, require_client_cert: bool) -> Option<TlsServer> {
        let args = certs.server_args(require_client_cert);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let launch = Launch { config_file: None, tls: Some(certs.transport()) };
        let server = RedisServer::start_launched(Persistence::Aof, &args, launch)?;
        Some(TlsServer { server, cli_tls: certs.cli_args() })
    }

    /// `rediss://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.server.port())
    }

    /// The TLS port (there is no plain one).
    pub fn port(&self) -> u16 {
        self.server.port()
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// One command over TLS, with the client certificate; panics on an I/O error.
    pub fn command(&self, args: &[&str]) -> Reply {
        self.server.command(args)
    }

    /// One command through `redis-cli --tls` with the client certificate: its output, trimmed
    /// (`Err` with its stderr when it fails). `None` when there is no redis-cli.
    pub fn cli(&self, args: &[&str]) -> Option<Result<String, String>> {
        let mut cli_args = self.cli_tls.clone();
        cli_args.extend(["-h".into(), "127.0.0.1".into(), "-p".into(), self.port().to_string()]);
        cli_args.extend(args.iter().map(|a| a.to_string()));
        run_cli(&cli_args, Duration::from_secs(20))
    }

    /// SIGKILL; harmless when already killed.
    pub fn kill(&mut self) {
        self.server.kill();
    }

    /// Starts again on the same directory and port, and waits until it answers over TLS.
    pub fn restart(&mut self) {
        self.server.restart();
    }

    pub fn log_tail(&self) -> String {
        self.server.log_tail()
    }

    pub fn server(&self) -> &RedisServer {
        &self.server
    }

    pub fn server_mut(&mut self) -> &mut RedisServer {
        &mut self.server
    }
}
