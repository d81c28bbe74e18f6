//! Which rustls crypto provider the TLS connections use (only with a TLS feature).
//!
//! The redis crate builds its rustls `ClientConfig` with `ClientConfig::builder()`, which takes
//! the process-level provider and, when none is installed, picks the one compiled into rustls.
//! An application that pulls aws-lc-rs beside our ring (or the other way round) has both
//! compiled in, and then that pick panics at the first TLS connection. So when a client with a
//! `rediss://` node is built and the application has installed no provider, we install the one
//! our feature names; a provider the application installed itself is never replaced.

/// Makes sure a process-level rustls provider is installed before any TLS connection.
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_some() {
        return;
    }
    #[cfg(feature = "tls")]
    let provider = rustls::crypto::ring::default_provider();
    #[cfg(not(feature = "tls"))]
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    // Err only when another thread installed one in between: theirs stands, as it should.
    if provider.install_default().is_ok() {
        tracing::debug!("installed the process-level rustls crypto provider");
    }
}
