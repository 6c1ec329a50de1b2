//! PostgreSQL server administration for throwaway databases (tests, `chaos`, `bench`): create or
//! drop a database beside the one a URL names, and the URL of the new one.

use sqlx::{Connection, Executor};

use withdrawals::storage::Result;

/// `postgres://u@h:p/db?x` → `postgres://u@h:p/NAME?x`.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let root = match base[authority_start..].find('/') {
        Some(i) => &base[..authority_start + i],
        None => base,
    };
    match query {
        Some(q) => format!("{root}/{name}?{q}"),
        None => format!("{root}/{name}"),
    }
}

/// Creates database `name` (an identifier we generate) on the server `server_url` points at;
/// returns its URL.
pub async fn create_database(server_url: &str, name: &str) -> Result<String> {
    let mut admin = sqlx::PgConnection::connect(server_url).await?;
    admin.execute(format!("CREATE DATABASE {name}").as_str()).await?;
    admin.close().await?;
    Ok(with_database(server_url, name))
}

pub async fn drop_database(server_url: &str, name: &str) -> Result<()> {
    let mut admin = sqlx::PgConnection::connect(server_url).await?;
    admin.execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str()).await?;
    admin.close().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_names_are_replaced_in_urls() {
        assert_eq!(with_database("postgres://u@h:5/postgres", "b"), "postgres://u@h:5/b");
        assert_eq!(
            with_database("postgres://u@h:5/postgres?sslmode=disable", "b"),
            "postgres://u@h:5/b?sslmode=disable"
        );
        assert_eq!(with_database("postgres://u@h:5", "b"), "postgres://u@h:5/b");
    }
}
