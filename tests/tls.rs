//! TLS and mTLS with throwaway certificates (rcgen): real handshakes with a tonic client
//! and the CLI, a plaintext client against a TLS port, and worker sessions that must show
//! a client certificate.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::msg;
use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use runplane::cli::connect::Bearer;
use runplane::grpc::pb;
use runplane::grpc::pb::run_service_client::RunServiceClient;
use runplane::grpc::pb::worker_message::Message as In;
use runplane::grpc::pb::worker_service_client::WorkerServiceClient;
use runplane::server::{bind, ServeConfig, TlsFiles};
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::Code;

/// PEM files of a CA, a server certificate for localhost and a worker client certificate.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let leaf = |names: &[&str], purpose: ExtendedKeyUsagePurpose, stem: &str| {
            let key = KeyPair::generate().unwrap();
            let mut params =
                CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                    .unwrap();
            params.extended_key_usages = vec![purpose];
            let cert = params.signed_by(&key, &issuer).unwrap();
            std::fs::write(dir.path().join(format!("{stem}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.path().join(format!("{stem}.key")), key.serialize_pem()).unwrap();
        };
        leaf(
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
            "server",
        );
        leaf(&["worker"], ExtendedKeyUsagePurpose::ClientAuth, "client");
        std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }
}

/// A TLS server (mTLS for workers when `client_ca`); returns its port and admin token.
async fn tls_server(pki: &Pki, data: &Path, client_ca: bool) -> (u16, String) {
    let mut config = ServeConfig::new(data);
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.tls = Some(TlsFiles {
        cert: pki.path("server.pem"),
        key: pki.path("server.key"),
        client_ca: client_ca.then(|| pki.path("ca.pem")),
    });
    let bound = bind(config).await.unwrap();
    let port = bound.local_addr().unwrap().port();
    tokio::spawn(bound.serve(std::future::pending()));
    let token = std::fs::read_to_string(data.join("operator.token")).unwrap();
    (port, token.trim().to_string())
}

async fn tls_channel(pki: &Pki, port: u16, client_cert: bool) -> Result<Channel, String> {
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pki.read("ca.pem")));
    if client_cert {
        tls = tls.identity(Identity::from_pem(
            pki.read("client.pem"),
            pki.read("client.key"),
        ));
    }
    Channel::from_shared(format!("https://localhost:{port}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .map_err(|err| format!("{err:?}"))
}

async fn start_run(channel: Channel, token: &str) -> (String, String) {
    let bearer = Bearer::new(Some(token)).unwrap();
    let started = RunServiceClient::new(InterceptedService::new(channel, bearer))
        .start_run(pb::StartRequest {
            task_id: "t".into(),
            agent_id: "a".into(),
            project_id: "p".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    (started.run.unwrap().id, started.worker_token)
}

async fn attach(channel: Channel, run_id: &str, token: &str) -> Result<(), tonic::Status> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(msg(In::Attach(pb::Attach {
        run_id: run_id.into(),
        worker_id: "w".into(),
        token: token.into(),
        workspace_root: "/work/repo".into(),
    })))
    .await
    .unwrap();
    let mut stream = WorkerServiceClient::new(channel)
        .session(ReceiverStream::new(rx))
        .await?
        .into_inner();
    match stream.message().await?.and_then(|m| m.message) {
        Some(pb::coordinator_message::Message::Attached(_)) => Ok(()),
        other => panic!("expected attached, got {other:?}"),
    }
}

// Multi-threaded: the CLI runs as a blocking child process while this runtime serves it.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_and_a_worker_talk_tls_and_a_plaintext_client_fails_cleanly() {
    let pki = Pki::new();
    let data = tempfile::tempdir().unwrap();
    let (port, admin) = tls_server(&pki, data.path(), false).await;

    let channel = tls_channel(&pki, port, false).await.unwrap();
    let (run_id, worker_token) = start_run(channel.clone(), &admin).await;
    attach(channel, &run_id, &worker_token).await.unwrap();

    let url = format!("https://localhost:{port}");
    let ca = pki.path("ca.pem");
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_runplane"))
            .args(args)
            .env_remove("RUNPLANE_TOKEN")
            .env_remove("RUNPLANE_CA_CERT")
            .output()
            .unwrap()
    };
    let listed = cli(&[
        "runs",
        "get",
        &run_id,
        "--server",
        &url,
        "--token",
        &admin,
        "--ca-cert",
        ca.to_str().unwrap(),
    ]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(String::from_utf8_lossy(&listed.stdout).contains("status:      running"));

    // https without a CA to check the server against is refused before connecting.
    let no_ca = cli(&["runs", "list", "--server", &url, "--token", &admin]);
    assert!(!no_ca.status.success());
    assert!(String::from_utf8_lossy(&no_ca.stderr).contains("pass --ca-cert"));

    // Plaintext HTTP/2 to the TLS port: an error, promptly, not a hang.
    let plain = format!("http://127.0.0.1:{port}");
    let attempt = tokio::time::timeout(Duration::from_secs(15), async {
        let channel = Channel::from_shared(plain).unwrap().connect().await?;
        RunServiceClient::new(channel)
            .list_runs(pb::ListRunsRequest::default())
            .await
            .map(drop)
            .map_err(|status| Box::new(status) as Box<dyn std::error::Error + Send + Sync>)
    })
    .await
    .expect("a plaintext client gets an answer, not a hang");
    assert!(attempt.is_err(), "a plaintext call to a TLS port must fail");
    let cli_plain = cli(&[
        "runs",
        "list",
        "--server",
        &format!("http://localhost:{port}"),
        "--token",
        &admin,
    ]);
    assert!(!cli_plain.status.success());
}

#[tokio::test]
async fn with_a_client_ca_a_worker_needs_a_client_certificate_and_operators_do_not() {
    let pki = Pki::new();
    let data = tempfile::tempdir().unwrap();
    let (port, admin) = tls_server(&pki, data.path(), true).await;

    // The operator connects without a certificate.
    let operator = tls_channel(&pki, port, false).await.unwrap();
    let (run_id, worker_token) = start_run(operator.clone(), &admin).await;

    // A worker with the right token but no certificate is refused.
    let err = attach(operator, &run_id, &worker_token).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("client certificate"), "{err:?}");

    // With its certificate it attaches.
    let worker = tls_channel(&pki, port, true).await.unwrap();
    attach(worker, &run_id, &worker_token).await.unwrap();
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_server_certificate_cannot_connect() {
    let pki = Pki::new();
    let stranger = Pki::new();
    let data = tempfile::tempdir().unwrap();
    let (port, _) = tls_server(&pki, data.path(), false).await;
    // `stranger`'s CA did not sign this server's certificate.
    let err = tls_channel(&stranger, port, false).await.unwrap_err();
    assert!(
        err.contains("certificate") || err.contains("Certificate"),
        "{err}"
    );
}
