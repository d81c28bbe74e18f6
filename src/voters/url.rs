//! The URL forms of a node with several servers (`redis+sentinel://`, `redis+cluster://`):
//! their host lists, how they are shown, and their errors.

use std::fmt;

use redis::{ConnectionAddr, RedisError};

/// `host:port,host:port…`, an IPv6 host in brackets.
pub(super) fn write_addresses(
    f: &mut fmt::Formatter<'_>,
    servers: &[redis::ConnectionInfo],
) -> fmt::Result {
    for (i, server) in servers.iter().enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        match server.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. }
                if host.contains(':') && !host.starts_with('[') =>
            {
                write!(f, "[{host}]:{port}")?;
            }
            other => write!(f, "{other}")?,
        }
    }
    Ok(())
}

/// `redis://` URLs for a comma-separated list of `host[:port]` (`[v6][:port]`), each with
/// `userinfo` (`user:password@`, or empty) and `default_port` where it names none.
pub(super) fn redis_urls(hosts: &str, userinfo: &str, default_port: u16) -> Vec<String> {
    hosts
        .split(',')
        .filter(|host| !host.is_empty())
        .map(|host| {
            let has_port = match host.strip_prefix('[') {
                Some(v6) => v6.contains("]:"),
                None => host.contains(':'),
            };
            if has_port {
                format!("redis://{userinfo}{host}")
            } else {
                format!("redis://{userinfo}{host}:{default_port}")
            }
        })
        .collect()
}

pub(super) fn invalid(what: &'static str) -> RedisError {
    RedisError::from((redis::ErrorKind::InvalidClientConfig, what))
}
