//! What `run`, `elect` and `observe` tell the operator, one event per line on stderr: a
//! sentence by default, a JSON object with `--json` for log pipelines (the command's own
//! stdout stays untouched; `observe`, whose events are its output, writes them on stdout).
//!
//! Every JSON event has `ts` (RFC 3339, UTC, milliseconds) and `event`, and all but `error`
//! a `resource`; the rest depends on the event (see [`Event`]).

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Map, Value, json};

static JSON: OnceLock<bool> = OnceLock::new();
static QUIET: OnceLock<bool> = OnceLock::new();

/// Chooses the format for the whole process: JSON lines, or sentences; `quiet` (`-q`) keeps
/// only the sentences of what went wrong. Call once, first.
pub(crate) fn init(json: bool, quiet: bool) {
    let _ = JSON.set(json);
    let _ = QUIET.set(quiet);
}

/// True when events (and log lines) are JSON.
pub(crate) fn json() -> bool {
    JSON.get().copied().unwrap_or(false)
}

/// Something that happened to a lock or an election.
#[derive(Debug)]
pub(crate) enum Event<'a> {
    /// `run` is still waiting for a busy lock (every 5 s).
    Waiting {
        resource: &'a str,
        waited: Duration,
        /// Who holds it and for how long, or why that cannot be told.
        holder: String,
    },
    /// The lock was taken.
    Acquired {
        resource: &'a str,
        fencing_token: Option<u64>,
        /// `run --permits`: which permit.
        permit: Option<u32>,
        valid_until: Instant,
    },
    /// An extension moved the deadline (no sentence: one every ttl/3 is noise on a terminal).
    Renewed {
        resource: &'a str,
        valid_until: Instant,
    },
    /// The lock or leadership (of `term`) is lost, or about to lapse unrenewed: the command
    /// is stopped.
    Lost {
        resource: &'a str,
        term: Option<u64>,
        why: String,
    },
    /// The command ignored the stop signal: SIGKILL now.
    Killing {
        resource: &'a str,
        after: Duration,
        signal: String,
    },
    /// The command and every process it started have exited.
    Exited { resource: &'a str, code: u8 },
    /// The command exited before `--min-hold` ran out: the lock is kept until `until` (`None`:
    /// a hold too long to count, until a signal).
    Holding {
        resource: &'a str,
        until: Option<Instant>,
    },
    /// The lock was released (after the command exited).
    Released { resource: &'a str },
    /// Releasing failed; the keys expire with their ttl.
    ReleaseFailed { resource: &'a str, error: String },
    /// Ctrl-Z: the command and redquorum stop together.
    Suspended { resource: &'a str },
    /// Continued after a stop, with the lock lapsed: the command will not run again.
    LapsedWhileSuspended { resource: &'a str },
    /// `elect` campaigns.
    Campaigning { resource: &'a str, id: &'a str },
    /// `elect` won a term.
    Elected {
        resource: &'a str,
        id: &'a str,
        term: u64,
        valid_until: Instant,
    },
    /// `elect` gave its term up (its command exited by itself).
    Resigned { resource: &'a str, term: u64 },
    /// Resigning failed; the term ends at its ttl.
    ResignFailed { resource: &'a str, error: String },
    /// The leader as a majority sees it changed (`elect` while campaigning, `observe`). While
    /// campaigning, "nobody leads" also stands for "too few masters answered to tell".
    Leader {
        resource: &'a str,
        /// The leader's value and term, or `None` while nobody leads.
        leader: Option<(String, u64)>,
        /// Why there is no leader to show: nobody leads, or too few masters answered to tell.
        unknown: Option<String>,
    },
    /// Who holds the lock as a majority sees it changed (`observe --holders`): the exclusive
    /// holder, or how many readers share it, or nobody.
    Holders {
        resource: &'a str,
        /// The exclusive holder (a token's first digits), if one holds.
        writer: Option<String>,
        /// How many readers hold it (0 unless readers hold).
        readers: usize,
        /// Why no holder can be told: too few masters answered, or no majority agrees.
        unknown: Option<String>,
    },
    /// redquorum ends with an error (the last line before the exit code).
    Error { code: u8, message: String },
}

impl Event<'_> {
    fn name(&self) -> &'static str {
        match self {
            Self::Waiting { .. } => "waiting",
            Self::Acquired { .. } => "acquired",
            Self::Renewed { .. } => "renewed",
            Self::Lost { .. } => "lost",
            Self::Killing { .. } => "killing",
            Self::Exited { .. } => "exited",
            Self::Holding { .. } => "holding",
            Self::Released { .. } => "released",
            Self::ReleaseFailed { .. } => "release_failed",
            Self::Suspended { .. } => "suspended",
            Self::LapsedWhileSuspended { .. } => "lapsed_while_suspended",
            Self::Campaigning { .. } => "campaigning",
            Self::Elected { .. } => "elected",
            Self::Resigned { .. } => "resigned",
            Self::ResignFailed { .. } => "resign_failed",
            Self::Leader { .. } => "leader",
            Self::Holders { .. } => "holders",
            Self::Error { .. } => "error",
        }
    }

    /// Whether the event is a failure the operator must hear of even with `-q`.
    fn went_wrong(&self) -> bool {
        matches!(
            self,
            Self::Lost { .. }
                | Self::Killing { .. }
                | Self::ReleaseFailed { .. }
                | Self::LapsedWhileSuspended { .. }
                | Self::ResignFailed { .. }
                | Self::Error { .. }
        )
    }

    /// The event as one JSON object (without the timestamp).
    fn fields(&self) -> Map<String, Value> {
        let mut map = Map::new();
        map.insert("event".into(), self.name().into());
        let more = match self {
            Self::Waiting {
                resource,
                waited,
                holder,
            } => json!({"resource": resource, "waited_ms": millis(*waited), "holder": holder}),
            Self::Acquired {
                resource,
                fencing_token,
                permit,
                valid_until,
            } => json!({
                "resource": resource,
                "fencing_token": fencing_token,
                "permit": permit,
                "valid_ms": remaining_ms(*valid_until),
            }),
            Self::Renewed {
                resource,
                valid_until,
            } => json!({"resource": resource, "valid_ms": remaining_ms(*valid_until)}),
            Self::Lost {
                resource,
                term,
                why,
            } => json!({"resource": resource, "term": term, "why": why}),
            Self::Killing {
                resource,
                after,
                signal,
            } => json!({"resource": resource, "after_ms": millis(*after), "ignored": signal}),
            Self::Exited { resource, code } => json!({"resource": resource, "code": code}),
            Self::Holding { resource, until } => {
                json!({"resource": resource, "for_ms": until.map(remaining_ms)})
            }
            Self::Released { resource }
            | Self::Suspended { resource }
            | Self::LapsedWhileSuspended { resource } => json!({"resource": resource}),
            Self::ReleaseFailed { resource, error } | Self::ResignFailed { resource, error } => {
                json!({"resource": resource, "error": error})
            }
            Self::Campaigning { resource, id } => json!({"resource": resource, "id": id}),
            Self::Elected {
                resource,
                id,
                term,
                valid_until,
            } => json!({
                "resource": resource,
                "id": id,
                "term": term,
                "valid_ms": remaining_ms(*valid_until),
            }),
            Self::Resigned { resource, term } => json!({"resource": resource, "term": term}),
            Self::Leader {
                resource,
                leader,
                unknown,
            } => json!({
                "resource": resource,
                "leader": leader.as_ref().map(|(value, _)| value),
                "term": leader.as_ref().map(|(_, term)| term),
                "unknown": unknown,
            }),
            Self::Holders {
                resource,
                writer,
                readers,
                unknown,
            } => json!({
                "resource": resource,
                "writer": writer,
                "readers": readers,
                "unknown": unknown,
            }),
            Self::Error { code, message } => json!({"code": code, "message": message}),
        };
        if let Value::Object(more) = more {
            map.extend(more);
        }
        map
    }

    /// The sentence for a terminal or a plain log, if this event has one.
    fn sentence(&self) -> Option<String> {
        Some(match self {
            Self::Waiting {
                resource,
                waited,
                holder,
            } => format!(
                "waiting for {resource} ({}s so far): {holder}",
                waited.as_secs()
            ),
            Self::Acquired { .. } | Self::Renewed { .. } | Self::Released { .. } => return None,
            Self::Lost {
                resource,
                term,
                why,
            } => match term {
                Some(term) => {
                    format!("lost leadership of term {term} ({why}); stopping the command")
                }
                None => format!("lost the lock on {resource} ({why}); stopping the command"),
            },
            Self::Killing { after, signal, .. } => {
                format!("the command did not exit {after:.1?} after {signal}; sending SIGKILL")
            }
            Self::Exited { .. } => return None,
            Self::Holding { resource, until } => match until {
                Some(until) => format!(
                    "the command finished; holding {resource} for another {:.1?} (--min-hold)",
                    until.saturating_duration_since(Instant::now())
                ),
                None => format!("the command finished; holding {resource} (--min-hold)"),
            },
            Self::ReleaseFailed { error, .. } => {
                format!("the command finished, but releasing the lock failed: {error}")
            }
            Self::Suspended { .. } => "stopped with the command; the lock lapses unless resumed \
                                       within its deadline"
                .to_owned(),
            Self::LapsedWhileSuspended { .. } => {
                "the lock lapsed while stopped; the command will not run again".to_owned()
            }
            Self::Campaigning { resource, id } => format!("{id} campaigning for {resource}"),
            Self::Elected {
                resource, id, term, ..
            } => format!("{id} leads {resource} in term {term}"),
            Self::Resigned { term, .. } => {
                format!("the command exited; resigned term {term}")
            }
            Self::ResignFailed { error, .. } => {
                format!("resigning failed (the term ends at its ttl): {error}")
            }
            Self::Leader {
                resource,
                leader,
                unknown,
            } => match (leader, unknown) {
                (Some((value, term)), _) => format!("{resource}: {value} leads in term {term}"),
                (None, Some(why)) => format!("{resource}: leader unknown ({why})"),
                (None, None) => format!("{resource}: nobody leads"),
            },
            Self::Holders {
                resource,
                writer,
                readers,
                unknown,
            } => match (unknown, writer, readers) {
                (Some(why), _, _) => format!("{resource}: holders unknown ({why})"),
                (None, Some(writer), _) => format!("{resource}: held by {writer} (exclusive)"),
                (None, None, 1) => format!("{resource}: held by 1 reader (shared)"),
                (None, None, 0) => format!("{resource}: free"),
                (None, None, n) => format!("{resource}: held by {n} readers (shared)"),
            },
            Self::Error { message, .. } => message.clone(),
        })
    }

    /// The line to print: JSON with a timestamp, or `redquorum: sentence`.
    pub(crate) fn line(&self, json: bool) -> Option<String> {
        if json {
            let mut map = Map::new();
            map.insert("ts".into(), timestamp().into());
            map.extend(self.fields());
            Some(Value::Object(map).to_string())
        } else {
            self.sentence().map(|s| format!("redquorum: {s}"))
        }
    }
}

/// Prints `event` on stderr in the process's format.
pub(crate) fn emit(event: Event<'_>) {
    // JSON events are data for a pipeline, not chatter: `-q` leaves them.
    if !json() && QUIET.get().copied().unwrap_or(false) && !event.went_wrong() {
        return;
    }
    if let Some(line) = event.line(json()) {
        write_line(&mut std::io::stderr().lock(), line);
    }
}

/// Prints `event` on stdout (for `observe`, whose events are its output).
pub(crate) fn print(event: Event<'_>) {
    let json = json();
    let line = if json {
        event.line(true)
    } else {
        event.sentence()
    };
    if let Some(line) = line {
        write_line(&mut std::io::stdout().lock(), line);
    }
}

/// Writes `line` and its newline with one write, so that the command, which shares stderr,
/// cannot split a JSON line; a closed pipe (`observe | head -1`, a dead log collector) is no
/// reason to panic and leave a lock behind, so write errors are ignored.
pub(crate) fn write_line(out: &mut impl std::io::Write, mut line: String) {
    line.push('\n');
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
}

fn timestamp() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn remaining_ms(deadline: Instant) -> u64 {
    millis(deadline.saturating_duration_since(Instant::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_carry_a_timestamp_the_event_and_its_fields() {
        let line = Event::Exited {
            resource: "job",
            code: 3,
        }
        .line(true)
        .expect("every event has a JSON line");
        let value: Value = serde_json::from_str(&line).expect("one JSON object");
        assert_eq!(value["event"], "exited");
        assert_eq!(value["resource"], "job");
        assert_eq!(value["code"], 3);
        assert!(
            humantime::parse_rfc3339(value["ts"].as_str().expect("ts")).is_ok(),
            "{line}"
        );
    }

    #[test]
    fn sentences_keep_quiet_about_routine_events() {
        let renewed = Event::Renewed {
            resource: "job",
            valid_until: Instant::now(),
        };
        assert_eq!(renewed.line(false), None);
        let lost = Event::Lost {
            resource: "job",
            term: None,
            why: "gone".into(),
        };
        assert_eq!(
            lost.line(false).as_deref(),
            Some("redquorum: lost the lock on job (gone); stopping the command")
        );
    }
}
