//! TLS against real `redis-server --tls-port` processes, with certificates made for the test.
#![cfg(any(feature = "tls", feature = "tls-aws-lc-rs"))]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use redquorum::RedLock;

use crate::PREFIX;
use redquorum_testkit::{Cluster, TlsFiles};

const TTL: Duration = Duration::from_secs(10);
const NODE_TIMEOUT: Duration = Duration::from_millis(500);

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl on PATH");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA named `name`, and a server certificate for 127.0.0.1 signed by it.
fn certificates(dir: &Path, name: &str) -> TlsFiles {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca_key = format!("{name}-ca.key");
    let ca_crt = format!("{name}-ca.crt");
    let mut req = vec!["req", "-x509"];
    req.extend(ec);
    req.extend(["-keyout", &ca_key, "-out", &ca_crt, "-subj"]);
    let subject = format!("/CN={name} test CA");
    req.extend([subject.as_str(), "-days", "1"]);
    openssl(dir, &req);
    let key = format!("{name}-server.key");
    let csr = format!("{name}-server.csr");
    let crt = format!("{name}-server.crt");
    let mut req = vec!["req"];
    req.extend(ec);
    req.extend(["-keyout", &key, "-out", &csr, "-subj", "/CN=127.0.0.1"]);
    openssl(dir, &req);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").expect("write");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "1",
            "-extfile",
            "san.ext",
        ],
    );
    TlsFiles {
        cert: dir.join(crt),
        key: dir.join(key),
        ca: dir.join(ca_crt),
    }
}

fn clients_trusting(cluster: &Cluster, ca: &Path) -> Vec<redis::Client> {
    let ca = std::fs::read(ca).expect("CA");
    (0..cluster.len())
        .map(|i| {
            redis::Client::build_with_tls(
                cluster.server(i).url(),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca.clone()),
                },
            )
            .expect("tls client")
        })
        .collect()
}

/// How long a connection (TLS handshake, `INFO`, script loads) may take in these tests: a
/// debug build of rustls under load is slow, and what is tested is verification, not speed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn locks_over_tls_with_verified_certificates() {
    let dir = tempfile::tempdir().expect("tmp");
    let files = certificates(dir.path(), "good");
    let cluster = Cluster::start_tls(3, &files);
    assert!(cluster.urls().iter().all(|u| u.starts_with("rediss://")));
    let rl = RedLock::builder(clients_trusting(&cluster, &files.ca))
        .per_node_timeout(NODE_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .expect("config");
    // Connected first, as in the insecure case below.
    rl.connect_all().await.expect("connects over TLS");
    let mut lock = rl
        .try_acquire("secure", TTL)
        .await
        .expect("acquire over TLS");
    lock.extend(TTL).await.expect("extend over TLS");
    lock.release().await.expect("release over TLS");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn certificates_are_verified_by_default_and_a_wrong_ca_is_a_clear_node_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let files = certificates(dir.path(), "good");
    let other = certificates(dir.path(), "other");
    let cluster = Cluster::start_tls(3, &files);

    // Plain rediss:// URLs trust only the system roots: the test CA is not among them.
    let rl = RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .build()
        .expect("config");
    let _ = rl.connect().await;
    let err = rl
        .try_acquire("secure", TTL)
        .await
        .expect_err("unknown issuer");
    assert!(err.is_no_quorum(), "{err}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );

    // Trusting another CA fails the same way, per node.
    let rl = RedLock::builder(clients_trusting(&cluster, &other.ca))
        .per_node_timeout(NODE_TIMEOUT)
        .build()
        .expect("config");
    let _ = rl.connect().await;
    let err = rl.try_acquire("secure", TTL).await.expect_err("wrong CA");
    let report = err.report().expect("report");
    // Decided once a majority failed; every node that answered names the certificate.
    assert!(report.failures().count() >= 2, "{report}");
    for (node, error) in report.failures() {
        let cause = std::error::Error::source(error)
            .map(|c| c.to_string())
            .unwrap_or_default();
        assert!(
            cause.to_lowercase().contains("certificate"),
            "{node}: {error}: {cause}"
        );
    }
    assert!(
        report.to_string().to_lowercase().contains("certificate"),
        "{report}"
    );

    // Skipping verification works only when asked for explicitly.
    let insecure: Vec<String> = cluster
        .urls()
        .iter()
        .map(|u| format!("{u}/#insecure"))
        .collect();
    let rl = RedLock::builder(&insecure)
        .per_node_timeout(NODE_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .expect("config");
    // Connected first: a TLS handshake, INFO and the script loads in a debug build on a
    // loaded machine can take longer than one round's per-node timeout, and under two CPU
    // hogs longer than the default 1 s connect timeout (CI caught that).
    rl.connect_all().await.expect("insecure mode connects");
    rl.try_acquire("secure", TTL)
        .await
        .expect("insecure mode")
        .release()
        .await
        .expect("release");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}
