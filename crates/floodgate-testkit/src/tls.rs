//! Certificates for TLS tests, made by the test: a CA of its own, a server certificate for
//! `127.0.0.1` and `localhost`, and a client certificate, each a PEM file in a temporary
//! directory that is removed when the last handle is dropped.
//!
//! ```
//! use floodgate_testkit::tls::TestCerts;
//!
//! let certs = TestCerts::generate();
//! let ca = std::fs::read_to_string(certs.ca()).unwrap();
//! assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA and the certificates it signed, as PEM files. Cloning shares the files.
#[derive(Debug, Clone)]
pub struct TestCerts {
    inner: Arc<Files>,
}

#[derive(Debug)]
struct Files {
    dir: PathBuf,
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// === impl TestCerts ===

impl TestCerts {
    /// A new CA (`ca.pem`), a server certificate it signed for `127.0.0.1` and `localhost`
    /// (`server.pem`, `server.key`), and a client certificate it signed (`client.pem`,
    /// `client.key`). Each call makes a different CA: one's certificates do not verify with
    /// another's.
    ///
    /// # Panics
    /// When the certificates cannot be made or written.
    pub fn generate() -> TestCerts {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "floodgate-certs-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let files = Files { dir };
        let write = |name: &str, text: &str| {
            let path = files.dir.join(name);
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        };

        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own: a certificate of another test CA is then of an unknown issuer.
        ca.distinguished_name.push(DnType::CommonName, format!("Floodgate test CA {}", files.dir.display()));
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().expect("a CA key");
        let ca_cert = ca.self_signed(&ca_key).expect("the CA certificate");
        write("ca.pem", &ca_cert.pem());
        let issuer = Issuer::new(ca, ca_key);

        let leaf =
            |names: Vec<String>, common_name: &str, usages: Vec<ExtendedKeyUsagePurpose>, file: &str| {
                let mut params = CertificateParams::new(names).expect("certificate parameters");
                params.distinguished_name.push(DnType::CommonName, common_name);
                params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
                params.extended_key_usages = usages;
                let key = KeyPair::generate().expect("a key");
                let cert = params.signed_by(&key, &issuer).expect("a certificate signed by the CA");
                write(&format!("{file}.pem"), &cert.pem());
                write(&format!("{file}.key"), &key.serialize_pem());
            };
        // Redis also presents its server certificate as a client, to the other nodes of a TLS
        // cluster: it serves both purposes.
        leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            "127.0.0.1",
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
            "server",
        );
        leaf(Vec::new(), "floodgate test client", vec![ExtendedKeyUsagePurpose::ClientAuth], "client");
        TestCerts { inner: Arc::new(files) }
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The CA certificate.
    pub fn ca(&self) -> PathBuf {
        self.inner.dir.join("ca.pem")
    }

    /// The server certificate (for `127.0.0.1` and `localhost`).
    pub fn server_cert(&self) -> PathBuf {
        self.inner.dir.join("server.pem")
    }

    /// The server certificate's key.
    pub fn server_key(&self) -> PathBuf {
        self.inner.dir.join("server.key")
    }

    /// The client certificate.
    pub fn client_cert(&self) -> PathBuf {
        self.inner.dir.join("client.pem")
    }

    /// The client certificate's key.
    pub fn client_key(&self) -> PathBuf {
        self.inner.dir.join("client.key")
    }
}
