//! Whether every master's fence counters are seeded for its current term, and seeding them on
//! request: what an operator checks before restarting the next master (`redquorum fence`).

use crate::Result;
use crate::api::redlock::RedLock;
use crate::core::node_id::NodeId;
use crate::errors::error::Error;
use crate::protocol::fence_sweep::{self, Record};
use crate::protocol::shared::ensure_runtime;

/// One master's fence seeding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Seeding {
    /// Every slot's fence counter on this master is seeded for the server's current term:
    /// fenced locks can be taken without it, and it can be restarted (with the others up).
    Seeded,
    /// Not seeded for the server's current term: it restarted, failed over or failed back,
    /// or was never seeded while a majority of the others were. Until it is, a fenced lock
    /// needs a majority of the *other* masters, and a fenced lock on a slot never used before
    /// needs every master: restart no other master now.
    NotSeeded,
    /// A Redis Cluster voter, looked at without seeding: no record of it is kept (`DESIGN.md`
    /// §5), so only [`RedLock::seed_fencing`], which looks at every slot, can tell.
    NotTracked,
    /// The master did not answer in time.
    Unreachable,
}

/// Every master's fence seeding ([`RedLock::fence_seeding`], [`RedLock::seed_fencing`]).
#[derive(Debug, Clone)]
pub struct FenceSeeding {
    masters: Vec<(NodeId, Seeding)>,
    slots_left: Option<usize>,
}

impl FenceSeeding {
    /// Each master, in the order the client lists them, and its seeding.
    pub fn masters(&self) -> &[(NodeId, Seeding)] {
        &self.masters
    }

    /// After [`RedLock::seed_fencing`]: how many slots some answering master is still not
    /// seeded for (0 when the seeding is complete). `None` after [`RedLock::fence_seeding`],
    /// which looks at no slot.
    pub fn slots_left(&self) -> Option<usize> {
        self.slots_left
    }

    /// Whether every master is [`Seeding::Seeded`]: any one of them can be restarted now
    /// and fenced locks go on with the others.
    pub fn is_complete(&self) -> bool {
        self.masters.iter().all(|(_, s)| *s == Seeding::Seeded)
            && self.slots_left.is_none_or(|left| left == 0)
    }
}

impl RedLock {
    /// Reads every master's fence seeding record (one request each): whether each master's
    /// fence counters are all seeded for the server's current term. Changes nothing.
    ///
    /// A fencing client seeds by itself, in the background, from its first fenced acquire
    /// on, and looks again every few seconds; this tells whether it is done, as an operator
    /// checks before restarting the next master of a rolling restart.
    ///
    /// # Errors
    /// [`Error::Config`] with [`ConfigError::NeedsTaggedKeys`](crate::ConfigError::NeedsTaggedKeys) in the shared key layout (no
    /// fencing there); [`Error::NoRuntime`] outside a tokio runtime. Unreachable masters are
    /// not an error: their entry says so.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn fence_seeding(&self) -> Result<FenceSeeding> {
        self.seeding(false).await
    }

    /// Seeds every slot's fence counter on every master that needs it, now, and says where
    /// each master stands. Seeding a slot needs a majority of masters already seeded for it,
    /// or every master up (a new deployment). About a second of work on each master when all
    /// are seeded already (16,384 small reads each).
    ///
    /// # Errors
    /// As [`fence_seeding`](Self::fence_seeding).
    ///
    /// # Cancel safety
    /// Cancel safe: a seeding stopped half-way leaves each slot seeded or as it was.
    ///
    /// ```no_run
    /// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
    /// let seeding = rl.seed_fencing().await?;
    /// if !seeding.is_complete() {
    ///     eprintln!("fencing is not seeded everywhere: restart no master yet");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn seed_fencing(&self) -> Result<FenceSeeding> {
        self.seeding(true).await
    }

    async fn seeding(&self, seed: bool) -> Result<FenceSeeding> {
        ensure_runtime()?;
        let shared = self.shared();
        shared
            .config
            .needs_tagged_keys("fencing tokens")
            .map_err(Error::Config)?;
        let scope = shared.sweep_scope();
        let (records, slots_left) = if seed {
            let swept = fence_sweep::sweep(&scope, true).await;
            (swept.records, Some(swept.slots_left))
        } else {
            (fence_sweep::records(&scope).await, None)
        };
        let masters = shared
            .nodes
            .iter()
            .zip(records)
            .map(|(node, record)| {
                let seeding = match record {
                    Record::Seeded => Seeding::Seeded,
                    Record::Stale(_) => Seeding::NotSeeded,
                    Record::NotKept => Seeding::NotTracked,
                    Record::Unknown => Seeding::Unreachable,
                };
                (node.id().clone(), seeding)
            })
            .collect();
        Ok(FenceSeeding {
            masters,
            slots_left,
        })
    }
}
