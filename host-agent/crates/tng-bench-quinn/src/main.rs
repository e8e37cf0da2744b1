//! `quinn-bulk`: the quinn side of the loopback benchmark. One QUIC connection, one bidirectional stream, the server
//! sending for a given duration (the shape of `tng perf client --mode bulk`), TLS 1.3 with a self-signed certificate.
//!
//! The client does not authenticate the server: it measures the cost of an encrypted transfer, not of a PKI.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// How much the server writes per call: large enough that the call overhead does not count.
const CHUNK: usize = 64 * 1024;
const ALPN: &[u8] = b"tng-bench";

#[derive(Parser)]
#[command(about = "quinn bulk-transfer peer for the tng loopback benchmark")]
struct Cli {
    #[command(subcommand)]
    role: Role,
}

#[derive(Subcommand)]
enum Role {
    /// Serve bulk downloads to any number of clients, one after another or at once, until killed.
    Server {
        #[arg(long)]
        listen: SocketAddr,
    },
    /// Download for `duration` seconds and print {"goodput_mbps", "bytes_received", "duration_s"} as JSON.
    Client {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value_t = 5.0)]
        duration: f64,
    },
}

fn main() -> Result<()> {
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| anyhow::anyhow!("a rustls crypto provider was already installed"))?;
    // The runtime tng runs on (one thread), so that the benchmark compares the two stacks, not two runtimes.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    match Cli::parse().role {
        Role::Server { listen } => runtime.block_on(serve(listen)),
        Role::Client { connect, duration } => {
            if !(duration > 0.0 && duration.is_finite()) {
                bail!("--duration must be a positive number of seconds, got {duration}");
            }
            let report = runtime.block_on(download(connect, Duration::from_secs_f64(duration)))?;
            println!("{report}");
            Ok(())
        }
    }
}

async fn serve(listen: SocketAddr) -> Result<()> {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
    let cert = CertificateDer::from(certified.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der()));
    let mut tls = rustls::ServerConfig::builder().with_no_client_auth().with_single_cert(vec![cert], key)?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let config = quinn::ServerConfig::with_crypto(Arc::new(QuicServerConfig::try_from(tls)?));
    let endpoint = quinn::Endpoint::server(config, listen).with_context(|| format!("binding {listen}"))?;
    eprintln!("quinn-bulk server on {listen}");
    while let Some(incoming) = endpoint.accept().await {
        tokio::spawn(async move {
            if let Err(error) = send_bulk(incoming).await {
                eprintln!("quinn-bulk server: {error:#}");
            }
        });
    }
    Ok(())
}

/// Reads the duration the client asks for (8 bytes, milliseconds, big-endian), then writes until it has passed.
async fn send_bulk(incoming: quinn::Incoming) -> Result<()> {
    let connection = incoming.await?;
    let (mut send, mut recv) = connection.accept_bi().await?;
    let mut request = [0u8; 8];
    recv.read_exact(&mut request).await?;
    let until = Instant::now() + Duration::from_millis(u64::from_be_bytes(request));
    let chunk = vec![0x5au8; CHUNK];
    while Instant::now() < until {
        if send.write_all(&chunk).await.is_err() {
            // The client closed first: its measurement is over.
            return Ok(());
        }
    }
    send.finish()?;
    connection.closed().await;
    Ok(())
}

async fn download(connect: SocketAddr, duration: Duration) -> Result<serde_json::Value> {
    let mut tls = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyServer))
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse()?)?;
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(tls)?)));
    let connection = endpoint.connect(connect, "localhost")?.await.context("quinn handshake")?;
    let (mut send, mut recv) = connection.open_bi().await?;
    let started = Instant::now();
    send.write_all(&(duration.as_millis() as u64).to_be_bytes()).await?;
    send.finish()?;
    let mut received = 0u64;
    let mut buffer = vec![0u8; CHUNK];
    while let Some(n) = recv.read(&mut buffer).await? {
        received += n as u64;
        if started.elapsed() >= duration {
            break;
        }
    }
    let elapsed = started.elapsed().min(duration).as_secs_f64();
    connection.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    Ok(serde_json::json!({
        "goodput_mbps": received as f64 * 8.0 / elapsed / 1e6,
        "bytes_received": received,
        "duration_s": elapsed,
    }))
}

/// Accepts any certificate but still checks the handshake signature, so the transfer is encrypted and keyed as in
/// a real deployment.
#[derive(Debug)]
struct AcceptAnyServer;

impl ServerCertVerifier for AcceptAnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
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
        let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, &algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, &algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::ring::default_provider().signature_verification_algorithms.supported_schemes()
    }
}
