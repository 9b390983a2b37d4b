//! One report channel from a part's threads to whoever listens (in the NIF:
//! a BEAM process, which emits telemetry): periodic stats and events, pushed
//! the same way by every part.
//!
//! A [`Report`] is a kind (`"stats"`, `"roll"`, `"failed"`, ...) and a list of
//! named [`Value`]s; a [`Reporter`] is the callback a thread calls with it.
//! Reports are rare (a stats interval, a segment roll, a failure): they
//! allocate, the hot paths never report. [`Ticker`] tells a thread when its
//! next periodic report is due, without overflow for any interval a user
//! gives (an interval too large for the clock means never).

use std::time::{Duration, Instant};

/// One value of a report.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
    /// A name (an atom on the BEAM side).
    Atom(&'static str),
    Text(String),
    Nil,
    Map(Vec<(&'static str, Value)>),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::U64(v)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}

impl From<&'static str> for Value {
    fn from(v: &'static str) -> Value {
        Value::Atom(v)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Nil, Into::into)
    }
}

/// A snapshot of named values (a part's stats): what `stats/1` returns on
/// the BEAM side and what the periodic stats reports carry, one map key per
/// field. Declared with [`named_fields!`](crate::named_fields), never
/// written by hand.
pub trait Fields {
    fn fields(&self) -> Vec<(&'static str, Value)>;
}

/// Declares a struct of named values and derives its [`Fields`]: every
/// field under its own name, then the `computed` ones (methods of the
/// struct, by the same name). One list of names for the struct, the NIF's
/// map and the reports.
///
/// ```
/// tachyon_core::named_fields! {
///     #[derive(Debug, Default)]
///     pub struct Counts {
///         pub sent: u64,
///         pub lost: u64,
///     }
///     computed { total }
/// }
/// impl Counts {
///     pub fn total(&self) -> u64 { self.sent + self.lost }
/// }
/// use tachyon_core::report::{Fields, Value};
/// let c = Counts { sent: 2, lost: 1 };
/// assert_eq!(c.fields()[2], ("total", Value::U64(3)));
/// ```
#[macro_export]
macro_rules! named_fields {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$fmeta:meta])* $fvis:vis $field:ident : $ty:ty ),* $(,)?
        }
        $( computed { $($computed:ident),* $(,)? } )?
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $( $(#[$fmeta])* $fvis $field: $ty ),*
        }

        impl $crate::report::Fields for $name {
            fn fields(&self) -> Vec<(&'static str, $crate::report::Value)> {
                vec![
                    $( (stringify!($field), $crate::report::Value::from(self.$field.clone())), )*
                    $($( (stringify!($computed), $crate::report::Value::from(self.$computed())), )*)?
                ]
            }
        }
    };
}

/// A stats snapshot or an event.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub kind: &'static str,
    pub fields: Vec<(&'static str, Value)>,
}

impl Report {
    pub fn new(kind: &'static str, fields: Vec<(&'static str, Value)>) -> Report {
        Report { kind, fields }
    }

    /// The value of field `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

/// Called on a part's thread with each report.
pub type Reporter = Box<dyn FnMut(Report) + Send>;

/// When a thread's next periodic report is due.
#[derive(Debug, Clone)]
pub struct Ticker {
    every: Option<Duration>,
    at: Option<Instant>,
}

impl Ticker {
    /// Due every `every` from now (`None`: never).
    pub fn new(every: Option<Duration>) -> Ticker {
        Ticker {
            every,
            at: every.and_then(|d| Instant::now().checked_add(d)),
        }
    }

    /// Whether a report is due now; if so, the next one is scheduled.
    pub fn due(&mut self) -> bool {
        let Some(at) = self.at else {
            return false;
        };
        let now = Instant::now();
        if now < at {
            return false;
        }
        self.at = self.every.and_then(|d| now.checked_add(d));
        true
    }

    /// How long until the next report (`None`: never).
    pub fn remaining(&self) -> Option<Duration> {
        self.at
            .map(|at| at.saturating_duration_since(Instant::now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_interval_never_fires_and_never_panics() {
        let mut t = Ticker::new(Some(Duration::from_millis(u64::MAX)));
        assert!(!t.due());
        assert!(t
            .remaining()
            .is_some_and(|r| r > Duration::from_secs(1 << 40)));
        let mut t = Ticker::new(Some(Duration::MAX));
        assert!(!t.due());
        let mut t = Ticker::new(None);
        assert!(!t.due());
        let mut t = Ticker::new(Some(Duration::ZERO));
        assert!(t.due());
        assert!(t.due());
    }

    #[test]
    fn reports_carry_named_values() {
        let r = Report::new(
            "stats",
            vec![("written", 3u64.into()), ("pinned", None::<bool>.into())],
        );
        assert_eq!(r.get("written"), Some(&Value::U64(3)));
        assert_eq!(r.get("pinned"), Some(&Value::Nil));
        assert_eq!(r.get("nope"), None);
    }
}
