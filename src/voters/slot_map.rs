//! Which master of a Redis Cluster serves which hash slot, as `CLUSTER SLOTS` tells it and
//! `MOVED` redirections correct it.
//!
//! A Cluster voter routes each request by the hash slot of its key (every key of one resource
//! shares the slot of its hash tag, see `crate::core::resource`). The map is only a routing hint:
//! the server that gets a request for a slot it does not serve answers `MOVED` without running
//! it, so a stale map costs a redirection, never a wrong vote.

use std::sync::Arc;

use redis::Value;

/// How many hash slots a Redis Cluster has.
pub(crate) const SLOT_COUNT: usize = 16_384;

/// A master's place: `host:port`, as the cluster announces it (an IPv6 host unbracketed).
pub(crate) type ShardAddress = Arc<str>;

/// No master serves this slot (yet).
const UNSERVED: u16 = u16::MAX;

/// The master of every slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotMap {
    /// The masters named anywhere in the map, in order of first appearance.
    masters: Vec<ShardAddress>,
    /// For each slot, its master's index in `masters`, or [`UNSERVED`].
    owners: Vec<u16>,
}

impl Default for SlotMap {
    fn default() -> Self {
        Self {
            masters: Vec::new(),
            owners: vec![UNSERVED; SLOT_COUNT],
        }
    }
}

/// Why a `CLUSTER SLOTS` reply was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected CLUSTER SLOTS reply: {0}")]
pub(crate) struct BadSlots(&'static str);

impl SlotMap {
    /// Reads a `CLUSTER SLOTS` reply given by the server at `asked_host`: each entry is
    /// `[first slot, last slot, [master host, master port, …], replicas…]`. An empty host
    /// means the server that answered (as Redis documents it); a master whose endpoint is
    /// unknown (`?`) serves nothing in the map.
    ///
    /// # Errors
    /// A reply of another shape, or a slot out of range.
    pub(crate) fn parse(reply: &Value, asked_host: &str) -> Result<Self, BadSlots> {
        let Value::Array(entries) = reply else {
            return Err(BadSlots("not an array"));
        };
        let mut map = Self::default();
        for entry in entries {
            let Value::Array(parts) = entry else {
                return Err(BadSlots("an entry that is not an array"));
            };
            let (Some(first), Some(last), Some(Value::Array(master))) =
                (parts.first(), parts.get(1), parts.get(2))
            else {
                return Err(BadSlots("an entry without slots and master"));
            };
            let (first, last) = (slot(first)?, slot(last)?);
            if first > last {
                return Err(BadSlots("a slot range that ends before it starts"));
            }
            // A NULL host: the cluster announces no endpoint
            // (`cluster-preferred-endpoint-type unknown-endpoint`), as an empty one.
            let host = match master.first() {
                Some(Value::Nil) => Some(""),
                other => other.and_then(text),
            };
            let (Some(host), Some(Value::Int(port))) = (host, master.get(1)) else {
                return Err(BadSlots("a master without host and port"));
            };
            let port = u16::try_from(*port).map_err(|_| BadSlots("a port out of range"))?;
            if host == "?" {
                continue;
            }
            let host = if host.is_empty() { asked_host } else { host };
            map.assign(first..=last, &format!("{host}:{port}"));
        }
        Ok(map)
    }

    /// The master serving `slot`, if any.
    pub(crate) fn owner(&self, slot: u16) -> Option<&ShardAddress> {
        let index = *self.owners.get(usize::from(slot))?;
        self.masters.get(usize::from(index))
    }

    /// Records that `slot` moved to `master` (a `MOVED` answer).
    pub(crate) fn moved(&mut self, slot: u16, master: &str) {
        self.assign(slot..=slot, master);
    }

    /// Whether no slot is served at all (nothing known yet).
    pub(crate) fn is_empty(&self) -> bool {
        self.owners.iter().all(|owner| *owner == UNSERVED)
    }

    /// Every master that serves at least one slot.
    pub(crate) fn masters(&self) -> Vec<ShardAddress> {
        let mut serving = vec![false; self.masters.len()];
        for owner in &self.owners {
            if let Some(flag) = serving.get_mut(usize::from(*owner)) {
                *flag = true;
            }
        }
        self.masters
            .iter()
            .zip(serving)
            .filter(|(_, serves)| *serves)
            .map(|(master, _)| master.clone())
            .collect()
    }

    fn assign(&mut self, slots: std::ops::RangeInclusive<u16>, master: &str) {
        let index = match self.masters.iter().position(|m| &**m == master) {
            Some(index) => index,
            None => {
                self.masters.push(Arc::from(master));
                self.masters.len() - 1
            }
        };
        // At most SLOT_COUNT distinct masters can be named by slots, far below u16::MAX.
        let index = u16::try_from(index).unwrap_or(UNSERVED);
        for slot in slots {
            if let Some(owner) = self.owners.get_mut(usize::from(slot)) {
                *owner = index;
            }
        }
    }
}

/// Splits `host:port` (the host possibly an unbracketed or bracketed IPv6 address).
pub(crate) fn host_and_port(address: &str) -> Option<(&str, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host, port.parse().ok()?))
}

fn slot(value: &Value) -> Result<u16, BadSlots> {
    match value {
        Value::Int(n) => u16::try_from(*n)
            .ok()
            .filter(|n| usize::from(*n) < SLOT_COUNT)
            .ok_or(BadSlots("a slot out of range")),
        _ => Err(BadSlots("a slot that is not a number")),
    }
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn entry(first: i64, last: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(first),
            Value::Int(last),
            Value::Array(vec![bulk(host), Value::Int(port), bulk("nodeid")]),
            // A replica, never routed to.
            Value::Array(vec![bulk("10.0.0.9"), Value::Int(7999), bulk("replica")]),
        ])
    }

    /// Mutation: an inclusive range read as exclusive (`first..last`) leaves slot 5460
    /// unserved; the replica taken for the master routes slot 0 to 10.0.0.9.
    #[test]
    fn every_slot_goes_to_its_ranges_master() {
        let reply = Value::Array(vec![
            entry(0, 5460, "127.0.0.1", 7000),
            entry(5461, 10922, "", 7001),
            entry(10923, 16383, "::1", 7002),
        ]);
        let map = SlotMap::parse(&reply, "127.0.0.2").expect("parses");
        assert_eq!(map.owner(0).map(|m| &**m), Some("127.0.0.1:7000"));
        assert_eq!(map.owner(5460).map(|m| &**m), Some("127.0.0.1:7000"));
        assert_eq!(map.owner(5461).map(|m| &**m), Some("127.0.0.2:7001"));
        assert_eq!(map.owner(16383).map(|m| &**m), Some("::1:7002"));
        assert_eq!(map.owner(16384), None);
        assert_eq!(map.masters().len(), 3);
        assert!(!map.is_empty());
        assert_eq!(host_and_port("::1:7002"), Some(("::1", 7002)));
        assert_eq!(host_and_port("[::1]:7002"), Some(("::1", 7002)));
        assert_eq!(host_and_port("127.0.0.1"), None);
    }

    /// Mutation: `moved` assigning the whole range of the old owner moves slots that did not
    /// move; forgetting a master that no longer serves keeps it in `masters`.
    #[test]
    fn a_moved_slot_changes_that_slot_only() {
        let reply = Value::Array(vec![entry(0, 16383, "127.0.0.1", 7000)]);
        let mut map = SlotMap::parse(&reply, "x").expect("parses");
        map.moved(42, "127.0.0.1:7001");
        assert_eq!(map.owner(42).map(|m| &**m), Some("127.0.0.1:7001"));
        assert_eq!(map.owner(41).map(|m| &**m), Some("127.0.0.1:7000"));
        assert_eq!(map.owner(43).map(|m| &**m), Some("127.0.0.1:7000"));
        let mut all = SlotMap::default();
        assert!(all.is_empty() && all.masters().is_empty());
        all.moved(1, "a:1");
        all.moved(1, "b:2");
        assert_eq!(all.masters(), vec![Arc::<str>::from("b:2")]);
    }

    /// Mutation: a NULL host rejected as a bad reply: every refresh of such a cluster fails.
    #[test]
    fn a_null_host_is_the_server_that_answered() {
        let reply = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(16383),
            Value::Array(vec![Value::Nil, Value::Int(7000)]),
        ])]);
        let map = SlotMap::parse(&reply, "10.0.0.5").expect("parses");
        assert_eq!(map.owner(7).map(|m| &**m), Some("10.0.0.5:7000"));
    }

    #[test]
    fn unknown_endpoints_serve_nothing_and_bad_replies_are_errors() {
        let reply = Value::Array(vec![entry(0, 100, "?", 7000)]);
        let map = SlotMap::parse(&reply, "x").expect("parses");
        assert_eq!(map.owner(0), None);
        assert!(map.is_empty());
        for bad in [
            Value::Int(1),
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![entry(5, 4, "h", 1)]),
            Value::Array(vec![entry(0, 16384, "h", 1)]),
            Value::Array(vec![entry(0, 1, "h", 70000)]),
        ] {
            assert!(SlotMap::parse(&bad, "x").is_err(), "{bad:?}");
        }
    }
}
