//! The guard: a small process between redquorum and the command it supervises, so the command
//! can never outlive redquorum, even when redquorum is SIGKILLed (the OOM killer, `kill -9`).
//!
//! redquorum starts `redquorum __guard --parent PID -- COMMAND…` (the same binary) as the
//! leader of a new process group. The guard
//! 1. asks the kernel for SIGUSR1 when its parent dies (`PR_SET_PDEATHSIG`), then checks that
//!    its parent is still the redquorum that started it, closing the race in which redquorum
//!    died before the request was made;
//! 2. becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`), so every process the command
//!    starts is reparented to it rather than to init when its own parent exits;
//! 3. starts the command in its own group and waits until the command *and every process it
//!    started* have exited, then exits with the command's code (128 + signal if a signal
//!    ended it).
//!
//! On SIGUSR1 (redquorum is gone, so is the lock's renewal) it SIGKILLs its whole group, itself
//! included. SIGTERM, SIGINT, SIGHUP and SIGQUIT reach it only as part of its group, so the
//! command got them too: the guard ignores them and waits.
//!
//! With `--foreground` the guard and the command stay in redquorum's process group (the
//! terminal's foreground group when run from a shell), so the command can read the terminal.
//! A group signal would then reach redquorum too, so the guard works process by process: it
//! relays SIGTERM to the command (as its `--kill-signal`), and on SIGUSR2 (redquorum's "kill now") or SIGUSR1 it
//! SIGKILLs every process descended from it, found in `/proc` (as a subreaper it is the
//! ancestor of every process the command started, orphans included).
//!
//! Why a re-executed process and not a `pre_exec` hook: `pre_exec` is `unsafe`, and the crate
//! forbids unsafe code; nix's `prctl` wrappers are safe. Why redquorum starts it from a thread
//! of its own ([`spawn_from_lasting_thread`]): the kernel sends the parent-death signal when
//! the *thread* that forked the child exits, and tokio's worker and blocking threads may exit
//! while redquorum lives on.
//!
//! Limits: a process that leaves the group (`setsid`) is still waited for, but the group
//! SIGKILL does not reach it.

use std::ffi::OsString;
use std::io;
use std::sync::OnceLock;
use std::sync::mpsc;

use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{Pid, getpgrp, getppid};
use tokio::signal::unix::{SignalKind, signal};

use crate::exit;

/// The hidden subcommand that runs the guard.
pub(crate) const SUBCOMMAND: &str = "__guard";

/// Runs the guard around `command`; returns the exit code for the guard's process.
pub(crate) fn guard(parent: u32, foreground: bool, stop_signal: i32, command: &[OsString]) -> u8 {
    let stop_signal = Signal::try_from(stop_signal).unwrap_or(Signal::SIGTERM);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("redquorum: cannot start the guard: {e}");
            return exit::FAILURE;
        }
    };
    match runtime.block_on(guarded(parent, foreground, stop_signal, command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("redquorum: guard: {e}");
            // Whatever was started must not run on unguarded.
            kill_everything(foreground);
            exit::FAILURE
        }
    }
}

/// SIGKILLs everything the guard started: its whole group, or (foreground, where the group
/// is redquorum's) every descendant, one by one.
fn kill_everything(foreground: bool) {
    if foreground {
        kill_descendants(Pid::this());
    } else {
        let _ = killpg(getpgrp(), Signal::SIGKILL);
    }
}

/// SIGKILLs every living process descended from `root`, again until none is left (one may
/// fork while we look; its children then belong to us, the subreaper).
fn kill_descendants(root: Pid) {
    for _ in 0..100 {
        let found = descendants(root);
        if found.is_empty() {
            return;
        }
        for pid in found {
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
        }
    }
}

/// The living (not zombie) processes descended from `root`, read from `/proc/PID/stat`.
fn descendants(root: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    // (pid, parent) of every living process.
    let processes: Vec<(i32, i32)> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // "pid (comm) state ppid …": the name may hold spaces and parentheses.
            let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
            let state = fields.next()?;
            let parent = fields.next()?.parse().ok()?;
            (state != "Z" && state != "X").then_some((pid, parent))
        })
        .collect();
    let mut found = vec![root.as_raw()];
    let mut next = 0;
    while let Some(parent) = found.get(next).copied() {
        found.extend(
            processes
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(pid, _)| *pid),
        );
        next += 1;
    }
    found.into_iter().skip(1).map(Pid::from_raw).collect()
}

async fn guarded(
    parent: u32,
    foreground: bool,
    stop_signal: Signal,
    command: &[OsString],
) -> io::Result<u8> {
    // Handlers first: a signal that comes before them would end the guard with nothing
    // started, which is fine; one that comes after is handled.
    let mut parent_died = signal(SignalKind::user_defined1())?;
    let mut kill_now = signal(SignalKind::user_defined2())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut quit = signal(SignalKind::quit())?;
    prctl::set_pdeathsig(Signal::SIGUSR1)?;
    if u32::try_from(getppid().as_raw()).ok() != Some(parent) {
        // redquorum died before the request took effect: never start the command.
        return Ok(exit::LOST);
    }
    prctl::set_child_subreaper(true)?;
    let Some((program, args)) = command.split_first() else {
        return Ok(exit::USAGE);
    };
    let child = match std::process::Command::new(program).args(args).spawn() {
        Ok(child) => child,
        Err(e) => {
            let name = program.to_string_lossy();
            return Ok(match e.kind() {
                io::ErrorKind::NotFound => {
                    eprintln!("redquorum: {name}: command not found");
                    exit::NOT_FOUND
                }
                _ => {
                    eprintln!("redquorum: {name}: {e}");
                    exit::NOT_EXECUTABLE
                }
            });
        }
    };
    let command_pid = i32::try_from(child.id()).map(Pid::from_raw).ok();
    // Reaped below with waitpid(-1), together with every orphan the command leaves.
    drop(child);
    let mut reaper = tokio::task::spawn_blocking(move || reap_all(command_pid));
    loop {
        tokio::select! {
            code = &mut reaper => return code.map_err(io::Error::other),
            _ = parent_died.recv() => kill_everything(foreground),
            _ = kill_now.recv() => kill_everything(foreground),
            // In its own group, the command got this as the guard did; in redquorum's group
            // (foreground), redquorum sent it to the guard alone, for the command.
            _ = terminate.recv() => {
                if let (true, Some(pid)) = (foreground, command_pid) {
                    let _ = nix::sys::signal::kill(pid, stop_signal);
                }
            }
            // The whole group got these (from the terminal, or as a group): the command
            // decides what to do with them.
            _ = interrupt.recv() => {}
            _ = hangup.recv() => {}
            _ = quit.recv() => {}
        }
    }
}

/// Waits for every child (the command, and the orphans reparented to us) until none is left;
/// returns the command's exit code as a shell reports it.
fn reap_all(command: Option<Pid>) -> u8 {
    let mut code = exit::FAILURE;
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, status)) if Some(pid) == command => {
                code = u8::try_from(status & 0xff).unwrap_or(exit::FAILURE);
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if Some(pid) == command => {
                code = u8::try_from(128 + signal as i32).unwrap_or(exit::FAILURE);
            }
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return code, // ECHILD: nobody left
        }
    }
}

/// A request to the spawning thread: a command to start, and where to send the result.
type SpawnRequest = (
    tokio::process::Command,
    tokio::sync::oneshot::Sender<io::Result<tokio::process::Child>>,
);

/// Starts `command` from a thread that lives as long as redquorum (see the module docs).
///
/// # Cancel safety
/// Cancel safe in that the command is started or not; if the future is dropped after the
/// thread started it, the child handle is dropped and the process runs on unsupervised, so
/// callers do not drop it.
pub(crate) async fn spawn_from_lasting_thread(
    command: tokio::process::Command,
) -> io::Result<tokio::process::Child> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    let runtime = tokio::runtime::Handle::current();
    let spawner = SPAWNER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel::<SpawnRequest>();
        let started = std::thread::Builder::new()
            .name("redquorum-spawner".into())
            .spawn(move || {
                let _entered = runtime.enter();
                // Ends only with the process: the sender is never dropped.
                for (mut command, reply) in incoming {
                    let _ = reply.send(command.spawn());
                }
            });
        if let Err(e) = started {
            eprintln!("redquorum: cannot start the spawning thread: {e}");
        }
        requests
    });
    let (reply, result) = tokio::sync::oneshot::channel();
    spawner
        .send((command, reply))
        .map_err(|_| io::Error::other("the spawning thread is gone"))?;
    result
        .await
        .map_err(|_| io::Error::other("the spawning thread is gone"))?
}
