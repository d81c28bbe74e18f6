//! The masters an experiment starts for itself (memory-only, on free ports, under the
//! system's temporary directory), and putting every master back in service.

use std::path::PathBuf;

use redquorum_testkit::{DevCluster, DevError, NodeState, ServerKind};

use crate::error::LabError;

/// Starts `count` memory-only masters for the experiment `name` (their state under
/// `$TMPDIR/redquorum-<name>-<pid>`), on `redis-server`, or on the server
/// `REDQUORUM_DEV_SERVER` names. Stop them with `DevCluster::down`.
///
/// # Errors
/// When the server is missing or a master does not start.
pub(crate) async fn start(name: &str, count: usize) -> Result<DevCluster, LabError> {
    let kind = ServerKind::for_dev()
        .map_err(LabError::new)?
        .unwrap_or(ServerKind::Redis);
    start_in(name, move |dir| {
        DevCluster::start_memory_only(dir, count, kind)
    })
    .await
}

/// As [`start`], on Valkey masters whose wall clocks can be jumped
/// (`DevCluster::jump_clock`), each under libfaketime, whatever `REDQUORUM_DEV_SERVER` says:
/// Debian's `redis-server` does not start under libfaketime.
///
/// # Errors
/// When libfaketime or `valkey-server` is missing, or a master does not start.
pub(crate) async fn start_with_fake_clocks(
    name: &str,
    count: usize,
) -> Result<DevCluster, LabError> {
    let libfaketime = redquorum_testkit::find_libfaketime()
        .ok_or_else(|| LabError::new(redquorum_testkit::LIBFAKETIME_MISSING))?;
    start_in(name, move |dir| {
        DevCluster::start_memory_only_with_fake_clocks(dir, count, &libfaketime)
    })
    .await
}

/// Runs `start` (which blocks while the servers come up) off the runtime's threads, with the
/// experiment `name`'s state directory, `$TMPDIR/redquorum-<name>-<pid>`.
async fn start_in(
    name: &str,
    start: impl FnOnce(PathBuf) -> Result<DevCluster, DevError> + Send + 'static,
) -> Result<DevCluster, LabError> {
    let dir = std::env::temp_dir().join(format!("redquorum-{name}-{}", std::process::id()));
    let cluster = tokio::task::spawn_blocking(move || start(dir))
        .await
        .map_err(|e| LabError::new(e.to_string()))??;
    Ok(cluster)
}

/// Every master of `cluster` running again: the paused resumed, the dead started.
///
/// # Errors
/// When a master cannot be signalled or started.
pub(crate) fn restore(cluster: &DevCluster) -> Result<(), LabError> {
    for node in &cluster.nodes {
        match node.state() {
            NodeState::Paused => cluster.resume(node.index)?,
            NodeState::Down => cluster.restart(node.index)?,
            NodeState::Running => {}
        }
    }
    Ok(())
}
