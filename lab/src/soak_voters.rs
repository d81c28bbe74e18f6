//! The masters a soak runs against, and the faults its nemesis causes on them: the lab's local
//! masters (`DevCluster`: killed, paused, restarted, their clocks jumped); for the network
//! nemesis, five masters each alone in a network namespace of its own
//! (`redquorum_testkit::NetnsServer`), whose links a partition takes down; or, for failovers,
//! five Sentinel groups (`redquorum_testkit::SentinelGroup`), each a master, its replica and a
//! sentinel, whose failover the nemesis forces.

use redquorum_testkit::{DevCluster, NetnsServer, SentinelGroup, ServerKind};

use crate::error::LabError;

/// The masters of one soak: five voters, and the fenced store the holders write to.
#[derive(Debug)]
pub(crate) enum Voters {
    /// The lab's local masters: the five voters, then the store.
    Local(DevCluster),
    /// Five voters in namespaces of their own, reached over one veth pair each (loopback is
    /// not theirs), and the store local: a partition cuts voters, never the store.
    Isolated {
        voters: Vec<NetnsServer>,
        store: DevCluster,
    },
    /// Five Sentinel groups as the voters (each reached through its sentinel), and the store
    /// local.
    Sentinel {
        groups: Vec<SentinelGroup>,
        store: DevCluster,
    },
}

impl Voters {
    /// Five voters and a store for the nemesis `kinds`: under libfaketime for clock jumps, in
    /// network namespaces for `cut`, as Sentinel groups for `failover`.
    ///
    /// # Errors
    /// When a master does not start, libfaketime or Valkey is missing for jumps, or (for
    /// `cut`) no namespace can be made here (no root, no `ip`): the error says why.
    pub(crate) async fn start(kinds: &[&str], voters: usize) -> Result<Self, LabError> {
        if kinds.contains(&"failover") {
            let (groups, store) = with_a_local_store(
                move || {
                    // The harness's groups panic when a server does not start: that ends
                    // here. Started side by side: each waits until its sentinel has seen the
                    // replica.
                    std::thread::scope(|scope| {
                        let starting: Vec<_> = (0..voters)
                            .map(|i| {
                                // As `deploy/` asks: `min-replicas-to-write 1` (a lag of 1 s)
                                // and two replicas, so the new master of a failover has the
                                // other replica at once.
                                scope.spawn(move || {
                                    let name = format!("soak{i}");
                                    SentinelGroup::start_with_replicas(&name, 1, true, 2)
                                })
                            })
                            .collect();
                        starting
                            .into_iter()
                            .map(|s| s.join().map_err(|_| "a Sentinel group did not start"))
                            .collect::<Result<Vec<_>, _>>()
                            .map_err(str::to_owned)
                    })
                },
                |e| format!("soak: the Sentinel groups did not start: {e}"),
            )
            .await?;
            return Ok(Self::Sentinel { groups, store });
        }
        if kinds.contains(&"cut") {
            let kind = ServerKind::for_dev()
                .map_err(LabError::new)?
                .unwrap_or(ServerKind::Redis);
            let (voters, store) = with_a_local_store(
                move || {
                    (0..voters)
                        .map(|_| NetnsServer::start(kind))
                        .collect::<Result<Vec<_>, String>>()
                },
                |why| {
                    format!(
                        "soak: the `cut` fault runs the voters in network namespaces, which \
                         cannot be made here ({why}): it needs root and `ip` (iproute2)"
                    )
                },
            )
            .await?;
            return Ok(Self::Isolated { voters, store });
        }
        let cluster = if crate::soak::jumps_clocks(kinds) {
            crate::masters::start_with_fake_clocks("soak", voters + 1).await?
        } else {
            crate::masters::start("soak", voters + 1).await?
        };
        Ok(Self::Local(cluster))
    }

    /// The voters' URLs, in order.
    pub(crate) fn voter_urls(&self, voters: usize) -> Vec<String> {
        match self {
            Self::Local(cluster) => cluster.urls().into_iter().take(voters).collect(),
            Self::Isolated { voters, .. } => voters.iter().map(NetnsServer::url).collect(),
            Self::Sentinel { groups, .. } => groups.iter().map(SentinelGroup::url).collect(),
        }
    }

    /// The running voters' numbers and URLs: every voter in a namespace (the nemesis heals
    /// each cut and resumes each pause before it ends), the local ones not paused or down.
    pub(crate) fn running(&self, voters: usize) -> Vec<(usize, String)> {
        match self {
            Self::Local(cluster) => cluster
                .nodes
                .iter()
                .take(voters)
                .filter(|n| n.state() == redquorum_testkit::NodeState::Running)
                .map(|n| (n.index, n.url()))
                .collect(),
            Self::Isolated { voters, .. } => {
                voters.iter().map(NetnsServer::url).enumerate().collect()
            }
            // Each group's master now (a failover moves it).
            Self::Sentinel { groups, .. } => groups
                .iter()
                .map(|g| g.data().server(g.master_index()).url())
                .enumerate()
                .collect(),
        }
    }

    /// The fenced store's URL.
    pub(crate) fn store_url(&self, voters: usize) -> String {
        match self {
            Self::Local(cluster) => cluster.urls().get(voters).cloned().unwrap_or_default(),
            Self::Isolated { store, .. } | Self::Sentinel { store, .. } => {
                store.urls().first().cloned().unwrap_or_default()
            }
        }
    }

    fn local(&self, fault: &str) -> Result<&DevCluster, LabError> {
        match self {
            Self::Local(cluster) => Ok(cluster),
            Self::Isolated { .. } | Self::Sentinel { .. } => Err(LabError::new(format!(
                "soak: `{fault}` is done to the lab's local masters only"
            ))),
        }
    }

    fn isolated(&self, i: usize, fault: &str) -> Result<&NetnsServer, LabError> {
        match self {
            Self::Isolated { voters, .. } => voters
                .get(i)
                .ok_or_else(|| LabError::new(format!("soak: no voter {i}"))),
            Self::Local(_) | Self::Sentinel { .. } => Err(LabError::new(format!(
                "soak: `{fault}` needs the voters in network namespaces"
            ))),
        }
    }

    /// The process id of what `pause` stops: the voter's server, or its group's master now.
    fn pid(&self, i: usize) -> Result<u32, LabError> {
        let pid = match self {
            Self::Local(_) => None,
            Self::Isolated { voters, .. } => voters.get(i).and_then(NetnsServer::pid),
            Self::Sentinel { groups, .. } => groups
                .get(i)
                .and_then(|g| g.data().server(g.master_index()).process_id()),
        };
        pid.ok_or_else(|| LabError::new(format!("soak: voter {i} has no process to pause")))
    }

    /// Forces group `i`'s failover and waits until its replica is the master; says which
    /// server is the master before and after (ports). What the old master granted and had
    /// not yet replicated is gone: a voter that forgot its grants, as an empty restart is
    /// (`DESIGN.md` §6).
    pub(crate) fn failover(&self, i: usize) -> Result<String, LabError> {
        match self {
            Self::Sentinel { groups, .. } => {
                let group = groups
                    .get(i)
                    .ok_or_else(|| LabError::new(format!("soak: no voter {i}")))?;
                let port = |index: usize| group.data().server(index).port();
                let before = port(group.master_index());
                let after = port(group.failover());
                Ok(format!("master moved from port {before} to {after}"))
            }
            Self::Local(_) | Self::Isolated { .. } => Err(LabError::new(
                "soak: `failover` needs the voters in Sentinel groups",
            )),
        }
    }

    pub(crate) fn kill(&self, i: usize) -> Result<(), LabError> {
        Ok(self.local("kill")?.kill(i)?)
    }

    pub(crate) fn restart(&self, i: usize) -> Result<(), LabError> {
        Ok(self.local("restart")?.restart(i)?)
    }

    pub(crate) fn jump_clock(&self, i: usize, offset: &str) -> Result<(), LabError> {
        Ok(self.local("jump")?.jump_clock(i, offset)?)
    }

    /// SIGSTOP, on any kind of master (a Sentinel group's master now).
    pub(crate) fn pause(&self, i: usize) -> Result<(), LabError> {
        match self {
            Self::Local(cluster) => Ok(cluster.pause(i)?),
            Self::Isolated { .. } | Self::Sentinel { .. } => {
                signal(self.pid(i)?, nix::sys::signal::SIGSTOP)
            }
        }
    }

    /// SIGCONT, on any kind of master.
    pub(crate) fn resume(&self, i: usize) -> Result<(), LabError> {
        match self {
            Self::Local(cluster) => Ok(cluster.resume(i)?),
            Self::Isolated { .. } | Self::Sentinel { .. } => {
                signal(self.pid(i)?, nix::sys::signal::SIGCONT)
            }
        }
    }

    /// Takes voter `i`'s link down: no packet passes either way, and nobody is told. Checked:
    /// a new connection to it must then fail.
    pub(crate) fn cut(&self, i: usize) -> Result<(), LabError> {
        let voter = self.isolated(i, "cut")?;
        voter.cut();
        if answers(&voter.url(), CHECK_TIMEOUT) {
            return Err(LabError::new(format!(
                "soak: voter {i} still answers after its link was cut"
            )));
        }
        Ok(())
    }

    /// Brings voter `i`'s link up again. Checked: it must then answer.
    pub(crate) fn heal(&self, i: usize) -> Result<(), LabError> {
        let voter = self.isolated(i, "cut")?;
        voter.heal();
        let deadline = std::time::Instant::now() + HEAL_TIMEOUT;
        while !answers(&voter.url(), CHECK_TIMEOUT) {
            if std::time::Instant::now() > deadline {
                return Err(LabError::new(format!(
                    "soak: voter {i} does not answer after its link came up"
                )));
            }
        }
        Ok(())
    }

    /// Every master in service again: resumed, started, its link up.
    ///
    /// # Errors
    /// When a master cannot be signalled or started.
    pub(crate) fn restore(&self) -> Result<(), LabError> {
        match self {
            Self::Local(cluster) => crate::masters::restore(cluster),
            Self::Isolated { voters, .. } => {
                for (i, voter) in voters.iter().enumerate() {
                    voter.heal();
                    self.resume(i)?;
                }
                Ok(())
            }
            Self::Sentinel { groups, .. } => {
                for (i, group) in groups.iter().enumerate() {
                    self.resume(i)?;
                    group.settle();
                }
                Ok(())
            }
        }
    }

    /// Stops the local masters; the voters in namespaces are killed, and their namespaces
    /// deleted, when this is dropped.
    ///
    /// # Errors
    /// When a local master cannot be stopped.
    pub(crate) fn down(&self) -> Result<(), LabError> {
        match self {
            Self::Local(cluster) => Ok(cluster.down()?),
            Self::Isolated { store, .. } | Self::Sentinel { store, .. } => Ok(store.down()?),
        }
    }
}

/// How long the checks of a cut and a heal wait for one answer.
const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(200);
/// How long a healed voter has to answer again.
const HEAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether the server at `url` answers a `PING` on a new connection within `timeout`.
fn answers(url: &str, timeout: std::time::Duration) -> bool {
    redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(timeout))
        .and_then(|mut con| {
            con.set_read_timeout(Some(timeout))?;
            redis::cmd("PING").query::<String>(&mut con)
        })
        .is_ok()
}

/// The fenced store, started locally, and the voters `start` makes (off the runtime's threads:
/// it blocks while their servers come up); the store is stopped again when they fail, with
/// the error `explain` makes of why.
async fn with_a_local_store<V: Send + 'static>(
    start: impl FnOnce() -> Result<V, String> + Send + 'static,
    explain: impl FnOnce(String) -> String,
) -> Result<(V, DevCluster), LabError> {
    let store = crate::masters::start("soak", 1).await?;
    let started = tokio::task::spawn_blocking(start)
        .await
        .map_err(|e| e.to_string())
        .and_then(|voters| voters);
    match started {
        Ok(voters) => Ok((voters, store)),
        Err(why) => {
            let _ = store.down();
            Err(LabError::new(explain(why)))
        }
    }
}

/// Sends `signal` to the process `pid` (a voter's server, which this soak started).
fn signal(pid: u32, signal: nix::sys::signal::Signal) -> Result<(), LabError> {
    let raw = i32::try_from(pid).map_err(|_| LabError::new(format!("soak: pid {pid}")))?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), signal)
        .map_err(|e| LabError::new(format!("soak: {signal} to the voter {pid}: {e}")))
}
