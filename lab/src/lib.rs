//! redquorum's lab: what the project runs to show and to measure the library, kept out of the
//! `redquorum` command that operators install.
//!
//! - [`demo()`]: three candidates elect a leader on five local masters while a nemesis kills,
//!   pauses and restarts masters; a live timeline, then a summary (`bash .ci/demo`).
//! - [`bench()`]: the performance table, every figure next to the raw baseline
//!   (`redquorum_testkit::baseline`) measured in the same run on the same masters.
//! - [`scale()`]: what Redis Cluster voters buy: throughput and CPU per pair with standalone
//!   and Cluster voters, in one run.
//! - [`contend()`]: one lock handed around between separate processes, optionally next to
//!   another client's workers on the same masters.
//! - [`soak()`]: holders of the fenced lock (or of a read-write lock, a semaphore, an
//!   election) in separate processes under a seeded nemesis for as long as it is given,
//!   every hold checked against the ground truth.

mod bench;
mod contend;
mod counts;
mod cpu;
mod demo;
mod error;
mod masters;
mod monotonic;
mod report;
mod scale;
mod soak;
mod soak_plot;
mod soak_voters;
mod stop;

pub use bench::bench;
pub use contend::{Contention, Worker, contend, worker};
pub use demo::demo;
pub use error::LabError;
pub use scale::scale;
pub use soak::{Primitive, Soak, SoakWorker, nemesis_kinds, soak, soak_worker};
