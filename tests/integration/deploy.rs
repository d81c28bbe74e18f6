//! What can be checked of `deploy/` on one machine: the config serves locks with its safety
//! settings in force, the YAML parses and describes independent masters, the systemd unit
//! delays its start, and the ACL rule matches the one the ACL tests run under.

use std::time::Duration;

use redquorum::RedLock;
use yaml_rust2::{Yaml, YamlLoader};

use redquorum_testkit::Cluster;

const COMPOSE: &str = include_str!("../../deploy/docker-compose.yml");
const KUBERNETES: &str = include_str!("../../deploy/kubernetes/redlock.yaml");
const UNIT: &str = include_str!("../../deploy/systemd/redis-redlock@.service");
const REDIS_CONF: &str = include_str!("../../deploy/redis.conf");
const DEPLOY_README: &str = include_str!("../../deploy/README.md");

fn config_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/redis.conf")
}

#[tokio::test]
async fn servers_started_from_redis_conf_serve_locks_with_its_settings_in_force() {
    let cluster = Cluster::start_from_config(3, &config_path());
    for (setting, expected) in [
        ("appendonly", "yes"),
        ("appendfsync", "always"),
        ("maxmemory-policy", "noeviction"),
        ("save", ""),
        ("protected-mode", "yes"),
    ] {
        for node in 0..3 {
            let (_, value): (String, String) =
                cluster.run(node, redis::cmd("CONFIG").arg("GET").arg(setting));
            assert_eq!(value, expected, "{setting} on node {node}");
        }
    }
    let rl = RedLock::builder(cluster.urls())
        .fencing(true)
        .build()
        .expect("config");
    // Connected first, as below: the acquire's 50 ms per master is not for connecting.
    rl.connect_all().await.expect("connected");
    let lock = rl
        .try_acquire("deploy-check", Duration::from_secs(5))
        .await
        .expect("acquire on servers run from deploy/redis.conf");
    assert!(lock.fencing_token().is_some());
    lock.release().await.expect("release");
}

fn load(text: &str, name: &str) -> Vec<Yaml> {
    let docs = YamlLoader::load_from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(!docs.is_empty(), "{name} is empty");
    docs
}

/// Every string anywhere in a YAML tree.
fn strings(doc: &Yaml, out: &mut Vec<String>) {
    match doc {
        Yaml::String(s) => out.push(s.clone()),
        Yaml::Array(items) => items.iter().for_each(|i| strings(i, out)),
        Yaml::Hash(map) => map.iter().for_each(|(k, v)| {
            strings(k, out);
            strings(v, out);
        }),
        _ => {}
    }
}

/// `map[key]`, or the value it inherits through a `<<: *anchor` merge key (which the YAML
/// parser leaves unresolved).
fn merged<'a>(map: &'a Yaml, key: &str) -> &'a Yaml {
    match &map[key] {
        Yaml::BadValue => &map["<<"][key],
        value => value,
    }
}

fn no_replication(docs: &[Yaml], name: &str) {
    let mut all = Vec::new();
    docs.iter().for_each(|d| strings(d, &mut all));
    for word in ["replicaof", "slaveof", "sentinel"] {
        assert!(
            !all.iter().any(|s| s.to_lowercase().contains(word)),
            "{name} mentions {word}"
        );
    }
}

#[test]
fn the_compose_file_defines_five_independent_persistent_masters() {
    let docs = load(COMPOSE, "docker-compose.yml");
    let services = docs[0]["services"].as_hash().expect("services");
    assert_eq!(services.len(), 5);
    let mut volumes = Vec::new();
    for (name, service) in services {
        let name = name.as_str().expect("name");
        let image = merged(service, "image").as_str().expect("image");
        assert!(image.starts_with("redis:"), "{name}: {image}");
        let command: Vec<&str> = merged(service, "command")
            .as_vec()
            .expect("command")
            .iter()
            .filter_map(Yaml::as_str)
            .collect();
        assert_eq!(
            command.get(..2),
            Some(&["redis-server", "/usr/local/etc/redis/redis.conf"][..]),
            "{name} runs deploy/redis.conf"
        );
        let mounts: Vec<&str> = service["volumes"]
            .as_vec()
            .expect("volumes")
            .iter()
            .filter_map(Yaml::as_str)
            .collect();
        assert!(mounts.contains(&"./redis.conf:/usr/local/etc/redis/redis.conf:ro"));
        let data = mounts
            .iter()
            .find(|m| m.ends_with(":/data"))
            .unwrap_or_else(|| panic!("{name} keeps its AOF on a volume"));
        volumes.push(data.to_string());
    }
    volumes.sort();
    volumes.dedup();
    assert_eq!(volumes.len(), 5, "each master has its own data volume");
    no_replication(&docs, "docker-compose.yml");
}

#[test]
fn the_kubernetes_manifests_spread_five_masters_with_a_disruption_budget() {
    let docs = load(KUBERNETES, "kubernetes/redlock.yaml");
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"].as_str() == Some(k))
            .unwrap_or_else(|| panic!("no {k}"))
    };
    let set = kind("StatefulSet");
    assert_eq!(set["spec"]["replicas"].as_i64(), Some(5));
    let anti = &set["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        [0];
    assert_eq!(
        anti["topologyKey"].as_str(),
        Some("kubernetes.io/hostname"),
        "required anti-affinity by node"
    );
    assert!(!set["spec"]["volumeClaimTemplates"].is_badvalue());
    let pdb = kind("PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"].as_i64(), Some(1));
    let conf = kind("ConfigMap")["data"]["redis.conf"]
        .as_str()
        .expect("redis.conf");
    for line in [
        "appendonly yes",
        "appendfsync always",
        "maxmemory-policy noeviction",
    ] {
        assert!(conf.lines().any(|l| l.trim() == line), "missing {line}");
    }
    no_replication(&docs, "kubernetes/redlock.yaml");
}

#[test]
fn the_systemd_unit_delays_every_start() {
    let value = |key: &str| {
        UNIT.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}="))
    };
    let delay: u64 = value("Environment")
        .strip_prefix("REDLOCK_RESTART_DELAY=")
        .and_then(|v| v.parse().ok())
        .expect("a numeric REDLOCK_RESTART_DELAY");
    assert!(delay >= 30, "the default delay must cover typical ttls");
    assert!(value("ExecStartPre").contains("sleep \"$REDLOCK_RESTART_DELAY\""));
    assert_eq!(value("TimeoutStartSec"), "infinity");
    assert!(value("ExecStart").contains("redis-server"));
}

#[test]
fn the_deploy_docs_give_the_tested_acl_rule() {
    let rule = crate::acl::ACL_RULE;
    assert!(
        DEPLOY_README.contains(rule),
        "deploy/README.md must show {rule}"
    );
    let as_config = rule.replacen("ACL SETUSER ", "# user ", 1);
    assert!(
        REDIS_CONF.contains(&as_config),
        "deploy/redis.conf must show {as_config}"
    );
}

#[tokio::test]
async fn the_commented_acl_user_in_redis_conf_loads_and_works() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("redis.conf");
    let rule = crate::acl::ACL_RULE.replacen("ACL SETUSER ", "# user ", 1);
    std::fs::write(&conf, REDIS_CONF.replace(&rule, &rule[2..])).expect("write");
    let cluster = Cluster::start_from_config(3, &conf);
    let rl = RedLock::builder(cluster.urls_with("redquorum:CHANGE-ME"))
        .fencing(true)
        .build()
        .expect("config");
    // Connected first: the acquire's 50 ms per master (the default for a 5 s ttl) is for the
    // request, not for logging in, reading the server's identity and loading the scripts on
    // fresh connections, which a loaded machine (CI's model checker) did not fit into it.
    rl.connect_all().await.expect("connected as the user");
    let lock = rl
        .try_acquire("as-the-user", Duration::from_secs(5))
        .await
        .expect("acquire as the user the config file defines");
    lock.release().await.expect("release");
    // And only as that user's prefix.
    let other = RedLock::builder(cluster.urls_with("redquorum:CHANGE-ME"))
        .key_prefix("other:")
        .build()
        .expect("config");
    other.connect_all().await.expect("connected as the user");
    let err = other
        .try_acquire("x", Duration::from_secs(5))
        .await
        .expect_err("outside the prefix");
    assert!(err.is_no_quorum(), "{err}");
}
