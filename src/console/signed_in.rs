//! The signed-in operator as every console page sees it: who, with what role, and the CSRF
//! token of the session. Read from the session cookie by `session` (the extractor lives there);
//! `views` renders with it, so this file depends on neither.

use uuid::Uuid;

use crate::ops::{Operator, Role};

/// A signed-in operator, read from the session cookie on every request.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: Uuid,
    pub operator: Operator,
    pub(super) csrf: String,
}

impl Session {
    /// The token every form of this session carries.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    pub fn can(&self, role: Role) -> bool {
        self.operator.role.includes(role)
    }
}
