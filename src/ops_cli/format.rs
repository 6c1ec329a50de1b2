//! How the tables print values: ages, absent values, times and rates, as the API writes them.

use std::fmt::Display;

use chrono::{DateTime, SecondsFormat, Utc};

pub(super) fn age(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7_200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

pub(super) fn age_or_dash(seconds: Option<i64>) -> String {
    seconds.map_or_else(|| "-".to_owned(), age)
}

/// A value that may be absent (`-`).
pub(super) fn o<T: Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".to_owned(), T::to_string)
}

/// A time as the API writes it.
pub(super) fn at(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

pub(super) fn at_or_dash(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(|| "-".to_owned(), at)
}

/// A rate as the API writes it (`0.0`, `2.5`).
pub(super) fn rate(per_second: f64) -> String {
    serde_json::Number::from_f64(per_second).map_or_else(|| "-".to_owned(), |n| n.to_string())
}
