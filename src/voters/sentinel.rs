//! A node whose master is found through Redis Sentinel: its URL form, its lookup, and the
//! watch of the sentinels that moves its vote to a new master after a failover.

use std::fmt;
use std::time::Duration;

use futures::StreamExt;
use redis::{Client, IntoConnectionInfo, RedisError};

use crate::voters::url::{invalid, redis_urls, write_addresses};

/// How long a broken watch of the sentinels' announcements waits before it tries again.
pub(super) const REWATCH_DELAY: Duration = Duration::from_millis(250);
/// How long the watch gives one sentinel to connect, subscribe or answer.
const SENTINEL_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the watch asks its sentinel again which master it names: a sentinel that went
/// silent (or an announcement lost with a connection) is noticed within this.
const REPOLL_EVERY: Duration = Duration::from_secs(2);
/// What a Sentinel lookup may take beyond a connection's own timeout: the redis crate asks
/// the sentinels at once but takes their answers in the configured order, each sentinel
/// bounded by its fixed 1 s connection timeout, so a black-holed first sentinel costs a second.
pub(super) const LOOKUP_SLACK: Duration = Duration::from_millis(1500);
/// The port a sentinel listens on when its URL gives none.
const SENTINEL_PORT: u16 = 26379;

/// The URL scheme of a Sentinel-resolved node.
pub(super) const SENTINEL_SCHEME: &str = "redis+sentinel://";
/// A node whose master is found through Redis Sentinel: the master named `master` by the
/// given sentinels, looked up again after every failover.
///
/// Each Sentinel group is **one vote**, however many servers it has: a failover inside it can
/// lose that node's key (replication is asynchronous), which costs that one vote, as a
/// master restarting empty does; the quorum of nodes tolerates up to ⌊(N−1)/2⌋ nodes
/// failing over (or restarting empty) within one ttl. A `restart_grace` treats a failover as
/// the restart it may be: the new master does not vote until the grace has passed.
///
/// The URL form is `redis+sentinel://[user:password@]host:port[,host:port…]/master[/db]`: the
/// credentials and database are the master's; the sentinels are asked without credentials
/// (give them in each sentinel's URL with [`SentinelNode::new`] if they need some). TLS to a
/// Sentinel-resolved master is not supported.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let orders = redquorum::SentinelNode::new(
///     "orders",
///     ["redis://10.0.0.7:26379", "redis://10.0.0.8:26379", "redis://10.0.0.9:26379"],
/// )?
/// .master_password(Some("locker"), "s3cret");
/// let same = redquorum::SentinelNode::parse(
///     "redis+sentinel://locker:s3cret@10.0.0.7:26379,10.0.0.8:26379,10.0.0.9:26379/orders",
/// )?;
/// assert_eq!(orders.to_string(), same.to_string());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SentinelNode {
    pub(super) master: String,
    pub(super) sentinels: Vec<redis::ConnectionInfo>,
    pub(super) master_settings: redis::RedisConnectionInfo,
}

impl SentinelNode {
    /// The master named `master` by the sentinels at `sentinels` (URLs such as
    /// `redis://host:26379`, or connection infos).
    ///
    /// # Errors
    /// An empty master name, no sentinel, or a sentinel address the redis crate cannot parse.
    pub fn new<I>(master: impl Into<String>, sentinels: I) -> Result<Self, RedisError>
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        let master = master.into();
        if master.is_empty() {
            return Err(invalid("a Sentinel node needs a master name"));
        }
        let sentinels = sentinels
            .into_iter()
            .map(IntoConnectionInfo::into_connection_info)
            .collect::<Result<Vec<_>, _>>()?;
        if sentinels.is_empty() {
            return Err(invalid("a Sentinel node needs at least one sentinel"));
        }
        Ok(Self {
            master,
            sentinels,
            master_settings: redis::RedisConnectionInfo::default(),
        })
    }

    /// Parses `redis+sentinel://[user:password@]host:port[,host:port…]/master[/db]`.
    ///
    /// # Errors
    /// Another scheme, no sentinel, no master name, or a part the redis crate cannot parse.
    pub fn parse(url: &str) -> Result<Self, RedisError> {
        let rest = url
            .strip_prefix(SENTINEL_SCHEME)
            .ok_or_else(|| invalid("a Sentinel node's URL starts with redis+sentinel://"))?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        // The credentials end at the last `@` of the authority (a password may contain `@`
        // percent-encoded only, but be lenient).
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (authority.get(..at), authority.get(at + 1..).unwrap_or("")),
            None => (None, authority),
        };
        let mut path = path.splitn(2, '/');
        let master = path.next().unwrap_or("");
        let db = path.next().unwrap_or("");
        if master.contains(['%', '?', '#']) {
            return Err(invalid(
                "a Sentinel node's master name cannot be percent-encoded or carry a query",
            ));
        }
        let mut node = Self::new(master, redis_urls(hosts, "", SENTINEL_PORT))?;
        // The master's credentials and database, decoded by the redis crate's own URL parser
        // (percent-encoding included) from a URL that carries only them.
        let userinfo = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let settings = Client::open(format!("redis://{userinfo}sentinel-master/{db}"))?;
        node.master_settings = settings.get_connection_info().redis_settings().clone();
        Ok(node)
    }

    /// The credentials of the master (not of the sentinels): an ACL user, or `None` for the
    /// default user with `requirepass`.
    pub fn master_password(mut self, username: Option<&str>, password: &str) -> Self {
        let mut settings = self.master_settings.set_password(password);
        if let Some(username) = username {
            settings = settings.set_username(username);
        }
        self.master_settings = settings;
        self
    }

    /// The master's database number.
    pub fn master_db(mut self, db: i64) -> Self {
        self.master_settings = self.master_settings.set_db(db);
        self
    }
}

impl fmt::Display for SentinelNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sentinel {}@", self.master)?;
        write_addresses(f, &self.sentinels)
    }
}

impl fmt::Debug for SentinelNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Addresses only, never credentials.
        f.debug_tuple("SentinelNode")
            .field(&self.to_string())
            .finish()
    }
}

/// Watches one sentinel: subscribes to its `+switch-master` announcements, then asks which
/// master it names (a switch just before the subscription is not missed: with `compare`, an
/// answer other than `current` returns at once), and asks again every [`REPOLL_EVERY`].
/// Returns when an announcement names `master` or the sentinel's answer changes; fails when
/// the sentinel does not connect, subscribe or answer within [`SENTINEL_TIMEOUT`], or closes
/// the connection.
pub(super) async fn watch_for_switch(
    sentinel: &redis::ConnectionInfo,
    master: &str,
    current: &str,
    compare: bool,
) -> Result<(), RedisError> {
    let client = Client::open(sentinel.clone())?;
    let timed_out = |what: &'static str| {
        RedisError::from((
            redis::ErrorKind::Io,
            "the sentinel timed out",
            what.to_owned(),
        ))
    };
    let mut pubsub = tokio::time::timeout(SENTINEL_TIMEOUT, async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe("+switch-master").await?;
        Ok::<_, RedisError>(pubsub)
    })
    .await
    .map_err(|_| timed_out("subscribing"))??;
    let mut conn =
        tokio::time::timeout(SENTINEL_TIMEOUT, client.get_multiplexed_async_connection())
            .await
            .map_err(|_| timed_out("connecting"))??;
    let mut named = async || {
        tokio::time::timeout(SENTINEL_TIMEOUT, async {
            let (host, port): (String, u16) = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(master)
                .query_async(&mut conn)
                .await?;
            Ok::<_, RedisError>(format!("{host}:{port}"))
        })
        .await
        .map_err(|_| timed_out("asking"))?
    };
    let first = named().await?;
    if compare && first != current {
        return Ok(());
    }
    let mut announcements = pubsub.on_message();
    loop {
        tokio::select! {
            message = announcements.next() => {
                let Some(message) = message else {
                    return Err(RedisError::from((
                        redis::ErrorKind::Io,
                        "the sentinel closed the announcements",
                    )));
                };
                // `<master name> <old ip> <old port> <new ip> <new port>`
                let payload: String = message.get_payload()?;
                if payload.split(' ').next() == Some(master) {
                    return Ok(());
                }
            }
            // A change of this sentinel's answer, not a disagreement with the lookup (another
            // sentinel may still name a dead master for a while).
            () = tokio::time::sleep(REPOLL_EVERY) => {
                if named().await? != first {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_names_its_sentinels_master_and_credentials() {
        let node = SentinelNode::parse(
            "redis+sentinel://lock%40er:p%40ss@127.0.0.1:26379,[::1]:26380/orders/3",
        )
        .expect("valid");
        assert_eq!(
            node.to_string(),
            "sentinel orders@127.0.0.1:26379,[::1]:26380"
        );
        let default_port =
            SentinelNode::parse("redis+sentinel://10.0.0.7,[::1]/orders").expect("valid");
        assert_eq!(
            default_port.to_string(),
            "sentinel orders@10.0.0.7:26379,[::1]:26379"
        );
        assert_eq!(node.master_settings.username(), Some("lock@er"));
        assert_eq!(node.master_settings.password(), Some("p@ss"));
        assert_eq!(node.master_settings.db(), 3);
        assert!(
            !format!("{node:?}").contains("p@ss"),
            "credentials never shown"
        );
        let plain = SentinelNode::parse("redis+sentinel://127.0.0.1:26379/orders").expect("ok");
        assert_eq!(plain.master_settings.password(), None);
        assert_eq!(plain.master_settings.db(), 0);
    }

    #[test]
    fn a_sentinel_url_without_master_or_sentinel_is_an_error() {
        for url in [
            "redis+sentinel://127.0.0.1:26379",
            "redis+sentinel://127.0.0.1:26379/",
            "redis+sentinel:///orders",
            "redis+sentinel://127.0.0.1:26379/ord%65rs",
            "redis+sentinel://127.0.0.1:26379/orders?x=1",
            "redis://127.0.0.1:6379",
        ] {
            assert!(SentinelNode::parse(url).is_err(), "{url}");
        }
    }
}
