//! `elect --metrics ADDR`: a Prometheus endpoint (metrics-exporter-prometheus's listener, so
//! the library's own `redquorum_*` metrics are served too) with the candidate's leadership.

use std::net::SocketAddr;

use metrics_exporter_prometheus::PrometheusBuilder;

use crate::exit::CliError;

/// 1 while this candidate leads the election, 0 otherwise.
pub(crate) const LEADER: &str = "redquorum_cli_leader";
/// Terms this candidate won.
pub(crate) const TERMS_WON: &str = "redquorum_cli_terms_won_total";
/// Leaderships lost while the command ran (not counting resignations).
pub(crate) const LEADERSHIP_LOST: &str = "redquorum_cli_leadership_lost_total";

/// Serves every metric recorded from now on at `address` (any path), from the runtime.
///
/// # Errors
/// A usage error (exit 64) when the address cannot be bound (in use, not local).
///
/// # Panics
/// Outside a tokio runtime (the exporter spawns its listener on it).
pub(crate) fn serve(address: SocketAddr) -> Result<(), CliError> {
    PrometheusBuilder::new()
        .with_http_listener(address)
        .install()
        .map_err(|e| CliError::usage(format!("--metrics {address}: {e}")))?;
    metrics::describe_gauge!(
        LEADER,
        "1 while this candidate leads the election, 0 otherwise"
    );
    metrics::describe_counter!(TERMS_WON, "Terms this candidate won");
    metrics::describe_counter!(
        LEADERSHIP_LOST,
        "Leaderships lost while the command ran (resignations not counted)"
    );
    Ok(())
}

/// The leadership metrics of one election (no-ops when nothing is served).
#[derive(Debug)]
pub(crate) struct Leadership {
    resource: String,
}

impl Leadership {
    /// Starts at "not leading", so the gauge exists before the first term.
    pub(crate) fn new(resource: &str) -> Self {
        let this = Self {
            resource: resource.to_owned(),
        };
        this.leading(false);
        this
    }

    pub(crate) fn elected(&self) {
        metrics::counter!(TERMS_WON, "resource" => self.resource.clone()).increment(1);
        self.leading(true);
    }

    pub(crate) fn lost(&self) {
        metrics::counter!(LEADERSHIP_LOST, "resource" => self.resource.clone()).increment(1);
        self.leading(false);
    }

    pub(crate) fn stepped_down(&self) {
        self.leading(false);
    }

    fn leading(&self, yes: bool) {
        metrics::gauge!(LEADER, "resource" => self.resource.clone()).set(if yes {
            1.0
        } else {
            0.0
        });
    }
}
