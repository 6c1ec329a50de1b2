//! `DbTime`: a UTC instant stored identically by both backends.
//!
//! PostgreSQL keeps `timestamptz` (microseconds). SQLite has no time type, and sqlx's own
//! encoding writes a variable number of fractional digits, which breaks ordering by text; so
//! SQLite gets fixed-width `YYYY-MM-DDTHH:MM:SS.ffffffZ`, which sorts as time does. Instants are
//! truncated to microseconds when made, so a value read back equals the value written on both.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo, PgValueRef};
use sqlx::sqlite::{SqliteArgumentValue, SqliteTypeInfo, SqliteValueRef};
use sqlx::{Decode, Encode, Postgres, Sqlite, Type};

const SQLITE_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.6fZ";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DbTime(pub DateTime<Utc>);

impl DbTime {
    /// The current instant at the precision both backends store.
    pub fn now() -> Self {
        Self::from(Utc::now())
    }

    pub fn plus(self, delta: TimeDelta) -> Self {
        Self::from(self.0 + delta)
    }

    /// The instant `delay` from now: when a rescheduled job runs next. A delay too long to
    /// represent (no policy asks for one) is held to a hundred years, never a panic.
    pub fn after(delay: std::time::Duration) -> Self {
        const FAR: TimeDelta = TimeDelta::days(36_525);
        let delta = TimeDelta::from_std(delay).unwrap_or(FAR).min(FAR);
        Self::now().plus(delta)
    }

    /// An instant from a client-supplied Unix time in microseconds (page cursors), or None when
    /// it is outside 1970–9999: both backends can store every instant in that range, and nothing
    /// this service wrote lies outside it.
    pub fn from_client_micros(micros: i64) -> Option<Self> {
        use chrono::Datelike;
        let t = DateTime::from_timestamp_micros(micros)?;
        (1970..=9999).contains(&t.year()).then(|| Self::from(t))
    }
}

impl From<DateTime<Utc>> for DbTime {
    fn from(t: DateTime<Utc>) -> Self {
        Self(t.duration_trunc(TimeDelta::microseconds(1)).unwrap_or(t))
    }
}

impl Type<Sqlite> for DbTime {
    fn type_info() -> SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }
}

impl<'q> Encode<'q, Sqlite> for DbTime {
    fn encode_by_ref(&self, buf: &mut Vec<SqliteArgumentValue<'q>>) -> Result<IsNull, BoxDynError> {
        <String as Encode<'q, Sqlite>>::encode(self.0.format(SQLITE_FORMAT).to_string(), buf)
    }
}

impl<'r> Decode<'r, Sqlite> for DbTime {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <&str as Decode<'r, Sqlite>>::decode(value)?;
        let parsed = DateTime::parse_from_rfc3339(text)?.with_timezone(&Utc);
        Ok(Self(parsed))
    }
}

impl Type<Postgres> for DbTime {
    fn type_info() -> PgTypeInfo {
        <DateTime<Utc> as Type<Postgres>>::type_info()
    }
}

impl Encode<'_, Postgres> for DbTime {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <DateTime<Utc> as Encode<Postgres>>::encode_by_ref(&self.0, buf)
    }
}

impl<'r> Decode<'r, Postgres> for DbTime {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Self(<DateTime<Utc> as Decode<'r, Postgres>>::decode(value)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_is_now_plus_the_delay_and_never_panics_on_a_huge_one() {
        let before = DbTime::now();
        let soon = DbTime::after(std::time::Duration::from_secs(90));
        assert!(soon.0 - before.0 >= TimeDelta::seconds(90) && soon.0 - before.0 < TimeDelta::seconds(95));
        let far = DbTime::after(std::time::Duration::MAX);
        assert!(far.0 - before.0 >= TimeDelta::days(36_525) - TimeDelta::seconds(5));
    }

    #[test]
    fn sqlite_text_sorts_like_time() {
        let a = DbTime::from(DateTime::parse_from_rfc3339("2026-01-01T00:00:00.5Z").unwrap().to_utc());
        let b = DbTime::from(DateTime::parse_from_rfc3339("2026-01-01T00:00:00.25Z").unwrap().to_utc());
        let (ta, tb) = (a.0.format(SQLITE_FORMAT).to_string(), b.0.format(SQLITE_FORMAT).to_string());
        assert_eq!(ta, "2026-01-01T00:00:00.500000Z");
        assert!(tb < ta);
        assert_eq!(DateTime::parse_from_rfc3339(&ta).unwrap().to_utc(), a.0);
    }
}
