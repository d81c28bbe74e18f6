//! Where one client of a one-master model is (`wakeups`, `rwqueue`), and how a release's
//! message reaches it.

use crate::scripts::effects::Wake;

/// Where one client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Phase {
    /// Not started (or not in this check).
    Idle,
    /// Its first round was refused; not yet subscribed.
    Refused,
    /// Subscribed (its place drawn), its cleanup not yet run; `woken` by a message that came
    /// meanwhile (kept for the wait after the cleanup, as a `Notify` keeps one).
    Subscribed {
        woken: bool,
    },
    /// Waiting for a message; `woken` once one for it came.
    Waiting {
        woken: bool,
    },
    Holding,
    /// A writer whose `DELIFEQ` missed: the release script comes next.
    ReleasingByScript,
    Done,
}

/// A script's publish reaching the clients (`phases`, by client id): the message names one
/// waiter, or nobody (every subscribed client).
pub(super) fn deliver(phases: &mut [Phase], wake: Option<Wake>) {
    let Some(wake) = wake else { return };
    for (c, phase) in phases.iter_mut().enumerate() {
        let named = match wake {
            Wake::One(w) => usize::from(w) == c,
            Wake::All => true,
        };
        if let (true, Phase::Subscribed { woken } | Phase::Waiting { woken }) = (named, phase) {
            *woken = true;
        }
    }
}
