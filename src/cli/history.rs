//! Flags of the fleet history: `--history` on the measuring commands, `history add|check`,
//! `fleet`, and the rules `fleet` and `qualify --against-fleet` judge by.

use crate::documents::fleet::{FleetFilters, FleetRules};
use crate::exit::Failure;
use crate::history::entry::Stated;
use crate::history::keep::Target;
use crate::history::Location;
use clap::{Args, Subcommand};
use std::path::PathBuf;

/// `--history [DB]` and who the run is from.
#[derive(Debug, Clone, Args, Default)]
#[command(next_help_heading = "Fleet history")]
pub struct HistoryArgs {
    /// Keep the run in a history store: a SQLite file, `postgres://user@host/db` for a store a
    /// fleet shares, or with no value the default file
    /// ($XDG_DATA_HOME/ncclprobe/history.sqlite). The run's own files are written first.
    #[arg(long, value_name = "DB", num_args = 0..=1, default_missing_value = "")]
    pub history: Option<String>,
    /// The node the run is from, as the fleet knows it (default: the host name).
    #[arg(long = "node-name", value_name = "NAME")]
    pub node_name: Option<String>,
    /// The node's SKU (default: the GPUs' count and model, `8x NVIDIA H100 80GB HBM3`).
    #[arg(long, value_name = "SKU")]
    pub sku: Option<String>,
}

impl HistoryArgs {
    /// Where to keep the run, or `None` without `--history`.
    pub fn target(&self) -> Result<Option<Target>, Failure> {
        let Some(text) = &self.history else {
            if self.node_name.is_some() || self.sku.is_some() {
                return Err(Failure::usage(
                    "--node-name and --sku say who a run is from for --history; give --history too",
                ));
            }
            return Ok(None);
        };
        let location = parse(text)?;
        Ok(Some(Target {
            location,
            stated: self.stated(),
        }))
    }

    pub fn stated(&self) -> Stated {
        Stated {
            node: self.node_name.clone(),
            sku: self.sku.clone(),
        }
    }
}

/// The rules a node is judged by against its fleet.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Fleet rules")]
pub struct FleetRuleArgs {
    /// Sizes judged against peers: this and larger (latency-bound sizes are noisy).
    #[arg(long = "fleet-min-size", value_name = "SIZE", default_value = "1M", value_parser = crate::units::parse_size)]
    pub fleet_min_size: u64,
    /// Below peers means under this fraction of their median bus bandwidth…
    #[arg(
        long = "fleet-min-ratio",
        value_name = "FRACTION",
        default_value_t = 0.9
    )]
    pub fleet_min_ratio: f64,
    /// …with a robust z-score (median and MAD of the peers) at or under this…
    #[arg(long = "fleet-max-z", value_name = "Z", default_value_t = -3.5, allow_hyphen_values = true)]
    pub fleet_max_z: f64,
    /// …and a rank test on raw samples that is a discovery at this false-discovery rate over
    /// every cell judged.
    #[arg(long = "fleet-fdr", value_name = "RATE", default_value_t = 0.01)]
    pub fleet_fdr: f64,
    /// Drift: a loss of more than this fraction since the node's baseline run (significant).
    #[arg(
        long = "fleet-max-drift",
        value_name = "FRACTION",
        default_value_t = 0.07
    )]
    pub fleet_max_drift: f64,
    /// Peers a point needs before nodes are judged there.
    #[arg(long = "fleet-min-peers", value_name = "N", default_value_t = 5)]
    pub fleet_min_peers: usize,
}

impl FleetRuleArgs {
    pub fn rules(&self) -> Result<FleetRules, Failure> {
        let unit = |v: f64, flag: &str| {
            if v.is_finite() && v > 0.0 && v < 1.0 {
                Ok(v)
            } else {
                Err(Failure::usage(format!(
                    "{flag} takes a fraction between 0 and 1, not {v}"
                )))
            }
        };
        if !self.fleet_max_z.is_finite() || self.fleet_max_z >= 0.0 {
            return Err(Failure::usage(format!(
                "--fleet-max-z takes a negative z-score (how far below the peers), not {}",
                self.fleet_max_z
            )));
        }
        Ok(FleetRules {
            min_size_bytes: self.fleet_min_size,
            min_ratio: unit(self.fleet_min_ratio, "--fleet-min-ratio")?,
            max_z: self.fleet_max_z,
            fdr: unit(self.fleet_fdr, "--fleet-fdr")?,
            max_drift: unit(self.fleet_max_drift, "--fleet-max-drift")?,
            min_peers: self.fleet_min_peers.max(2),
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum HistoryCommand {
    /// Add documents to the store: run records (sweep --json, gated or not), pair matrices
    /// (matrix --json) and nccl-tests output (text or -J JSON, imported on the way in).
    /// Adding a document twice changes nothing.
    #[command(after_help = super::examples::HISTORY_ADD)]
    Add(HistoryAddArgs),
    /// Check the store's consistency (SQLite's integrity check, rows without their run) and
    /// count what it holds; exit 3 when something is wrong.
    #[command(after_help = super::examples::HISTORY_CHECK)]
    Check(HistoryStoreArgs),
}

#[derive(Debug, Args)]
pub struct HistoryStoreArgs {
    /// The store: a SQLite file, `postgres://…`, or (no value) the default file.
    #[arg(long, value_name = "DB", num_args = 0..=1, default_missing_value = "")]
    pub history: Option<String>,
}

impl HistoryStoreArgs {
    pub fn location(&self) -> Result<Location, Failure> {
        parse(self.history.as_deref().unwrap_or(""))
    }
}

/// `--history`'s value as a store; the default file, when that is what it means, said on
/// stderr (which file a command read or wrote should never be a guess).
pub fn parse(text: &str) -> Result<Location, Failure> {
    let location = Location::parse(text).map_err(crate::history::keep::failure)?;
    if text.is_empty() {
        crate::term::note(&format!(
            "history: the default store {}",
            location.display()
        ));
    }
    Ok(location)
}

#[derive(Debug, Args)]
pub struct HistoryAddArgs {
    /// The documents.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub store: HistoryStoreArgs,
    /// The node the documents are from (default: the host they name).
    #[arg(long = "node-name", value_name = "NAME")]
    pub node_name: Option<String>,
    /// Their SKU (default: the GPUs' count and model they name).
    #[arg(long, value_name = "SKU")]
    pub sku: Option<String>,
}

/// What `fleet` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FleetFormat {
    Table,
    Json,
    Csv,
    Junit,
    Markdown,
}

#[derive(Debug, Args)]
pub struct FleetArgs {
    #[command(flatten)]
    pub store: HistoryStoreArgs,
    /// Runs started since: an RFC 3339 time or an age (`30d`, `12h`, `90m`).
    #[arg(long, value_name = "WHEN", help_heading = "Which nodes")]
    pub since: Option<String>,
    /// Only this SKU.
    #[arg(long, value_name = "SKU", help_heading = "Which nodes")]
    pub sku: Option<String>,
    /// Show only this node (it is still judged against all its peers).
    #[arg(long, value_name = "NAME", help_heading = "Which nodes")]
    pub node: Option<String>,
    #[command(flatten)]
    pub rules: FleetRuleArgs,
    /// table: the drain list and the fleet; csv: the drain list, one reason a row; junit: one
    /// test case per node; json: everything; markdown: for an issue or a ticket.
    #[arg(long, value_enum, default_value_t = FleetFormat::Table, help_heading = "Output")]
    pub format: FleetFormat,
    /// Also write the fleet page (drain list, nodes × collectives heat map of the ratio to
    /// peers, a trend line per drained node) here, self-contained HTML.
    #[arg(long, value_name = "PAGE", help_heading = "Output")]
    pub html: Option<PathBuf>,
}

impl FleetArgs {
    pub fn filters(&self) -> FleetFilters {
        FleetFilters {
            since: self.since.clone(),
            sku: self.sku.clone(),
            node: self.node.clone(),
        }
    }
}
