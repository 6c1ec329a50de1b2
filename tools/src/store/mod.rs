//! The tools' own statements, kept out of the production crate: nothing here runs in the
//! service. Written with the library's connection macros, on both backends.

pub mod bench;
pub mod chaos;
pub mod notify;
pub mod server;
pub mod trends;
