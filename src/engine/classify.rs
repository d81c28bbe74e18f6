//! How every reply classifies into a node outcome: total over any reply shape, so a server
//! that answers something unexpected is a failed vote, never a panic.

use std::time::Duration;

use redis::Value;

use crate::core::report::NodeOutcome;
use crate::errors::node_error::NodeError;
use crate::scripts::ScriptReply;

/// The reply to `SET key token NX PX ttl`: `OK` is a grant, nil another owner's key (its
/// ttl unknown until the cleanup asks). Total, like [`classify`].
pub(crate) fn classify_set_if_absent(
    reply: Value,
    done: &NodeOutcome,
) -> (NodeOutcome, Option<Grant>) {
    match reply {
        Value::Okay => (done.clone(), None),
        Value::Nil => (NodeOutcome::HeldByOther { expires_in: None }, None),
        other => (unexpected(&other), None),
    }
}

/// What one master's grant of a fenced acquire says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Grant {
    /// The fence counter after the grant's increment.
    pub(crate) counter: u64,
    /// The master's re-seed epoch at the grant, which its confirm must name
    /// (`scripts::CONFIRM_FENCE`).
    pub(crate) epoch: u64,
}

/// What a script's reply says about the node, and what a fenced acquire's grant returned.
/// Total: any reply shape, including ones no script of ours sends, is an outcome (an unexpected
/// one is a failed vote), never a panic.
pub(crate) fn classify(reply: Value, done: &NodeOutcome) -> (NodeOutcome, Option<Grant>) {
    match reply {
        Value::Int(code) => (classify_code(code, done), None),
        Value::Array(items) => match items.as_slice() {
            [Value::Int(-8), Value::Int(permits), Value::Int(0)] => match u32::try_from(*permits) {
                Ok(permits) => (NodeOutcome::PermitCountDiffers(permits), None),
                Err(_) => (unexpected(&Value::Array(items)), None),
            },
            [Value::Int(-1), Value::Int(counter), Value::Int(epoch)] => {
                match (u64::try_from(*counter), u64::try_from(*epoch)) {
                    (Ok(counter), Ok(epoch)) => (done.clone(), Some(Grant { counter, epoch })),
                    _ => (unexpected(&Value::Array(items)), None),
                }
            }
            _ => (unexpected(&Value::Array(items)), None),
        },
        other => (unexpected(&other), None),
    }
}

fn unexpected(reply: &Value) -> NodeOutcome {
    let mut shown = format!("{reply:?}");
    truncate_on_char_boundary(&mut shown, SHOWN_REPLY_LEN);
    NodeOutcome::Failed(NodeError::UnexpectedReply(shown))
}

pub(crate) fn classify_code(code: i64, done: &NodeOutcome) -> NodeOutcome {
    match ScriptReply::from_code(code) {
        Some(ScriptReply::Done) => done.clone(),
        Some(ScriptReply::Missing) => NodeOutcome::Missing,
        Some(ScriptReply::Readded) => NodeOutcome::Readded,
        Some(ScriptReply::Unseeded) => NodeOutcome::Failed(NodeError::Unseeded),
        Some(ScriptReply::SeededSinceGrant) => NodeOutcome::Failed(NodeError::SeededSinceGrant),
        Some(ScriptReply::Foreign { expires_in_ms }) => NodeOutcome::HeldByOther {
            expires_in: expires_in_ms.map(Duration::from_millis),
        },
        None => NodeOutcome::Failed(NodeError::UnexpectedReply(code.to_string())),
    }
}

/// How much of an unexpected reply a report keeps, in bytes.
const SHOWN_REPLY_LEN: usize = 120;

fn truncate_on_char_boundary(text: &mut String, max: usize) {
    if text.len() > max {
        let cut = (0..=max)
            .rev()
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        text.truncate(cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    fn random_value(rng: &mut StdRng, depth: u32) -> Value {
        let kinds = if depth == 0 { 8 } else { 12 };
        match rng.random_range(0..kinds) {
            0 => Value::Nil,
            1 | 2 => Value::Int(match rng.random_range(0..4) {
                0 => rng.random_range(-5..5),
                1 => i64::MIN,
                2 => i64::MAX,
                _ => rng.random(),
            }),
            3 => Value::BulkString(
                (0..rng.random_range(0..300))
                    .map(|_| rng.random())
                    .collect(),
            ),
            4 => Value::SimpleString("OK\r\n\u{fffd}é".repeat(rng.random_range(0..50))),
            5 => Value::Okay,
            6 => Value::Double(f64::from_bits(rng.random())),
            7 => Value::Boolean(rng.random()),
            8 => Value::Array(
                (0..rng.random_range(0..4))
                    .map(|_| random_value(rng, depth - 1))
                    .collect(),
            ),
            9 => Value::Set(
                (0..rng.random_range(0..4))
                    .map(|_| random_value(rng, depth - 1))
                    .collect(),
            ),
            10 => Value::Map(
                (0..rng.random_range(0..3))
                    .map(|_| (random_value(rng, depth - 1), random_value(rng, depth - 1)))
                    .collect(),
            ),
            _ => Value::Attribute {
                data: Box::new(random_value(rng, depth - 1)),
                attributes: vec![(random_value(rng, depth - 1), random_value(rng, depth - 1))],
            },
        }
    }

    /// Property: every reply shape classifies without panicking; only the integers our scripts
    /// send count as an answer, everything else is a failed vote with a bounded description.
    #[test]
    fn every_reply_shape_classifies() {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        for _ in 0..100_000 {
            let reply = random_value(&mut rng, 3);
            let expected = match &reply {
                Value::Int(-1) => "done",
                Value::Int(-2) => "missing",
                Value::Int(-5) => "readded",
                Value::Int(-6) => "unseeded",
                Value::Int(-7) => "seeded since grant",
                Value::Int(n) if *n >= 0 || *n == -3 => "held",
                Value::Array(items) => match items.as_slice() {
                    [Value::Int(-1), Value::Int(f), Value::Int(e)] if *f >= 0 && *e >= 0 => "done",
                    _ => "failed",
                },
                _ => "failed",
            };
            let (outcome, fence) = classify(reply.clone(), &NodeOutcome::Granted);
            assert_eq!(
                fence.is_some(),
                matches!(&reply, Value::Array(_)) && expected == "done"
            );
            let got = match &outcome {
                NodeOutcome::Granted => "done",
                NodeOutcome::Missing => "missing",
                NodeOutcome::Readded => "readded",
                NodeOutcome::Failed(NodeError::Unseeded) => "unseeded",
                NodeOutcome::Failed(NodeError::SeededSinceGrant) => "seeded since grant",
                NodeOutcome::HeldByOther { .. } => "held",
                NodeOutcome::Failed(NodeError::UnexpectedReply(shown)) => {
                    assert!(shown.len() <= SHOWN_REPLY_LEN);
                    "failed"
                }
                other => panic!("{reply:?} became {other:?}"),
            };
            assert_eq!(got, expected, "{reply:?}");
        }
    }

    /// Property: every reply to the plain acquire classifies without panicking; only `OK` is
    /// a grant, only nil a holder, anything else a failed vote.
    #[test]
    fn every_set_if_absent_reply_classifies() {
        let mut rng = StdRng::seed_from_u64(0x5e7);
        for _ in 0..100_000 {
            let reply = random_value(&mut rng, 3);
            let expected = match &reply {
                Value::Okay => "done",
                Value::Nil => "held",
                _ => "failed",
            };
            let (outcome, fence) = classify_set_if_absent(reply.clone(), &NodeOutcome::Granted);
            assert!(fence.is_none());
            let got = match &outcome {
                NodeOutcome::Granted => "done",
                NodeOutcome::HeldByOther { expires_in: None } => "held",
                NodeOutcome::Failed(NodeError::UnexpectedReply(shown)) => {
                    assert!(shown.len() <= SHOWN_REPLY_LEN);
                    "failed"
                }
                other => panic!("{reply:?} became {other:?}"),
            };
            assert_eq!(got, expected, "{reply:?}");
        }
    }

    #[test]
    fn held_replies_carry_the_remaining_ttl() {
        let (held, _) = classify(Value::Int(1500), &NodeOutcome::Released);
        assert!(
            matches!(held, NodeOutcome::HeldByOther { expires_in: Some(d) } if d == Duration::from_millis(1500))
        );
        let (forever, _) = classify(Value::Int(-3), &NodeOutcome::Released);
        assert!(matches!(
            forever,
            NodeOutcome::HeldByOther { expires_in: None }
        ));
        assert!(matches!(
            classify(Value::Int(-1), &NodeOutcome::Released),
            (NodeOutcome::Released, None)
        ));
        let fenced = classify(
            Value::Array(vec![Value::Int(-1), Value::Int(41), Value::Int(3)]),
            &NodeOutcome::Granted,
        );
        assert!(matches!(
            fenced,
            (
                NodeOutcome::Granted,
                Some(Grant {
                    counter: 41,
                    epoch: 3
                })
            )
        ));
        for bad in [[-1, -5, 0], [-1, 5, -1]] {
            let negative = classify(
                Value::Array(bad.iter().map(|n| Value::Int(*n)).collect()),
                &NodeOutcome::Granted,
            );
            assert!(matches!(negative, (NodeOutcome::Failed(_), None)));
        }
        // A fenced grant without its epoch (`{-1, f}`) is not a grant.
        let old = classify(
            Value::Array(vec![Value::Int(-1), Value::Int(41)]),
            &NodeOutcome::Granted,
        );
        assert!(matches!(old, (NodeOutcome::Failed(_), None)));
    }

    #[test]
    fn truncation_respects_utf8() {
        let mut s = "é".repeat(100);
        truncate_on_char_boundary(&mut s, 121);
        assert_eq!(s.len(), 120);
        let mut short = String::from("abc");
        truncate_on_char_boundary(&mut short, 120);
        assert_eq!(short, "abc");
    }
}
