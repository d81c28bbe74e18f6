//! CPU time of processes, from `/proc`: to split a benchmark's cost between the client and
//! the servers.

use std::time::Duration;

/// The kernel's `USER_HZ`: `/proc/<pid>/stat` counts CPU time in these ticks (100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// User plus system CPU time of `pid` (`"self"` for this process) so far; zero when the
/// process is gone or `/proc` is unreadable.
pub(crate) fn used(pid: &str) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // The fields after the parenthesised command name: state is the first, utime the 12th,
    // stime the 13th.
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 1000 / TICKS_PER_SECOND)
}

/// CPU time used by this process and by a set of server processes over an interval.
#[derive(Debug)]
pub(crate) struct Meter {
    servers: Vec<String>,
    client_start: Duration,
    servers_start: Vec<Duration>,
}

impl Meter {
    /// Starts measuring this process and the processes `servers`.
    pub(crate) fn start(servers: &[u32]) -> Self {
        let servers: Vec<String> = servers.iter().map(u32::to_string).collect();
        let servers_start = servers.iter().map(|p| used(p)).collect();
        Self {
            client_start: used("self"),
            servers,
            servers_start,
        }
    }

    /// CPU time used since [`start`](Self::start): (this process, the servers together).
    pub(crate) fn stop(&self) -> (Duration, Duration) {
        let (client, each) = self.stop_each();
        (client, each.iter().sum())
    }

    /// CPU time used since [`start`](Self::start): (this process, each server).
    pub(crate) fn stop_each(&self) -> (Duration, Vec<Duration>) {
        let each = self
            .servers
            .iter()
            .zip(&self.servers_start)
            .map(|(p, start)| used(p).saturating_sub(*start))
            .collect();
        (used("self").saturating_sub(self.client_start), each)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_uses_cpu_and_a_missing_one_none() {
        let start = used("self");
        let mut x = 0u64;
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(150) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        assert!(used("self") > start, "150 ms of spinning shows in /proc");
        assert_eq!(used("999999999"), Duration::ZERO);
    }
}
