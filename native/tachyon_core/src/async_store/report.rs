//! What the writer reports, and its form on the shared report channel.

use super::{Failure, Stats};
use crate::report::Fields;
use crate::report::Value;

impl From<Report> for crate::report::Report {
    /// The writer's report on the shared report channel: `stats`,
    /// `writer_failed` (`reason`, `detail`, `stats`) or `stopped`.
    fn from(r: Report) -> Self {
        match r {
            Report::Stats(s) => Self::new("stats", s.fields()),
            Report::Failed(f, s) => Self::new(
                "writer_failed",
                vec![
                    ("reason", Value::Atom(f.reason())),
                    ("detail", Value::Text(f.to_string())),
                    ("stats", Value::Map(s.fields())),
                ],
            ),
            Report::Stopped(s) => Self::new("stopped", s.fields()),
        }
    }
}

/// What the writer tells its reporter.
#[derive(Debug, Clone)]
pub enum Report {
    /// Periodic, every `stats_interval`.
    Stats(Stats),
    /// The writer stopped on this failure (the last report).
    Failed(Failure, Stats),
    /// The writer stopped after a close, everything written (the last report).
    Stopped(Stats),
}

/// Called on the writer thread.
pub type Reporter = Box<dyn FnMut(Report) + Send>;
