//! Operator roles (SPEC §8): a viewer reads; an operator also resolves, closes and replays; the
//! treasury also credits accounts (money entering); an admin does everything. Not a line: an
//! operator cannot credit and the treasury cannot resolve, so "enough role" is [`Role::includes`],
//! never an ordering.

crate::text_enum! {
    #[derive(clap::ValueEnum)]
    pub enum Role("role", 4) {
        Viewer = "viewer",
        Operator = "operator",
        /// Credits money into accounts (`POST /ops/v1/accounts/{id}/credits`) and reads like a
        /// viewer; nothing else (issue 27: the one door money enters by has its own duty).
        Treasury = "treasury",
        Admin = "admin",
    }
}

impl Role {
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
        crate::assert_text_enum_round_trips!(Role);
    }
}
