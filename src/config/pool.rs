//! The database pool's settings that are not part of the URL.

use std::time::Duration;

/// Connection settings that are not part of the URL.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self { max_connections: 16, acquire_timeout: Duration::from_secs(10) }
    }
}
