//! Typed identifiers. All are UUIDs (v7 when generated here, so they sort by creation time and
//! keep B-tree inserts local); the newtypes stop a job id from being passed where a withdrawal
//! id is expected.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! id_type {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A new, time-ordered id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

id_type!(
    /// A customer account (the owner of balances and API keys).
    AccountId
);
id_type!(
    /// A withdrawal; also the provider's idempotency key for its payout (SPEC §4).
    WithdrawalId
);
id_type!(
    /// A durable job in the jobs table (SPEC §5).
    JobId
);
id_type!(
    /// A finance operator or on-call engineer (SPEC §8).
    OperatorId
);
