//! What every way of starting a server needs: the binary and free loopback ports.

use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;

/// The `redis-server` on `PATH`, if there is one.
pub fn redis_server_binary() -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|p| p.join("redis-server"))
        .find(|p| p.is_file())
}

/// A loopback port that was free a moment ago.
///
/// Another process can take it before a server binds it: callers that start a server on it
/// retry on another port when the server exits at once.
///
/// # Errors
/// When the kernel hands out no port.
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// `count` distinct loopback ports that were free a moment ago (see [`free_port`]).
///
/// # Errors
/// When the kernel hands out fewer ports.
pub fn free_ports(count: usize) -> io::Result<Vec<u16>> {
    // Hold every listener until all are chosen, so the kernel hands out distinct ports.
    let listeners = (0..count)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}
