//! The queries behind the database gauges (withdrawals by state and their ages, open dead letters).

use super::{Db, DbTime, Result};
use crate::with_read_conn;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StateCount {
    pub status: String,
    pub count: i64,
    pub oldest_change: Option<DbTime>,
}

pub async fn withdrawals_by_state(db: &Db) -> Result<Vec<StateCount>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, StateCount>(
            "SELECT status, COUNT(*) AS count, MIN(updated_at) AS oldest_change FROM withdrawals GROUP BY status",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OpenDeadLetters {
    pub count: i64,
    pub oldest: Option<DbTime>,
}

pub async fn open_dead_letters(db: &Db) -> Result<OpenDeadLetters> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, OpenDeadLetters>(
            "SELECT COUNT(*) AS count, MIN(d.failed_at) AS oldest FROM dead_letters d
             WHERE NOT EXISTS (SELECT 1 FROM dead_letter_events e WHERE e.dead_letter_id = d.id AND e.action = 'closed')",
        )
        .fetch_one(&mut *conn)
        .await?
    }))
}
