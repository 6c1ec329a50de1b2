//! The operator core's failures: the service layer's [`ServiceError`] under the operator
//! vocabulary (see [`crate::refusal`]).

pub use crate::refusal::{Refusal, RefusalKind, ServiceError as OpsError, ServiceResult as OpsResult};
