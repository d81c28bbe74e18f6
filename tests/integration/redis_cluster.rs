//! The test harness's Redis Cluster (`redquorum_testkit::RedisCluster`), the ground for
//! Cluster voters: it forms with every slot assigned, and a key lives on its slot's owner only
//! (another master answers `MOVED`).

use redquorum_testkit::RedisCluster;

/// Mutation: `owner_of` answering server 0 for every key: the write to the "owner" of a key
/// of another slot is refused with `MOVED`.
#[test]
fn a_test_cluster_forms_and_routes_each_key_to_its_slots_owner() {
    let cluster = RedisCluster::start(3);
    let servers = cluster.servers();
    let mut owners = std::collections::BTreeSet::new();
    for key in ["{a}", "{b}", "{c}", "{d}", "{e}", "{f}"] {
        let owner = cluster.owner_of(key.as_bytes());
        owners.insert(owner);
        let _: () = servers.run(owner, redis::cmd("SET").arg(key).arg("v"));
        let elsewhere = (owner + 1) % servers.len();
        let moved: redis::RedisResult<()> = redis::cmd("SET")
            .arg(key)
            .arg("v")
            .query(&mut servers.server(elsewhere).inspect());
        let err = moved.expect_err("another master does not serve the slot");
        assert_eq!(err.code(), Some("MOVED"), "{err}");
    }
    assert!(owners.len() > 1, "six slots, one owner: {owners:?}");
}
