//! Operator roles (SPEC §8): a viewer reads; an operator also resolves, closes and replays; the
//! treasury also credits accounts (money entering); an admin does everything. Not a line: an
//! operator cannot credit and the treasury cannot resolve, so "enough role" is [`Role::includes`],
//! never an ordering.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Viewer,
    Operator,
    /// Credits money into accounts (`POST /ops/v1/accounts/{id}/credits`) and reads like a viewer;
    /// nothing else (issue 27: the one door money enters by has its own duty).
    Treasury,
    Admin,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Viewer, Role::Operator, Role::Treasury, Role::Admin];

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Treasury => "treasury",
            Role::Admin => "admin",
        }
    }

    /// Whether this role may do what `needed` may: everyone reads, admin does everything, and
    /// operator and treasury each add their own actions to a viewer's.
    pub fn includes(self, needed: Role) -> bool {
        match needed {
            Role::Viewer => true,
            Role::Operator => matches!(self, Role::Operator | Role::Admin),
            Role::Treasury => matches!(self, Role::Treasury | Role::Admin),
            Role::Admin => self == Role::Admin,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::parse(s).ok_or_else(|| format!("unknown role `{s}`: use viewer, operator, treasury or admin"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_include_what_they_may_do_and_round_trip() {
        use Role::*;
        let may = |role: Role| Role::ALL.into_iter().filter(|needed| role.includes(*needed)).collect::<Vec<_>>();
        assert_eq!(may(Viewer), [Viewer]);
        assert_eq!(may(Operator), [Viewer, Operator]);
        assert_eq!(may(Treasury), [Viewer, Treasury]);
        assert_eq!(may(Admin), [Viewer, Operator, Treasury, Admin]);
        for role in Role::ALL {
            assert_eq!(Role::parse(role.as_str()), Some(role));
            assert_eq!(role.to_string().parse::<Role>(), Ok(role));
        }
        assert_eq!(Role::parse("root"), None);
    }
}
