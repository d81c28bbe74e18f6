//! Loopback ports for test servers, handed out in turn by every process on the machine.
//!
//! Why not the kernel's `bind(127.0.0.1:0)`: it may hand back a port another test's server
//! held a moment ago. That test's clients, still reconnecting to the master it killed, then
//! reach this test's server and write to it. It happened: a fencing client of a test that had
//! killed a master swept the fence counters onto the port's next owner, another test's master,
//! which then held two counters where it expected one
//! (`fencing::a_late_grant_never_confirms_a_token_another_holder_has`, one clean-clone CI
//! run). No crate we found hands out ports across processes without reuse (`portpicker` and
//! its kind ask the kernel or pick at random), so this is ours.
//!
//! Every process takes ports from one cursor kept in a file under the temporary directory,
//! under an exclusive lock on that file, and moves it on: a port comes back only after the
//! whole range has been handed out, 10,000 ports, where a full test suite takes a few
//! thousand. The range lies below Linux's default ephemeral range (32768–60999), so the local
//! end of an outgoing connection does not take a test server's port either. A port still in
//! use (by anything) is skipped.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use nix::fcntl::{Flock, FlockArg};
use rand::RngExt;

/// The ports handed out: below the ephemeral range, and 10,000 of them so that a cluster-enabled
/// server's bus port (its port + 10,000, `RedisCluster`) is never one of them.
const RANGE: Range<u16> = 20_000..30_000;

/// A loopback port that was free a moment ago, and that no process on this machine was handed
/// by this crate in the last `RANGE.len()` ports it handed out.
///
/// Another process can take it before a server binds it: callers that start a server on it
/// retry on another port when the server exits at once.
///
/// # Errors
/// When the cursor's file cannot be opened, locked or written, or no port in the range is free.
pub fn free_port() -> io::Result<u16> {
    Ok(free_ports(1)?[0])
}

/// `count` distinct loopback ports, as [`free_port`] hands them out.
///
/// # Errors
/// As [`free_port`].
pub fn free_ports(count: usize) -> io::Result<Vec<u16>> {
    let path = cursor_path()?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| at(&path, e))?;
    // Released when `file` is dropped, on every path out of this function. (`File::lock` is
    // std's since 1.89, past our MSRV.)
    let mut file =
        Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| at(&path, errno.into()))?;
    let mut next = read_cursor(&mut file).map_err(|e| at(&path, e))?;
    // Hold every listener until all are chosen, so the ports are free together.
    let mut listeners = Vec::with_capacity(count);
    let mut tried = 0;
    while listeners.len() < count {
        if tried == RANGE.len() {
            return Err(io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("no {count} free loopback ports in {RANGE:?}"),
            ));
        }
        let port = next;
        next = if next + 1 == RANGE.end {
            RANGE.start
        } else {
            next + 1
        };
        tried += 1;
        if let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            listeners.push(listener);
        }
    }
    write_cursor(&mut file, next).map_err(|e| at(&path, e))?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// The cursor's file: one per user (a file another user created may not be writable).
fn cursor_path() -> io::Result<PathBuf> {
    // `/proc/self` belongs to the process's effective user.
    let uid = std::fs::metadata("/proc/self")?.uid();
    // Machine-wide, not in `TMPDIR`: tests give the processes they start a `TMPDIR` of their
    // own (the lab's soaks run side by side, each with one), and a cursor per `TMPDIR` let two
    // of them hand out the same ports at once (a soak's master failed with "Address already in
    // use" in a full run under load).
    let shared = std::path::Path::new("/tmp");
    let dir = if shared.is_dir() {
        shared.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    Ok(dir.join(format!("redquorum-testkit-ports-{uid}")))
}

/// The next port to hand out; a random one in the range when the file is new (or was not
/// written by this code), so that machines sharing nothing do not all start at one port.
fn read_cursor(file: &mut File) -> io::Result<u16> {
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text
        .trim()
        .parse()
        .ok()
        .filter(|port| RANGE.contains(port))
        .unwrap_or_else(|| rand::rng().random_range(RANGE)))
}

fn write_cursor(file: &mut File, next: u16) -> io::Result<()> {
    file.set_len(0)?;
    file.rewind()?;
    file.write_all(next.to_string().as_bytes())
}

fn at(path: &std::path::Path, error: io::Error) -> io::Error {
    io::Error::new(error.kind(), format!("{}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ports come back only after the range went round: two requests in a row share none,
    /// though the first one's listeners are closed before the second asks (which the kernel's
    /// `bind(0)` may hand out again at once).
    ///
    /// Mutation: asking the kernel (`bind((LOCALHOST, 0))`) instead of the cursor fails the
    /// range check; not moving the cursor on (`write_cursor` skipped) fails the disjointness.
    #[test]
    fn ports_are_not_handed_out_twice_in_a_row() {
        let first = free_ports(20).expect("ports");
        let second = free_ports(20).expect("ports");
        for port in first.iter().chain(&second) {
            assert!(RANGE.contains(port), "{port} is outside {RANGE:?}");
        }
        assert!(
            first.iter().all(|p| !second.contains(p)),
            "{first:?} and {second:?} share a port"
        );
    }

    /// Takers at once (each opening the file itself, as separate processes do) never get one
    /// port twice: the cursor moves under the file's lock.
    ///
    /// Mutation: without the lock (`Flock::lock` skipped), two takers read one cursor and
    /// hand out the same ports.
    #[test]
    fn takers_at_once_never_share_a_port() {
        let takers: Vec<_> = (0..8)
            .map(|_| {
                std::thread::spawn(|| {
                    (0..20)
                        .flat_map(|_| free_ports(5).expect("ports"))
                        .collect::<Vec<u16>>()
                })
            })
            .collect();
        let mut all: Vec<u16> = takers
            .into_iter()
            .flat_map(|t| t.join().expect("taker"))
            .collect();
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "a port was handed out twice");
    }
}
