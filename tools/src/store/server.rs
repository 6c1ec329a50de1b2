//! PostgreSQL server administration for throwaway databases (tests, `chaos`, `bench`): create or
//! drop a database beside the one a URL names, and the URL of the new one; the URL a service
//! connects at as a login role in `withdrawals_app` (migration 0028).

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

/// The URL of the migrated database at `owner_url` as the login role `role` (an identifier we
/// choose, with itself as its password), a member of `withdrawals_app`: the role a service runs as
/// when migrations are the owner's (README "Scaling"). Made on first use; roles belong to the
/// whole server, so processes sharing one may race to make it, and the loser finds it made.
pub async fn service_role_url(owner_url: &str, role: &str) -> anyhow::Result<String> {
    let mut admin = sqlx::PgConnection::connect(owner_url).await?;
    let create = format!(
        "DO $$ BEGIN CREATE ROLE {role} LOGIN PASSWORD '{role}' IN ROLE withdrawals_app; \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
    );
    admin.execute(create.as_str()).await?;
    admin.close().await?;
    let mut url = reqwest::Url::parse(owner_url)?;
    url.set_username(role).map_err(|()| anyhow::anyhow!("the database URL takes no user name"))?;
    url.set_password(Some(role)).map_err(|()| anyhow::anyhow!("the database URL takes no password"))?;
    Ok(url.to_string())
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
