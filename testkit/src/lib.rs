//! Real local `redis-server` masters for redquorum's tests, benches, lab and dev cluster.
//!
//! redquorum proves its claims against real servers, never mocks: this crate starts them on
//! free 127.0.0.1 ports and breaks them the ways a production master breaks.
//!
//! - [`Cluster`]: N independent masters owned by a test. Kill (SIGKILL), pause (SIGSTOP),
//!   resume and restart any of them; inspect their keys. Every server is ended, by its pid,
//!   when the `Cluster` is dropped, also when the test panics. The methods panic on failure:
//!   they are for tests.
//! - [`SentinelGroup`]: a master, its replica and sentinels watching them, with a forced
//!   failover, for Sentinel-resolved voters.
//! - [`RedisCluster`]: cluster-enabled masters joined into one Redis Cluster, every slot
//!   assigned (the ground for Cluster voters).
//! - [`Proxy`]: an in-process TCP proxy in front of one server that adds latency, black-holes
//!   or resets connections (for machines without `tc netem` or iptables).
//! - [`DevCluster`]: masters that outlive the process that started them, recorded in a state
//!   directory (`redquorum dev up`/`down`), with typed errors instead of panics.
//! - [`NetnsServer`]: a server alone in a network namespace this crate creates, whose link a
//!   test takes down: a real partition (Linux, as root).
//!
//! - [`baseline`]: the raw floor any Redlock client must do, on the `redis` crate alone, which
//!   the lab's bench and the criterion benches (`benches/redlock.rs`) measure redquorum against.
//!
//! Only loopback addresses are used, or addresses inside the network namespaces this crate
//! created, and a signal goes only to a process this crate started.
//! `redis-server` must be on `PATH` (`sudo apt-get install -y redis-server` on Debian/Ubuntu),
//! and `valkey-server` too for the tests that run Valkey ([`ServerKind`]; `bash .ci/test`
//! installs it).

pub mod baseline;
mod cluster;
mod dev;
mod netns;
mod ports;
mod proxy;
mod redis_cluster;
mod sentinel;
mod server;
mod wait;

pub use cluster::{Cluster, Persistence, Server, TlsFiles};
pub use dev::{DevCluster, DevError, DevNode, NodeState};
pub use netns::NetnsServer;
pub use ports::{free_port, free_ports};
pub use proxy::{Fault, Proxy};
pub use redis_cluster::RedisCluster;
pub use sentinel::SentinelGroup;
pub use server::{DEV_SERVER_VARIABLE, ServerKind, TEST_SERVER_VARIABLE};
pub use wait::eventually;

/// Whether a lock key's `value` is `token`'s: as its holder wrote it, or as a waiter marked it
/// (a token written `n-…` reads `w-…` once someone waits for its release; redquorum's
/// `DESIGN.md` §3).
pub fn holds_token(value: &[u8], token: &str) -> bool {
    if value == token.as_bytes() {
        return true;
    }
    match (token.strip_prefix("n-"), value.strip_prefix(b"w-")) {
        (Some(rest), Some(marked)) => marked == rest.as_bytes(),
        _ => false,
    }
}

/// libfaketime's preload library (Debian's `libfaketime`, which `.ci/ensure-tools` installs):
/// under it a process sees its wall clock moved, its monotonic clock left alone.
///
/// # Panics
/// When it is not installed, with the command that installs it: never skip silently.
pub fn libfaketime() -> std::path::PathBuf {
    find_libfaketime().expect(LIBFAKETIME_MISSING)
}

/// What to do when [`find_libfaketime`] finds nothing.
pub const LIBFAKETIME_MISSING: &str =
    "libfaketime is installed (apt-get install libfaketime; .ci/ensure-tools does)";

/// The environment that runs a server under `libfaketime` (the preload library) with its wall
/// clock offset by what the file `clock` says, read again at every clock call, and its
/// monotonic clock real: `PX` expiries and `TIME` follow the file ([`write_clock`]).
pub(crate) fn fake_clock_env(
    libfaketime: &std::path::Path,
    clock: &std::path::Path,
) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), libfaketime.display().to_string()),
        (
            "FAKETIME_TIMESTAMP_FILE".into(),
            clock.display().to_string(),
        ),
        ("FAKETIME_NO_CACHE".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}

/// Writes a libfaketime offset file at once as a whole: a new file renamed over the old, since
/// the server reads it at every clock call and could read a file being rewritten in place
/// (empty: no offset) between its truncation and the write.
pub(crate) fn write_clock(path: &std::path::Path, offset: &str) -> std::io::Result<()> {
    let next = path.with_extension("next");
    std::fs::write(&next, offset)?;
    std::fs::rename(next, path)
}

/// libfaketime's preload library, if it is installed (see [`libfaketime`]).
pub fn find_libfaketime() -> Option<std::path::PathBuf> {
    std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|dir| dir.path().join("faketime/libfaketime.so.1"))
        .find(|path| path.exists())
}
